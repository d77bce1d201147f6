package rls

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

const cfg427 = `
domain: shop
descriptors:
  - key: route_group
    value: api
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: route
    value: special
    rate_limit:
      unit: minute
      requests_per_unit: 3
`

// TestIssue427 is envoyproxy/ratelimit #427: a request under a 10/min group
// limit and a 3/min limit of its own route. Five calls admit three; the two
// denied by the route's limit spend nothing of the group's, which keeps 7
// (the peer leaves 5).
func TestIssue427(t *testing.T) {
	for _, sk := range stores(t) {
		t.Run(sk.name, func(t *testing.T) {
			clk := newClock(t0)
			svc := newService(t, sk.make(t, clk.Now), clk.Now, cfg427, nil)
			req := request("shop", desc("route_group=api"), desc("route=special"))
			var got []string
			for range 5 {
				got = append(got, answerOf(call(t, svc, req)).String())
			}
			want := []string{
				"OK [OK OK] remaining=[9 2] reset=[50 50]",
				"OK [OK OK] remaining=[8 1] reset=[50 50]",
				"OK [OK OK] remaining=[7 0] reset=[50 50]",
				"OVER_LIMIT [OK OVER_LIMIT] remaining=[7 0] reset=[50 50]",
				"OVER_LIMIT [OK OVER_LIMIT] remaining=[7 0] reset=[50 50]",
			}
			require.Equal(t, want, got)
			// The group's own count: a check of it alone.
			r := call(t, svc, request("shop", withHits(desc("route_group=api"), 0)))
			require.Equal(t, uint32(7), r.Statuses[0].LimitRemaining, "group remaining after 5 calls")
			// The denied descriptor first: the group, checked (in order) or
			// taken and refunded (Parallel), reports what it has left.
			r = call(t, svc, request("shop", desc("route=special"), desc("route_group=api")))
			require.Equal(t, "OVER_LIMIT [OVER_LIMIT OK] remaining=[0 7] reset=[50 50]", answerOf(r).String())
		})
	}
}

// TestFixedWindowSequence checks one descriptor's answers through a window
// and into the next, on the virtual clock.
func TestFixedWindowSequence(t *testing.T) {
	const yml = `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
`
	for _, sk := range stores(t) {
		t.Run(sk.name, func(t *testing.T) {
			clk := newClock(t0)
			svc := newService(t, sk.make(t, clk.Now), clk.Now, yml, nil)
			req := request("d", desc("user=alice"))
			var got []string
			for i := range 5 {
				got = append(got, answerOf(call(t, svc, req)).String())
				if i == 3 {
					clk.Add(49*time.Second + 500*time.Millisecond) // 59.5s into the minute
				}
			}
			clk.Add(time.Second) // the next minute
			got = append(got, answerOf(call(t, svc, req)).String())
			want := []string{
				"OK [OK] remaining=[2] reset=[50]",
				"OK [OK] remaining=[1] reset=[50]",
				"OK [OK] remaining=[0] reset=[50]",
				"OVER_LIMIT [OVER_LIMIT] remaining=[0] reset=[50]",
				"OVER_LIMIT [OVER_LIMIT] remaining=[0] reset=[1]",
				"OK [OK] remaining=[2] reset=[60]",
			}
			require.Equal(t, want, got)
			// Another value of the key has its own counter.
			require.Equal(t, "OK [OK] remaining=[2] reset=[60]", answerOf(call(t, svc, request("d", desc("user=bob")))).String())
		})
	}
}

// TestHitsAddendZero: hits_addend 0 reports without spending, and is never
// over a limit it has not passed.
func TestHitsAddendZero(t *testing.T) {
	const yml = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 2}
