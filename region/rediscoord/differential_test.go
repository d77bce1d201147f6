package rediscoord

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/floodgate-go/floodgate/region"
	"github.com/redis/go-redis/v9"
)

var regions = []region.Region{{Name: "eu", Floor: 0.05}, {Name: "us", Floor: 0.1, Weight: 2}, {Name: "ap"}}

// TestTwin applies the same random messages to a MemCoordinator and to a
// Coordinator on miniredis, and requires the same replies: the Lua is the
// Go ledger's twin.
func TestTwin(t *testing.T) {
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	testTwin(t, client, "twin:{t}:")
}

func testTwin(t *testing.T, client redis.UniversalClient, prefix string) {
	for seed := range uint64(20) {
		rc, err := New(client, regions, &Options{Prefix: fmt.Sprintf("%s%d:", prefix, seed)})
		if err != nil {
			t.Fatal(err)
		}
		mc, _ := region.NewMemCoordinator(regions)
		rng := rand.New(rand.NewPCG(seed, 9))
		at := time.UnixMilli(1_700_000_000_000 + rng.Int64N(1e6))
		ids := []string{}
		for step := range 200 {
			// Report times travel at millisecond precision.
			at = at.Add(time.Duration(rng.Int64N(int64(3 * time.Second)))).Truncate(time.Millisecond)
			m := &region.Message{Region: regions[rng.IntN(3)].Name, At: at}
			for k := range 1 + rng.IntN(2) {
				q := region.QuotaMessage{ID: fmt.Sprint("q", k), Limit: 100 + int64(k)*900, Window: 10 * time.Second}
				w := region.WindowIndex(at, q.Window)
				if k == 1 && seed%2 == 0 {
					// A calendar quota (in every message of the seed):
					// windows numbered by the sender.
					w = w/7 + 5000
					q.Indexed, q.Index = true, w
				}
				if rng.IntN(2) == 0 {
					q.Report = &region.Report{Rate: rng.Float64() * 100, Window: w, Used: rng.Int64N(50)}
				}
				for range rng.IntN(3) {
					id := fmt.Sprint("t", rng.IntN(1000))
					if len(ids) > 0 && rng.IntN(3) == 0 {
						id = ids[rng.IntN(len(ids))] // a retried transfer
					}
					ids = append(ids, id)
					q.Debits = append(q.Debits, region.Debit{ID: id, Window: w + rng.Int64N(4) - 2, Units: 1 + rng.Int64N(60)})
				}
				for range rng.IntN(3) {
					q.Raises = append(q.Raises, region.Raise{Window: w + rng.Int64N(3) - 1, To: rng.Int64N(q.Limit + 10)})
				}
				m.Quotas = append(m.Quotas, q)
			}
			want, err := mc.Exchange(context.Background(), m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := rc.Exchange(context.Background(), m)
			if err != nil {
				t.Fatalf("seed %d, step %d: %v", seed, step, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d, step %d: message %+v\nRedis: %+v\nGo:    %+v", seed, step, m, got, want)
			}
		}
	}
}

func TestNew(t *testing.T) {
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	for _, p := range []string{"x:", "x:{}:", "x:{"} {
		if _, err := New(client, regions, &Options{Prefix: p}); err == nil {
			t.Errorf("New(Prefix %q) = nil error", p)
		}
	}
	if _, err := New(nil, regions, nil); err == nil {
		t.Error("New(nil client) = nil error")
	}
}
