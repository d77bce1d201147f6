package rediscoord

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/floodgate-go/floodgate/region"
	"github.com/redis/go-redis/v9"
)

// TestPeersTwin applies the same random messages to a region.MemPeers and
// to a Peers on miniredis (and on the Redis at REDIS_ADDR when set), and
// requires the same replies: the Lua is MemPeers' twin. Leases are long
// enough not to end during the test; TestPeersLease ends them.
func TestPeersTwin(t *testing.T) {
	mr := miniredis.RunT(t)
	clients := map[string]redis.UniversalClient{"miniredis": redis.NewClient(&redis.Options{Addr: mr.Addr()})}
	if a := os.Getenv("REDIS_ADDR"); a != "" {
		clients["redis"] = redis.NewClient(&redis.Options{Addr: a})
	}
	for name, client := range clients {
		t.Cleanup(func() { _ = client.Close() })
		t.Run(name, func(t *testing.T) {
			for seed := range uint64(20) {
				rp, err := NewPeers(client, "eu", &PeersOptions{Prefix: fmt.Sprintf("twin%d:{p}:%d:", time.Now().UnixNano(), seed)})
				if err != nil {
					t.Fatal(err)
				}
				mp := region.NewMemPeers(nil)
				rng := rand.New(rand.NewPCG(seed, 11))
				members := []string{"m1", "m2", "m3"}
				for step := range 200 {
					m := &region.PeerMessage{Member: members[rng.IntN(3)], Lead: time.Hour}
					switch rng.IntN(10) {
					case 0:
						m.Lead = 0 // give the lead up
					case 1:
						m.Member = fmt.Sprint("new", step) // a process that just started
					}
					for range rng.IntN(4) {
						m.Quotas = append(m.Quotas, region.PeerQuota{Name: fmt.Sprint("api", rng.IntN(2)), Key: fmt.Sprint("k:", rng.IntN(3)),
							Limit: 100, Window: time.Duration(1+rng.IntN(2)) * time.Minute, Asked: rng.Int64N(3) * rng.Int64N(50)})
					}
					if rng.IntN(3) == 0 {
						m.Publish = true
						for range rng.IntN(3) {
							g := region.PeerGrant{Name: "api0", Key: fmt.Sprint("k:", rng.IntN(3)), Limit: 100, Window: time.Minute}
							for w := range rng.IntN(4) {
								g.Windows = append(g.Windows, region.WindowGrant{Window: 1000 + int64(w), Granted: rng.Int64N(100)})
							}
							m.Grants = append(m.Grants, g)
						}
					}
					want, err := mp.Sync(context.Background(), m)
					if err != nil {
						t.Fatal(err)
					}
					got, err := rp.Sync(context.Background(), m)
					if err != nil {
						t.Fatalf("seed %d, step %d: %v", seed, step, err)
					}
					// Demand comes in no particular order.
					byQuota := func(a, b region.PeerQuota) int { return strings.Compare(field(a), field(b)) }
					slices.SortFunc(got.Demand, byQuota)
					slices.SortFunc(want.Demand, byQuota)
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("seed %d, step %d: message %+v\nRedis: %+v\nGo:    %+v", seed, step, m, got, want)
					}
				}
			}
		})
	}
}

// TestPeersLease ends a lease on the server's clock (miniredis'
// FastForward): another member takes the lead only then.
func TestPeersLease(t *testing.T) {
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	p, err := NewPeers(client, "eu", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lead := func(member string) bool {
		t.Helper()
		r, err := p.Sync(ctx, &region.PeerMessage{Member: member, Lead: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return r.Leader
	}
	if !lead("x") || lead("y") {
		t.Fatal("x should lead, y not")
	}
	mr.FastForward(2999 * time.Millisecond)
	if lead("y") {
		t.Fatal("y led within x's lease")
	}
	mr.FastForward(2 * time.Millisecond)
	if !lead("y") || lead("x") {
		t.Fatal("y should lead once x's lease ended, x not")
	}
}

func TestNewPeers(t *testing.T) {
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	for _, o := range []*PeersOptions{{Prefix: "x:"}, {Prefix: "x:{}:"}, {TTL: -time.Second}} {
		if _, err := NewPeers(client, "eu", o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("NewPeers(%+v) = %v", o, err)
		}
	}
	if _, err := NewPeers(nil, "eu", nil); !errors.Is(err, ErrInvalidOptions) {
		t.Error("NewPeers(nil client) = nil error")
	}
	if _, err := NewPeers(client, "", nil); !errors.Is(err, ErrInvalidOptions) {
		t.Error("NewPeers(no name) = nil error")
	}
	p, _ := NewPeers(client, "eu", nil)
	if _, err := p.Sync(context.Background(), &region.PeerMessage{}); !errors.Is(err, region.ErrInvalid) {
		t.Errorf("Sync(no member) = %v", err)
	}
}

// FuzzParseField checks that parseField inverts field and never panics.
func FuzzParseField(f *testing.F) {
	f.Add("api", "k", int64(10), int64(time.Second), "")
	f.Add("a:b", ":x:", int64(1), int64(1), "month/0/3600/Europe/Paris")
	f.Fuzz(func(t *testing.T, name, key string, limit, w int64, cal string) {
		want := region.PeerQuota{Name: name, Key: key, Limit: limit, Window: time.Duration(w), Calendar: cal}
		q, ok := parseField(field(want))
		if !ok || q != want {
			t.Fatalf("parseField(field(%+v)) = %+v, %v", want, q, ok)
		}
		_, _ = parseField(name + key + cal)
	})
}