`
	for _, sk := range stores(t) {
		t.Run(sk.name, func(t *testing.T) {
			clk := newClock(t0)
			svc := newService(t, sk.make(t, clk.Now), clk.Now, yml, nil)
			check := request("d", withHits(desc("k=v"), 0))
			take := request("d", desc("k=v"))
			require.Equal(t, "OK [OK] remaining=[2] reset=[3590]", answerOf(call(t, svc, check)).String())
			require.Equal(t, "OK [OK] remaining=[2] reset=[3590]", answerOf(call(t, svc, check)).String())
			call(t, svc, take)
			require.Equal(t, "OK [OK] remaining=[1] reset=[3590]", answerOf(call(t, svc, check)).String())
			call(t, svc, take)
			require.Equal(t, "OK [OK] remaining=[0] reset=[3590]", answerOf(call(t, svc, check)).String())
			require.Equal(t, "OVER_LIMIT [OVER_LIMIT] remaining=[0] reset=[3590]", answerOf(call(t, svc, take)).String())
			// Request-level hits_addend applies where a descriptor has none.
			svc2 := newService(t, sk.make(t, clk.Now), clk.Now, yml, nil)
			r := request("d", desc("k=w"))
			r.HitsAddend = 2
			require.Equal(t, "OK [OK] remaining=[0] reset=[3590]", answerOf(call(t, svc2, r)).String())
			// More hits than the limit holds: over, and nothing spent.
			r = request("d", withHits(desc("k=x"), 5))
			require.Equal(t, "OVER_LIMIT [OVER_LIMIT] remaining=[0] reset=[3590]", answerOf(call(t, svc2, r)).String())
			require.Equal(t, "OK [OK] remaining=[1] reset=[3590]", answerOf(call(t, svc2, request("d", desc("k=x")))).String())
		})
	}
}

// TestShadowAndQuotaMode: a shadow-mode limit answers OK when over and
// counts shadow_mode; it neither denies the request nor makes the other
// descriptors refund. quota_mode answers OK without a reset.
func TestShadowAndQuotaMode(t *testing.T) {
	const yml = `
domain: d
descriptors:
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: real
    rate_limit: {unit: minute, requests_per_unit: 5}
`
	for _, sk := range stores(t) {
		t.Run(sk.name, func(t *testing.T) {
			clk := newClock(t0)
			svc := newService(t, sk.make(t, clk.Now), clk.Now, yml, nil)
			req := request("d", desc("shadow=a"), desc("quota=a"), desc("real=a"))
			require.Equal(t, "OK [OK OK OK] remaining=[0 0 4] reset=[50 50 50]", answerOf(call(t, svc, req)).String())
			require.Equal(t, "OK [OK OK OK] remaining=[0 0 3] reset=[50 0 50]", answerOf(call(t, svc, req)).String())
			c := svc.Stats().Counts("d.shadow")
			require.Equal(t, Counts{TotalHits: 2, OverLimit: 1, NearLimit: 1, WithinLimit: 1, ShadowMode: 1}, c)
			c = svc.Stats().Counts("d.quota")
			require.Equal(t, Counts{TotalHits: 2, OverLimit: 1, NearLimit: 1, WithinLimit: 1}, c)
		})
	}
}

// TestTokenBucketDescriptor: algorithm token_bucket with a burst; the
// bucket refills at requests_per_unit per unit.
func TestTokenBucketDescriptor(t *testing.T) {
	const yml = `
