package redisstore

import (
	"context"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/redisstore/internal/scripts"
	"github.com/floodgate-go/floodgate/step"
)

// admitted is n units admitted for the instant at (ns since the epoch).
type admitted struct{ at, n int64 }

// mostInWindow returns the most units admitted in any closed interval of
// length w.
func mostInWindow(adm []admitted, w int64) int64 {
	sort.Slice(adm, func(i, j int) bool { return adm[i].at < adm[j].at })
	var most, sum int64
	lo := 0
	for _, a := range adm {
		sum += a.n
		for adm[lo].at < a.at-w {
			sum -= adm[lo].n
			lo++
		}
		most = max(most, sum)
	}
	return most
}

// subWindowsUnderLoad runs 8 gateways × goroutines of takes, takes up to
// and reservations on keys for about runFor of the server's clock, and
// checks for each key that no interval of Window held more than Limit
// units (the instants the scripts admitted for: Result.At plus Delay).
func subWindowsUnderLoad(t *testing.T, newClient func() redis.UniversalClient, prefix string, keys []string, goroutines int, runFor time.Duration) {
	for _, a := range []floodgate.SlidingWindow{
		{Limit: 40, Window: 300 * time.Millisecond, SubWindows: 60},
		{Limit: 25, Window: 200 * time.Millisecond, SubWindows: 4},
		{Limit: 10, Window: 100 * time.Millisecond, SubWindows: 2},
	} {
		t.Run(a.String(), func(t *testing.T) {
			stores := gateways(t, 8, newClient, Options{Prefix: fmt.Sprintf("%ss%d:", prefix, a.SubWindows)})
			var (
				mu   sync.Mutex
				adm  = map[string][]admitted{}
				wg   sync.WaitGroup
				errs []error
			)
			stop := time.Now().Add(runFor)
			for si, s := range stores {
				b, err := s.Bind(testName, a)
				require.NoError(t, err)
				for g := range goroutines {
					wg.Add(1)
					go func() {
						defer wg.Done()
						mine := map[string][]admitted{}
						for i := 0; time.Now().Before(stop); i++ {
							key := keys[(si+g+i)%len(keys)]
							req := floodgate.Request{Op: floodgate.OpTake, N: 1 + int64(i%3)}
							switch i % 5 {
							case 1:
								req = floodgate.Request{Op: floodgate.OpTakeUpTo, N: 4}
							case 2:
								req.MaxDelay = a.Window / 2
							}
							res, err := b.Apply(context.Background(), key, req, nil)
							if err != nil {
								mu.Lock()
								errs = append(errs, err)
								mu.Unlock()
								return
							}
							if res.Allowed {
								mine[key] = append(mine[key], admitted{res.At.Add(res.Delay).UnixNano(), res.Granted})
							}
						}
						mu.Lock()
						defer mu.Unlock()
						for k, xs := range mine {
							adm[k] = append(adm[k], xs...)
						}
					}()
				}
			}
			wg.Wait()
			require.Empty(t, errs, "errors")
			var total int64
			for _, k := range keys {
				most := mostInWindow(adm[k], int64(a.Window))
				require.LessOrEqual(t, most, a.Limit, "%s: units admitted within one window", k)
				for _, x := range adm[k] {
					total += x.n
				}
			}
			// The keys were saturated for about runFor: the windows slid
			// and admitted again (at least a quarter of S/(S+1) of the
			// Limit per Window, generous for a loaded machine).
			windows := float64(runFor) / float64(a.Window)
			floor := 0.25 * windows * float64(a.Limit) * float64(len(keys)) * float64(a.SubWindows) / float64(a.SubWindows+1)
			require.Greater(t, float64(total), floor, "admitted in all over %v", runFor)
			t.Logf("%d units admitted over %d keys in %v (%.0f windows); the most in one window %d of %d", total, len(keys), runFor, windows, mostInWindow(adm[keys[0]], int64(a.Window)), a.Limit)
		})
	}
}

// TestSubWindowsUnderLoad: many goroutines of 8 independent clients on the
// server's clock never get more than Limit units into any interval of
// Window on one key, for every S: the sub-window counter's bound, held by
// one script per decision.
func TestSubWindowsUnderLoad(t *testing.T) {
	parallelOnMiniredis(t)
	loadTest(t)
	srv := newServer(t)
	goroutines := 16
	if !srv.real() {
		goroutines = 2
	}
	probe := srv.client(t)
	subWindowsUnderLoad(t, func() redis.UniversalClient {
		return redis.NewClient(&redis.Options{Addr: srv.addr, ContextTimeoutEnabled: true})
	}, testPrefix(t, probe), []string{"hot"}, goroutines, 1200*time.Millisecond)
}

