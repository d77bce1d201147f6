package rls

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
)

// TestJointSpendsNothing: with Joint on Redis, a request denied by one
// descriptor never holds another's units, even for a moment. After three
// calls to the special route of #427 (its limit is 3; its group's is 10),
// 32 goroutines keep calling it, every call denied by the route, while 7
// calls to the group alone come in: the group has exactly 7 units left,
// and each of the 7 is admitted. Deciding the descriptors at once and
// refunding (Parallel, no Joint), the denied calls' group takes, not yet
// refunded, deny some of the 7.
func TestJointSpendsNothing(t *testing.T) {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		t.Skip("REDIS_ADDR unset")
	}
	denied := jointRound(t, addr, true)
	if denied != 0 {
		t.Fatalf("with Joint, %d of 7 calls to the group alone were denied with 7 units left", denied)
	}
}

// jointRound runs the scenario and returns how many of the 7 calls to
// the group alone were denied.
func jointRound(t *testing.T, addr string, joint bool) int {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	svc := newService(t, newRedisStore(t, rdb, nil), nil, cfg427, &Options{Parallel: true, Coalesce: true, Joint: joint, Timeout: 2 * time.Second})
	ctx := context.Background()
	both := &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlpb.RateLimitDescriptor{desc("route_group=api"), desc("route=special")}}
	group := &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlpb.RateLimitDescriptor{desc("route_group=api")}}
	for range 3 {
		if r, err := svc.ShouldRateLimit(ctx, both); err != nil || r.OverallCode != pb.RateLimitResponse_OK {
			t.Fatalf("a call within the route's 3: %v, %v", r, err)
		}
	}
	var stop atomic.Bool
	var started, wrong atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for !stop.Load() {
				r, err := svc.ShouldRateLimit(ctx, both)
				if err != nil || r.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
					wrong.Add(1)
				}
				started.Add(1)
			}
		})
	}
	for started.Load() < 200 {
		// let the denied calls pile up
	}
	deniedAlone := 0
	for range 7 {
		r, err := svc.ShouldRateLimit(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		if r.OverallCode != pb.RateLimitResponse_OK {
			deniedAlone++
		}
	}
	stop.Store(true)
	wg.Wait()
	if n := wrong.Load(); n > 0 {
		t.Fatalf("%d calls to the special route were not OVER_LIMIT", n)
	}
	return deniedAlone
}