domain: d
descriptors:
  - key: tb
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: token_bucket, burst: 4}
`
	for _, sk := range stores(t) {
		t.Run(sk.name, func(t *testing.T) {
			clk := newClock(t0)
			svc := newService(t, sk.make(t, clk.Now), clk.Now, yml, nil)
			req := request("d", desc("tb=x"))
			var codes []string
			for range 5 {
				codes = append(codes, answerOf(call(t, svc, req)).Codes[0])
			}
			require.Equal(t, []string{"OK", "OK", "OK", "OK", "OVER_LIMIT"}, codes)
			clk.Add(500 * time.Millisecond) // one token back
			r := call(t, svc, req)
			require.Equal(t, pb.RateLimitResponse_OK, r.OverallCode)
			require.Equal(t, pb.RateLimitResponse_OVER_LIMIT, call(t, svc, req).OverallCode)
		})
	}
}

// TestHeaders: the binding descriptor's IETF fields on every answer, and
// Retry-After on OVER_LIMIT; the trios by option.
func TestHeaders(t *testing.T) {
	clk := newClock(t0)
	svc := newService(t, stores(t)[0].make(t, clk.Now), clk.Now, cfg427, nil)
	req := request("shop", desc("route_group=api"), desc("route=special"))
	h := headerMap(call(t, svc, req))
	require.Equal(t, map[string]string{
		"Ratelimit":        `"shop.route_special";r=2;t=50`,
		"Ratelimit-Policy": `"shop.route_special";q=3;w=60`,
	}, h)
	call(t, svc, req)
	call(t, svc, req)
	h = headerMap(call(t, svc, req))
	require.Equal(t, map[string]string{
		"Ratelimit":        `"shop.route_special";r=0;t=50`,
		"Ratelimit-Policy": `"shop.route_special";q=3;w=60`,
		"Retry-After":      "50",
	}, h)

	opts := &Options{Headers: headersAll}
	svc = newService(t, stores(t)[0].make(t, clk.Now), clk.Now, cfg427, opts)
	h = headerMap(call(t, svc, req))
	require.Equal(t, "2", h["X-Ratelimit-Remaining"])
	require.Equal(t, "2", h["Ratelimit-Remaining"])

	svc = newService(t, stores(t)[0].make(t, clk.Now), clk.Now, cfg427, &Options{NoHeaders: true})
	require.Empty(t, headerMap(call(t, svc, req)))
}

func headerMap(r *pb.RateLimitResponse) map[string]string {
	m := map[string]string{}
	for _, h := range r.GetResponseHeadersToAdd() {
		m[h.GetKey()] = h.GetValue()
	}
	return m
}

// TestNoLimitUnlimitedReplaces: descriptors with no limit and unlimited
// ones answer OK as the peer does; a named limit that another replaces is
// not applied.
func TestNoLimitUnlimitedReplaces(t *testing.T) {
	const yml = `
domain: d
descriptors:
  - key: free
    rate_limit: {unlimited: true}
  - key: base
    rate_limit: {unit: minute, requests_per_unit: 1, name: base}
  - key: premium
    rate_limit:
      unit: minute
      requests_per_unit: 100
      replaces:
        - name: base
`
	clk := newClock(t0)
	svc := newService(t, stores(t)[0].make(t, clk.Now), clk.Now, yml, nil)
	r := call(t, svc, request("d", desc("free=x"), desc("nolimit=y")))
	require.Equal(t, "OK [OK OK] remaining=[4294967295 0] reset=[0 0]", answerOf(r).String())
	r = call(t, svc, request("other-domain", desc("free=x")))
	require.Equal(t, "OK [OK] remaining=[0] reset=[0]", answerOf(r).String())
	for range 3 {
		r = call(t, svc, request("d", desc("base=u"), desc("premium=u")))
		require.Equal(t, pb.RateLimitResponse_OK, r.OverallCode)
	}
	call(t, svc, request("d", desc("base=u")))
	require.Equal(t, pb.RateLimitResponse_OVER_LIMIT, call(t, svc, request("d", desc("base=u"))).OverallCode)
}

// TestLimitOverride: a limit carried by the request replaces the
// configuration's, and its count belongs to the descriptor.
func TestLimitOverride(t *testing.T) {
	const yml = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 100}
`
	clk := newClock(t0)
	svc := newService(t, stores(t)[0].make(t, clk.Now), clk.Now, yml, nil)
	o := func(n uint32) *rlpb.RateLimitDescriptor {
		d := desc("k=v")
		d.Limit = &rlpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: 2 /* MINUTE */}
		return d
	}
	require.Equal(t, "OK [OK] remaining=[1] reset=[50]", answerOf(call(t, svc, request("d", o(2)))).String())
	require.Equal(t, "OK [OK] remaining=[0] reset=[50]", answerOf(call(t, svc, request("d", o(2)))).String())
	require.Equal(t, "OVER_LIMIT [OVER_LIMIT] remaining=[0] reset=[50]", answerOf(call(t, svc, request("d", o(2)))).String())
	// A higher override continues from the count, and is not denied by a
	// denial cached under the lower one (envoyproxy/ratelimit #1077).
	require.Equal(t, "OK [OK] remaining=[2] reset=[50]", answerOf(call(t, svc, request("d", o(5)))).String())
	// The configured limit is another counter.
	require.Equal(t, "OK [OK] remaining=[99] reset=[50]", answerOf(call(t, svc, request("d", desc("k=v")))).String())
}

