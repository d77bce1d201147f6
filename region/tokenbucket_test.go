package region_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/region"
	"github.com/redis/go-redis/v9"
)

// bindRecorder is a local store that records what it is asked to bind.
type bindRecorder struct {
	floodgate.Store
	mu    sync.Mutex
	binds []string
}

func (r *bindRecorder) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	r.mu.Lock()
	r.binds = append(r.binds, fmt.Sprintf("%s %v", name, alg))
	r.mu.Unlock()
	return r.Store.Bind(name, alg)
}

// TestTokenBucketSplit: a TokenBucket is split as the FixedWindow of
// Burst/2 units per (Burst/2)/Rate·Per, rounded up, under its name and
// "#tb"; one it cannot split is refused with ErrInvalidConfig.
func TestTokenBucketSplit(t *testing.T) {
	coord, _ := region.NewMemCoordinator(regions)
	c := &clock{time.Unix(6000, 0)}
	ms, _ := memstore.New(&memstore.Options{Now: c.now})
	local := &bindRecorder{Store: ms}
	s, err := region.New(local, coord, regions, "a", &region.Options{Manual: true, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, tc := range []struct {
		alg  floodgate.Algorithm
		want string
	}{
		{floodgate.TokenBucket{Rate: 100, Per: time.Second, Burst: 1000}, fmt.Sprint(floodgate.FixedWindow{Limit: 500, Window: 5 * time.Second})},
		{&floodgate.TokenBucket{Rate: 100, Per: time.Second, Burst: 1001}, fmt.Sprint(floodgate.FixedWindow{Limit: 500, Window: 5 * time.Second})},
		// 20 units at 3 a second: 6.666…s, rounded up to the microsecond.
		{floodgate.TokenBucket{Rate: 3, Per: time.Second, Burst: 40}, fmt.Sprint(floodgate.FixedWindow{Limit: 20, Window: 6666667 * time.Microsecond})},
		{floodgate.TokenBucket{Rate: 10000, Per: time.Minute, Burst: 10000}, fmt.Sprint(floodgate.FixedWindow{Limit: 5000, Window: 30 * time.Second})},
	} {
		local.binds = nil
		name := fmt.Sprint("api", i)
		if _, err := floodgate.New(s, tc.alg, &floodgate.Options{Name: name}); err != nil {
			t.Fatalf("New(%v): %v", tc.alg, err)
		}
		if want := name + "#tb " + tc.want; !slices.Contains(local.binds, want) {
			t.Errorf("%v: the local store bound %q, want %q", tc.alg, local.binds, want)
		}
	}
	for _, tc := range []struct {
		alg  floodgate.Algorithm
		name string
		msg  string
	}{
		{floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 1}, "api", "Burst 1 is below 2"},
		{floodgate.TokenBucket{Rate: 100, Per: time.Second, Burst: 100}, "api", "shorter than 4·Interval + 2·Margin"},
		{floodgate.TokenBucket{Rate: 0, Per: time.Second, Burst: 100}, "api", ""},
		{floodgate.TokenBucket{Rate: 1, Per: 24 * time.Hour, Burst: 1000}, "api", "MaxWindow"},
		{floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 100}, strings.Repeat("n", floodgate.MaxNameLen), "#tb"},
	} {
		_, err := floodgate.New(s, tc.alg, &floodgate.Options{Name: tc.name})
		if !errors.Is(err, floodgate.ErrInvalidConfig) || !strings.Contains(fmt.Sprint(err), tc.msg) {
			t.Errorf("New(%v) = %v, want ErrInvalidConfig saying %q", tc.alg, err, tc.msg)
		}
	}
	// A TokenBucket and a FixedWindow under one name keep apart.
	fw, _ := floodgate.New(s, floodgate.FixedWindow{Limit: 500, Window: 5 * time.Second}, &floodgate.Options{Name: "api"})
	tb, _ := floodgate.New(s, floodgate.TokenBucket{Rate: 100, Per: time.Second, Burst: 1000}, &floodgate.Options{Name: "api"})
	ctx := context.Background()
	if d, err := fw.AllowN(ctx, "k", 50); err != nil || !d.Allowed {
		t.Fatalf("fixed window: %+v, %v", d, err)
	}
	if d, err := tb.AllowN(ctx, "k", 50); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("token bucket after the fixed window's 50: %+v, %v; want its own floor of 50 admitted: the fixed window's 50 are not its", d, err)
	}
	// More than Burst/2 at once is never admitted, and no error: the
	// bucket's Burst bounds a take (floodgate.Store).
	if d, err := tb.AllowN(ctx, "k", 501); err != nil || d.Allowed || d.RetryAfter <= 0 {
		t.Fatalf("AllowN(501) of a burst of 1,000 = %+v, %v; want a denial", d, err)
	}
	if _, err := tb.AllowN(ctx, "k", 1001); !errors.Is(err, floodgate.ErrExceedsLimit) {
		t.Fatalf("AllowN(1001) of a burst of 1,000 = %v, want ErrExceedsLimit", err)
	}
	// The split bound first as the FixedWindow it is (as a process of the
	// region's Peers binds the quotas it learns of): the bucket's
	// Decisions still report its Burst, and deny more than Burst/2.
	if _, err := floodgate.New(s, floodgate.FixedWindow{Limit: 500, Window: 5 * time.Second}, &floodgate.Options{Name: "peer#tb"}); err != nil {
		t.Fatal(err)
	}
	tb2, err := floodgate.New(s, floodgate.TokenBucket{Rate: 100, Per: time.Second, Burst: 1000}, &floodgate.Options{Name: "peer"})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := tb2.AllowN(ctx, "k", 10); err != nil || !d.Allowed || d.Limit != 1000 {
		t.Fatalf("AllowN(10) = %+v, %v; want admitted, Limit 1000", d, err)
	}
	if d, err := tb2.AllowN(ctx, "k", 600); err != nil || d.Allowed || d.Limit != 1000 {
		t.Fatalf("AllowN(600) = %+v, %v; want a denial, Limit 1000", d, err)
	}
}

