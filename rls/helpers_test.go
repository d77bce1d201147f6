package rls

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/headers"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/redisstore"
)

// clock is a virtual clock for the stores and the service.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// t0 is 10 seconds into a minute (and an hour, and a day).
var t0 = time.Date(2026, 3, 2, 10, 0, 10, 0, time.UTC)

// storeKind names a store the tests run on.
type storeKind struct {
	name string
	make func(t *testing.T, now func() time.Time) floodgate.Store
}

// stores returns memstore, and the standalone Redis and the Cluster of
// REDIS_ADDR and REDIS_CLUSTER_ADDRS when they are set.
func stores(t *testing.T) []storeKind {
	t.Helper()
	kinds := []storeKind{{"memstore", func(t *testing.T, now func() time.Time) floodgate.Store {
		s, err := memstore.New(&memstore.Options{Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}}}
	// memstore behind a network's latency, so that concurrent calls overlap
	// as they do on Redis (and Coalesce groups them) without a server.
	kinds = append(kinds, storeKind{"memstore+latency", func(t *testing.T, now func() time.Time) floodgate.Store {
		return slowStore{kinds[0].make(t, now)}
	}})
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		kinds = append(kinds, storeKind{"redis", func(t *testing.T, now func() time.Time) floodgate.Store {
			rdb := redis.NewClient(&redis.Options{Addr: addr})
			t.Cleanup(func() { _ = rdb.Close() })
			return newRedisStore(t, rdb, now)
		}})
	}
	if addrs := os.Getenv("REDIS_CLUSTER_ADDRS"); addrs != "" {
		kinds = append(kinds, storeKind{"cluster", func(t *testing.T, now func() time.Time) floodgate.Store {
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ",")})
			t.Cleanup(func() { _ = rdb.Close() })
			return newRedisStore(t, rdb, now)
		}})
	}
	// Each store again with Options.Parallel, Options.Coalesce, both, and
	// Options.Joint (which only a redisstore.Store can do; the others
	// decide as Parallel).
	base := kinds[:len(kinds):len(kinds)]
	for _, v := range []struct {
		name                      string
		parallel, coalesce, joint bool
	}{{"parallel", true, false, false}, {"coalesce", false, true, false}, {"parallel+coalesce", true, true, false}, {"parallel+joint", true, true, true}} {
		for _, k := range base {
			mk := k.make
			kinds = append(kinds, storeKind{k.name + "/" + v.name, func(t *testing.T, now func() time.Time) floodgate.Store {
				return optionStore{mk(t, now), v.parallel, v.coalesce, v.joint}
			}})
		}
	}
	return kinds
}

// optionStore marks a store whose service newService builds with
// Options.Parallel and Options.Coalesce as it says.
type optionStore struct {
	floodgate.Store
	parallel, coalesce, joint bool
}

var prefixSeq struct {
	sync.Mutex
	n int
}

// newRedisStore returns a store on rdb under a key prefix of its own, so
// that tests never meet each other's keys (nor flush anything).
func newRedisStore(t *testing.T, rdb redis.UniversalClient, now func() time.Time) *redisstore.Store {
	t.Helper()
	prefixSeq.Lock()
	prefixSeq.n++
	n := prefixSeq.n
	prefixSeq.Unlock()
	s, err := redisstore.New(rdb, &redisstore.Options{
		Prefix:  fmt.Sprintf("fgrls:%d:%d:", time.Now().UnixNano(), n),
		Now:     now,
		Timeout: time.Second, // healthy servers on a loaded host: no failure policy in these tests
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// newService returns a service on store with the configuration yml.
func newService(t *testing.T, store floodgate.Store, now func() time.Time, yml string, opts *Options) *Service {
	t.Helper()
	cfg, err := ParseConfig(File{Name: "test.yaml", Data: []byte(yml)})
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	o := Options{Now: now, Timeout: 2 * time.Second}
	if opts != nil {
		o = *opts
		o.Now = now
	}
	if p, ok := store.(optionStore); ok {
		store, o.Parallel, o.Coalesce, o.Joint = p.Store, p.parallel, p.coalesce, p.joint
	}
	svc, err := New(store, cfg, &o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	return svc
}

// desc builds a descriptor from "key=value" pairs.
func desc(pairs ...string) *rlpb.RateLimitDescriptor {
	d := &rlpb.RateLimitDescriptor{}
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		d.Entries = append(d.Entries, &rlpb.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

func withHits(d *rlpb.RateLimitDescriptor, n uint64) *rlpb.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func request(domain string, descs ...*rlpb.RateLimitDescriptor) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: domain, Descriptors: descs}
}

func call(t *testing.T, svc *Service, req *pb.RateLimitRequest) *pb.RateLimitResponse {
	t.Helper()
	resp, err := svc.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v) error: %v", req, err)
	}
	return resp
}

// answer is the part of a response the peer comparison looks at.
type answer struct {
	Overall   string
	Codes     []string
	Remaining []uint32
	Reset     []int64
}

func (a answer) String() string {
	return fmt.Sprintf("%s %v remaining=%v reset=%v", a.Overall, a.Codes, a.Remaining, a.Reset)
}

func answerOf(r *pb.RateLimitResponse) answer {
	a := answer{Overall: r.GetOverallCode().String()}
	for _, s := range r.GetStatuses() {
		a.Codes = append(a.Codes, s.GetCode().String())
		a.Remaining = append(a.Remaining, s.GetLimitRemaining())
		a.Reset = append(a.Reset, s.GetDurationUntilReset().GetSeconds())
	}
	return a
}

const headersAll = headers.StyleIETF | headers.StyleDraft | headers.StyleX

// slowStore gives every call of its store a round trip of 200µs more, as
// a network would, so that concurrent calls overlap.
type slowStore struct{ floodgate.Store }

func (s slowStore) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	b, err := s.Store.Bind(name, alg)
	if err != nil {
		return nil, err
	}
	return slowBound{b}, nil
}

type slowBound struct{ floodgate.Bound }

func (b slowBound) Apply(ctx context.Context, key string, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	time.Sleep(200 * time.Microsecond)
	return b.Bound.Apply(ctx, key, req, each)
}