// TestBadRequests: an empty domain or descriptor list is an error, as in
// the peer; so is a call before any configuration.
func TestBadRequests(t *testing.T) {
	clk := newClock(t0)
	store := stores(t)[0].make(t, clk.Now)
	svc := newService(t, store, clk.Now, cfg427, nil)
	_, err := svc.ShouldRateLimit(context.Background(), request("", desc("a=b")))
	require.ErrorContains(t, err, "domain must not be empty")
	_, err = svc.ShouldRateLimit(context.Background(), request("shop"))
	require.ErrorContains(t, err, "descriptor list must not be empty")
	empty, err := New(store, nil, nil)
	require.NoError(t, err)
	_, err = empty.ShouldRateLimit(context.Background(), request("shop", desc("a=b")))
	require.ErrorContains(t, err, "no rate limit configuration loaded")
}

// TestAllOrNothingConcurrent: many goroutines send requests of two
// descriptors, a shared group limit and per-route limits. No limit ever
// admits more than it holds, every admitted request spent exactly one unit
// of each of its descriptors, and denied requests spent nothing: once the
// refunds landed, each counter equals the admissions that crossed it.
func TestAllOrNothingConcurrent(t *testing.T) {
	const yml = `
domain: c
descriptors:
  - key: group
    rate_limit: {unit: hour, requests_per_unit: 40}
  - key: route
    rate_limit: {unit: hour, requests_per_unit: 7}
`
	for _, sk := range stores(t) {
		t.Run(sk.name, func(t *testing.T) {
			clk := newClock(t0)
			svc := newService(t, sk.make(t, clk.Now), clk.Now, yml, nil)
			const routes, workers, perWorker = 8, 16, 25
			var admitted [routes]atomic.Int64
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for i := range perWorker {
						r := (w + i) % routes
						resp := call(t, svc, request("c", desc("group=g"), desc("route="+string(rune('a'+r)))))
						if resp.OverallCode == pb.RateLimitResponse_OK {
							admitted[r].Add(1)
						}
					}
				})
			}
			wg.Wait()
			require.NoError(t, svc.Close())
			var total int64
			for r := range routes {
				n := admitted[r].Load()
				require.LessOrEqual(t, n, int64(7), "route %d admitted", r)
				total += n
				rem := call(t, svc, request("c", withHits(desc("route="+string(rune('a'+r))), 0))).Statuses[0].LimitRemaining
				require.Equal(t, 7-n, int64(rem), "route %d: remaining after %d admissions", r, n)
			}
			require.LessOrEqual(t, total, int64(40))
			rem := call(t, svc, request("c", withHits(desc("group=g"), 0))).Statuses[0].LimitRemaining
			require.Equal(t, 40-total, int64(rem), "group remaining after %d admissions", total)
			// 400 requests for 8 routes of 7 under a group of 40: the
			// group binds.
			require.Equal(t, int64(40), total)
		})
	}
}