// TestSubWindowsClusterUnderLoad is TestSubWindowsUnderLoad on the Cluster,
// with keys on every master.
func TestSubWindowsClusterUnderLoad(t *testing.T) {
	addrs := clusterAddrs(t)
	newClient := func() redis.UniversalClient {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	}
	probe := newClient()
	t.Cleanup(func() { _ = probe.Close() })
	keys := make([]string, 6)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant:%d", i)
	}
	subWindowsUnderLoad(t, newClient, testPrefix(t, probe), keys, 8, 1200*time.Millisecond)
}

// TestSubWindowsMemoryUsage measures a sub-window key at S = 60 with every
// sub-window counted, on a real Redis: MEMORY USAGE at most 1 KB (the state
// is one string of 7·(S+4) = 448 bytes).
func TestSubWindowsMemoryUsage(t *testing.T) {
	if os.Getenv("REDIS_ADDR") == "" {
		t.Skip("set REDIS_ADDR to measure memory on a real Redis")
	}
	srv := newServer(t)
	c := srv.client(t)
	clock := floodgatetest.NewClock(t0)
	s := newStore(t, c, &Options{Now: clock.Now})
	ctx := context.Background()
	for _, limit := range []int64{1000, scripts.MaxQuota} {
		a := floodgate.SlidingWindow{Limit: limit, Window: time.Hour, SubWindows: 60}
		key := fmt.Sprintf("mem:%d", limit)
		for range 61 {
			res, err := applyOnce(ctx, s, key, a, floodgate.Request{Op: floodgate.OpTake, N: max(limit/100, 1)})
			require.NoError(t, err)
			require.True(t, res.Allowed)
			clock.Advance(time.Minute)
		}
		n, err := c.MemoryUsage(ctx, s.Key(testName, key, step.KindSubWindows)).Result()
		require.NoError(t, err)
		t.Logf("%v with 61 sub-windows counted: MEMORY USAGE %d bytes", a, n)
		require.LessOrEqual(t, n, int64(1024), "bytes per key")
	}
}

// TestSubWindowsYearLong runs a year-long sliding window counted by weeks
// on the client's clock over a simulated 18 months: never more than its
// Limit in any 364 days, closed once full, open again as weeks leave.
func TestSubWindowsYearLong(t *testing.T) {
	srv := newServer(t)
	c := srv.client(t)
	clock := floodgatetest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := newStore(t, c, &Options{Now: srv.clock(clock)})
	a := floodgate.SlidingWindow{Limit: 1000, Window: 364 * 24 * time.Hour, SubWindows: 52}
	ctx := context.Background()
	var adm []admitted
	denied, late := 0, int64(0)
	start := clock.Now()
	for range 540 {
		res, err := applyOnce(ctx, s, "tenant", a, floodgate.Request{Op: floodgate.OpTake, N: 10})
		require.NoError(t, err)
		if res.Allowed {
			adm = append(adm, admitted{clock.Now().UnixNano(), 10})
			if clock.Now().Sub(start) > 380*24*time.Hour {
				late += 10
			}
		} else {
			denied++
			require.Zero(t, clock.Now().Add(res.RetryAfter).UnixNano()%int64(7*24*time.Hour), "RetryAfter %v ends at the start of a week", res.RetryAfter)
		}
		clock.Advance(24 * time.Hour)
	}
	require.LessOrEqual(t, mostInWindow(adm, int64(a.Window)), a.Limit)
	require.Greater(t, denied, 200, "days denied once the year was full")
	require.Positive(t, late, "units admitted after the first weeks left")
}

// FuzzParseSub: any bytes either fail to parse or parse into a state whose
// counts add up to its total and that formats back to the same bytes; no
// input panics.
func FuzzParseSub(f *testing.F) {
	f.Add("")
	f.Add(formatSub(step.SubWindowState{Newest: 29943, Total: 5, Sub: 1_000_000_000, Counts: []int64{2, 0, 3}}))
	f.Add(string(make([]byte, 7*4)))
	f.Add("\xff\xff\xff\xff\xff\xff\xff")
	f.Fuzz(func(t *testing.T, s string) {
		st, ok := parseSub(s)
		if !ok || s == "" {
			return
		}
		var sum int64
		for _, c := range st.Counts {
			sum += c
		}
		if sum != st.Total {
			t.Fatalf("%q: counts add up to %d, total %d", s, sum, st.Total)
		}
		if got := formatSub(st); got != s {
			t.Fatalf("%q formats back to %q", s, got)
		}
	})
}

// formatSub encodes st as subwindow.lua stores it.
func formatSub(st step.SubWindowState) string {
	b := appendSubHeader(nil, &st)
	for _, c := range st.Counts {
		b = appendSubInt(b, c)
	}
	return string(b)
}