// TestTokenBucketNeverAboveBucket runs three regions sharing a token
// bucket of 100/s with a burst of 1,000, split by demand, in virtual
// time: demand 60/30/10 at 1.2 times the rate, a step to 10/30/60, then
// demand at 0.4 times the rate with bursts of every region on both sides
// of every window boundary. Over every interval of every length, what
// the regions admitted together is at most what the bucket would have
// admitted starting full, Burst + Rate·t; in the steady windows at least
// 95% of the rate is used.
func TestTokenBucketNeverAboveBucket(t *testing.T) {
	testBucketNeverAbove(t, func(_ int, now func() time.Time) floodgate.Store {
		local, _ := memstore.New(&memstore.Options{Now: now})
		return local
	})
}

// TestTokenBucketNeverAboveBucketRedis runs it with each region's local
// store on the Redis at REDIS_ADDR (under a prefix of its own), on the
// test's virtual clock.
func TestTokenBucketNeverAboveBucketRedis(t *testing.T) {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		t.Skip("REDIS_ADDR unset")
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	prefix := fmt.Sprintf("tbsplit%d:", time.Now().UnixNano())
	testBucketNeverAbove(t, func(i int, now func() time.Time) floodgate.Store {
		local, err := redisstore.New(rdb, &redisstore.Options{Prefix: fmt.Sprint(prefix, i, ":"), Now: now, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = local.Close() })
		return local
	})
}

func testBucketNeverAbove(t *testing.T, newLocal func(i int, now func() time.Time) floodgate.Store) {
	regions3 := []region.Region{{Name: "a", Floor: 0.05}, {Name: "b", Floor: 0.05}, {Name: "c", Floor: 0.05}}
	coord, _ := region.NewMemCoordinator(regions3)
	c := &clock{time.Unix(6000, 0)}
	alg := floodgate.TokenBucket{Rate: 100, Per: time.Second, Burst: 1000}
	const window = 5 * time.Second // (Burst/2)/Rate·Per
	ctx := context.Background()
	var stores [3]*region.Store
	var lims [3]*floodgate.Limiter
	for i, r := range regions3 {
		local := newLocal(i, c.now)
		s, err := region.New(local, coord, regions3, r.Name, &region.Options{Manual: true, Now: c.now})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stores[i] = s
		if lims[i], err = floodgate.New(s, alg, &floodgate.Options{Name: "api"}); err != nil {
			t.Fatal(err)
		}
	}
	const (
		step   = 10 * time.Millisecond
		length = 100 * time.Second
	)
	demand := func(at time.Duration) [3]float64 {
		switch {
		case at < 30*time.Second:
			return [3]float64{72, 36, 12}
		case at < 60*time.Second:
			return [3]float64{12, 36, 72}
		}
		return [3]float64{} // only the bursts below
	}
	start := c.t
	var admitted []time.Time
	perWindow := map[int64]int64{}
	var due [3]float64
	for at := time.Duration(0); at < length; at += step {
		c.t = start.Add(at)
		into := at % window
		// Bursts at the end of even windows and the start of odd ones,
		// just outside Margin (250ms) of the boundary, where each
		// window's own grants bound the decisions: two windows' quotas
		// within 600ms.
		odd := (at/window)%2 == 1
		burst := at >= 60*time.Second && (odd && into >= 260*time.Millisecond && into < 290*time.Millisecond ||
			!odd && into >= window-290*time.Millisecond && into < window-260*time.Millisecond)
		for r := range lims {
			due[r] += demand(at)[r] * step.Seconds()
			n := int(due[r])
			due[r] -= float64(n)
			if burst {
				n += 300 // every region at once, on both sides of the boundary
			}
			for range n {
				d, err := lims[r].Allow(ctx, "tenant")
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					admitted = append(admitted, c.t)
					perWindow[c.t.UnixNano()/int64(window)]++
				}
			}
		}
		if at%time.Second == 0 {
			for _, s := range stores {
				_ = s.Reconcile(ctx)
			}
		}
	}
	// Every interval [t_i, t_j]: j-i+1 ≤ Burst + Rate·(t_j-t_i), that is
	// (j - Rate·t_j) - (i - Rate·t_i) + 1 ≤ Burst: the smallest i - Rate·t_i
	// so far is the worst start.
	rate := float64(alg.Rate) / alg.Per.Seconds()
	worst, lowest := 0.0, 0.0
	for j, tj := range admitted {
		v := float64(j) - rate*tj.Sub(start).Seconds()
		if j == 0 || v < lowest {
			lowest = v
		}
		worst = max(worst, v-lowest+1)
	}
	t.Logf("%d admitted in %v; the most above Rate·t in any interval: %.1f (Burst %d)", len(admitted), length, worst, alg.Burst)
	if worst > float64(alg.Burst)+1e-6 {
		t.Errorf("an interval admitted %.1f above Rate·t, more than the bucket's Burst %d", worst, alg.Burst)
	}
	first := start.UnixNano() / int64(window)
	for w := first + 1; w < first+12; w++ {
		if w == first+6 || w == first+7 {
			continue // the step, at 30s
		}
		t.Logf("window %d: admitted %d of the rate's 500", w-first, perWindow[w])
		if got := perWindow[w]; got < 500*95/100 {
			t.Errorf("window %d: admitted %d, below 95%% of the rate's 500", w-first, got)
		}
	}
}