// TestWildcards: a trailing '*' matches by prefix, in file order, before
// the key-only default; nested descriptors apply only at their depth.
func TestWildcards(t *testing.T) {
	const yml = `
domain: w
descriptors:
  - key: path
    value: /api/v1/*
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: client
    value: "*"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 4}
`
	clk := newClock(t0)
	svc := newService(t, stores(t)[0].make(t, clk.Now), clk.Now, yml, nil)
	rem := func(pairs ...string) uint32 {
		return call(t, svc, request("w", desc(pairs...))).Statuses[0].LimitRemaining
	}
	require.Equal(t, uint32(0), rem("path=/api/v1/users"))
	require.Equal(t, uint32(1), rem("path=/api/v2/users"))
	require.Equal(t, uint32(2), rem("path=/other"))
	// share_threshold: every client shares one counter.
	require.Equal(t, uint32(1), rem("client=a"))
	require.Equal(t, uint32(0), rem("client=b"))
	// The limit is at the second level: one entry has none.
	require.Equal(t, "OK [OK] remaining=[0] reset=[0]", answerOf(call(t, svc, request("w", desc("tenant=t1")))).String())
	require.Equal(t, uint32(3), rem("tenant=t1", "user=u"))
	require.Equal(t, uint32(3), rem("tenant=t2", "user=u"))
	require.Equal(t, uint32(2), rem("tenant=t1", "user=u"))
	// Deeper than the configuration: no limit.
	require.Equal(t, "OK [OK] remaining=[0] reset=[0]", answerOf(call(t, svc, request("w", desc("tenant=t1", "user=u", "x=y")))).String())
}

// TestCalendarDescriptor: algorithm calendar counts per civil month in a
// time zone from a reset time, and duration_until_reset is the time to the
// next reset exactly (here 08:00 on 1 April in Tokyo, 23:00 UTC the day
// before); a year works too.
func TestCalendarDescriptor(t *testing.T) {
	const yml = `
domain: d
descriptors:
  - key: month
    rate_limit: {unit: month, requests_per_unit: 2, algorithm: calendar, time_zone: Asia/Tokyo, reset: "08:00"}
  - key: year
    rate_limit: {unit: year, requests_per_unit: 1, algorithm: calendar}
`
	start := time.Date(2026, 3, 31, 22, 59, 0, 0, time.UTC) // 07:59 on 1 April in Tokyo
	for _, sk := range stores(t) {
		t.Run(sk.name, func(t *testing.T) {
			clk := newClock(start)
			svc := newService(t, sk.make(t, clk.Now), clk.Now, yml, nil)
			req := request("d", desc("month=x"))
			for _, want := range []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT} {
				r := call(t, svc, req)
				require.Equal(t, want, r.OverallCode)
				require.Equal(t, time.Minute, r.Statuses[0].DurationUntilReset.AsDuration())
			}
			clk.Add(time.Minute) // 08:00 in Tokyo: a new month
			r := call(t, svc, req)
			require.Equal(t, pb.RateLimitResponse_OK, r.OverallCode)
			require.Equal(t, 30*24*time.Hour, r.Statuses[0].DurationUntilReset.AsDuration()) // to 08:00 on 1 May
			y := request("d", desc("year=x"))
			require.Equal(t, pb.RateLimitResponse_OK, call(t, svc, y).OverallCode)
			require.Equal(t, pb.RateLimitResponse_OVER_LIMIT, call(t, svc, y).OverallCode)
		})
	}
	for _, bad := range []string{
		`{unit: hour, requests_per_unit: 1, algorithm: calendar}`,
		`{unit: month, requests_per_unit: 1, algorithm: calendar, time_zone: Mars/Olympus}`,
		`{unit: month, requests_per_unit: 1, algorithm: calendar, reset: "25:00"}`,
		`{unit: month, requests_per_unit: 1, algorithm: calendar, week_start: monday}`,
		`{unit: week, requests_per_unit: 1, algorithm: calendar, week_start: someday}`,
		`{unit: month, requests_per_unit: 1, time_zone: UTC}`,
		`{unit: month, requests_per_unit: 0, algorithm: calendar}`,
	} {
		_, err := ParseConfig(File{Name: "bad.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: " + bad + "\n")})
		require.ErrorIs(t, err, ErrConfig, bad)
	}
}

// TestSubWindowsDescriptor: a sliding_window with sub_windows never passes
// its limit across a window boundary, where the two-counter estimate
// would: 4 per second in 4 sub-windows, 4 requests at the end of one
// second, then requests just after it are refused until the sub-window of
// the first 4 has left, a second after it; the retry is the start of that
// sub-window (duration_until_reset rounds up to whole seconds).
func TestSubWindowsDescriptor(t *testing.T) {
	const yml = `
domain: d
descriptors:
  - key: sub
    rate_limit: {unit: second, requests_per_unit: 4, algorithm: sliding_window, sub_windows: 4}
`
	for _, sk := range stores(t) {
		t.Run(sk.name, func(t *testing.T) {
			clk := newClock(t0.Truncate(time.Second).Add(900 * time.Millisecond))
			svc := newService(t, sk.make(t, clk.Now), clk.Now, yml, nil)
			req := request("d", desc("sub=x"))
			var codes []string
			for range 5 {
				codes = append(codes, answerOf(call(t, svc, req)).Codes[0])
			}
			require.Equal(t, []string{"OK", "OK", "OK", "OK", "OVER_LIMIT"}, codes)
			clk.Add(200 * time.Millisecond) // into the next second
			require.Equal(t, pb.RateLimitResponse_OVER_LIMIT, call(t, svc, req).OverallCode, "the 4 of the last sub-window still count")
			clk.Add(800 * time.Millisecond) // 1.9 s: the sub-window of the first 4 still counts (it started at 0.75 s)
			require.Equal(t, pb.RateLimitResponse_OVER_LIMIT, call(t, svc, req).OverallCode)
			clk.Add(100 * time.Millisecond) // 2.0 s: it left
			require.Equal(t, pb.RateLimitResponse_OK, call(t, svc, req).OverallCode)
		})
	}
}

// failingStore fails every call.
type failingStore struct{ floodgate.Store }

func (f failingStore) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	b, err := f.Store.Bind(name, alg)
	return failingBound{b}, err
}

type failingBound struct{ floodgate.Bound }

func (failingBound) Apply(context.Context, string, floodgate.Request, []floodgate.Decision) (floodgate.Result, error) {
	return floodgate.Result{}, fmt.Errorf("%w: down", floodgate.ErrUnavailable)
}

// TestStoreFailureLogs: with the store down, every call fails open and
// is counted, and the log gets a line a second, with the failures it did
// not log.
func TestStoreFailureLogs(t *testing.T) {
	clk := newClock(t0)
	ms, err := memstore.New(&memstore.Options{Now: clk.Now})
	require.NoError(t, err)
	cfg, err := ParseConfig(File{Name: "f.yaml", Data: []byte(cfg427)})
	require.NoError(t, err)
	logs := &lockedBuffer{}
	svc, err := New(failingStore{ms}, cfg, &Options{Now: clk.Now, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	req := request("shop", desc("route_group=api"))
	for range 50 {
		require.Equal(t, pb.RateLimitResponse_OK, call(t, svc, req).OverallCode)
	}
	clk.Add(time.Second)
	call(t, svc, req)
	var lines []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "store call failed") {
			lines = append(lines, l)
		}
	}
	require.Len(t, lines, 2, "log:\n%s", logs)
	require.Contains(t, lines[0], "unlogged=0")
	require.Contains(t, lines[1], "unlogged=49")
	require.Equal(t, uint64(51), svc.Stats().Snapshot()["ratelimit.service.call.should_rate_limit.redis_error"])
}

// BenchmarkServiceShouldRateLimit: a call of two descriptors on memstore,
// the service's own CPU and allocations without gRPC.
func BenchmarkServiceShouldRateLimit(b *testing.B) {
	const yml = `
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: route
    rate_limit: {unit: minute, requests_per_unit: 1000000000}
`
	ms, err := memstore.New(nil)
	require.NoError(b, err)
	cfg, err := ParseConfig(File{Name: "bench.yaml", Data: []byte(yml)})
	require.NoError(b, err)
	svc, err := New(ms, cfg, &Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(b, err)
	req := request("bench", desc("user=17"), desc("route=/api"))
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
