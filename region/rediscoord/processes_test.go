package rediscoord

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/region"
	"github.com/redis/go-redis/v9"
)

// TestProcessesRedis runs three regions of three processes each on real
// Redis servers it starts (on miniredis without redis-server): every
// process has its own go-redis clients (default options), its own
// redisstore.Store and region.Store, and the processes of a region share
// one reconciler through rediscoord.Peers on the region's Redis. Demand
// 60/30/10 at 1.2·Q steps to 10/30/60 at 8s; at 12s region c's leader is
// killed (its links to the coordinator and its Peers cut, its traffic
// sent to the other two). It asserts: Σ admitted ≤ Q in every window;
// ≥ 95% of Q used in the steady windows; each region's reported demand is
// its three processes' (not one's); re-convergence after the step; one
// process per region calls the coordinator, at most 2 calls per region in
// any span of one interval (but for c's takeover) and on average; another
// process of c takes over after the kill.
func TestProcessesRedis(t *testing.T) {
	var addrs [4]string
	if _, err := os.Stat(redisServer); err == nil {
		for i := range addrs {
			addrs[i] = startRedis(t)
		}
	} else {
		for i := range addrs {
			addrs[i] = miniredis.RunT(t).Addr()
		}
	}
	const (
		procs    = 3
		q        = int64(2000)
		window   = 2 * time.Second
		interval = 100 * time.Millisecond
	)
	ctx := context.Background()
	prefix := fmt.Sprintf("pt%d:", time.Now().UnixNano())
	cprefix := prefix + "{coord}:"
	newClient := func(addr string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	observer, err := New(newClient(addrs[3]), sRegions, &Options{Prefix: cprefix})
	if err != nil {
		t.Fatal(err)
	}
	type proc struct {
		store   *region.Store
		lim     *floodgate.Limiter
		cclient *redis.Client // to the coordinator
		pclient *redis.Client // to the region's Redis, for the Peers
		dead    atomic.Bool
		calls   []time.Time // guarded by the region's mu
	}
	type regionRun struct {
		procs    []*proc
		mu       sync.Mutex
		calls    []time.Time // every process's calls to the coordinator
		admitted map[int64]int64
		asked    map[int64]int64
	}
	runs := make([]*regionRun, 3)
	for r := range runs {
		rr := &regionRun{admitted: map[int64]int64{}, asked: map[int64]int64{}}
		for range procs {
			p := &proc{cclient: newClient(addrs[3]), pclient: newClient(addrs[r])}
			local, err := redisstore.New(newClient(addrs[r]), &redisstore.Options{Prefix: prefix + "l" + strconv.Itoa(r) + ":", Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			rc, err := New(p.cclient, sRegions, &Options{Prefix: cprefix})
			if err != nil {
				t.Fatal(err)
			}
			peers, err := NewPeers(p.pclient, sRegions[r].Name, &PeersOptions{Prefix: prefix + "{p" + strconv.Itoa(r) + "}:"})
			if err != nil {
				t.Fatal(err)
			}
			coord := &callLog{Coordinator: rc, record: func(at time.Time) {
				rr.mu.Lock()
				rr.calls = append(rr.calls, at)
				p.calls = append(p.calls, at)
				rr.mu.Unlock()
			}}
			p.store, err = region.New(local, coord, sRegions, sRegions[r].Name, &region.Options{Interval: interval, Margin: interval, Timeout: interval * 8 / 10, Peers: peers})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.store.Close() })
			if p.lim, err = floodgate.New(p.store, floodgate.FixedWindow{Limit: q, Window: window}, &floodgate.Options{Name: "api"}); err != nil {
				t.Fatal(err)
			}
			rr.procs = append(rr.procs, p)
		}
		runs[r] = rr
	}

	t0 := time.Unix(0, (region.WindowIndex(time.Now(), window)+1)*int64(window))
	time.Sleep(time.Until(t0))
	w0 := region.WindowIndex(t0, window)
	step, kill, end := 8*time.Second, 12*time.Second, 18*time.Second
	rate := func(r int, at time.Duration) float64 {
		shares := [3]float64{0.6, 0.3, 0.1}
		if at >= step {
			shares = [3]float64{0.1, 0.3, 0.6}
		}
		return shares[r] * 1.2 * float64(q) / window.Seconds()
	}

	// Load: per region, a pacer hands requests to its live processes in
	// turn, each decided by 8 goroutines of that process.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for r, rr := range runs {
		work := make([]chan struct{}, procs)
		for i, p := range rr.procs {
			work[i] = make(chan struct{}, 512)
			for range 8 {
				wg.Go(func() {
					for range work[i] {
						rr.mu.Lock()
						rr.asked[region.WindowIndex(time.Now(), window)-w0]++
						rr.mu.Unlock()
						res, err := p.lim.Apply(ctx, "tenant", floodgate.Request{Op: floodgate.OpTake, N: 1}, nil)
						if err != nil || !res.Allowed {
							continue
						}
						rr.mu.Lock()
						rr.admitted[region.WindowIndex(res.At, window)-w0]++
						rr.mu.Unlock()
					}
				})
			}
		}
		wg.Go(func() {
			defer func() {
				for _, w := range work {
					close(w)
				}
			}()
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			last, due, turn := time.Now(), 0.0, 0
			for {
				select {
				case <-stop:
					return
				case now := <-tick.C:
					due += rate(r, now.Sub(t0)) * now.Sub(last).Seconds()
					last = now
					for ; due >= 1; due-- {
						for rr.procs[turn%procs].dead.Load() {
							turn++
						}
						select {
						case work[turn%procs] <- struct{}{}:
						default: // the workers are behind: dropped
						}
						turn++
					}
				}
			}
		})
	}

	// Samples of the coordinator's ledger every 10ms; the kill.
	type sample struct {
		at     time.Duration
		held   [3]int64
		used   [3]int64
		rates  [3]float64
		window int64
	}
	var samples []sample
	var victim *proc
	id := region.QuotaID("api", "tenant")
	tick := time.NewTicker(10 * time.Millisecond)
	for {
		now := <-tick.C
		at := now.Sub(t0)
		if at >= end {
			break
		}
		if at >= kill && victim == nil {
			for _, p := range runs[2].procs {
				if p.store.Leader() {
					victim = p
				}
			}
			if victim == nil {
				t.Error("region c has no leader at the kill: killing its first process")
				victim = runs[2].procs[0]
			}
			victim.dead.Store(true)
			_ = victim.cclient.Close()
			_ = victim.pclient.Close()
		}
		rep, err := observer.Exchange(ctx, &region.Message{Region: "a", At: now, Quotas: []region.QuotaMessage{{ID: id, Limit: q, Window: window}}})
		if err != nil {
			continue
		}
		s := sample{at: at, window: rep.Quotas[0].Windows[0].Index - w0}
		for r, rr := range runs {
			s.held[r] = rep.Quotas[0].Windows[0].Granted[r] - rep.Quotas[0].Windows[0].Debited[r]
			s.rates[r] = rep.Quotas[0].Reports[r].Rate
			rr.mu.Lock()
			s.used[r] = rr.admitted[s.window]
			rr.mu.Unlock()
		}
		samples = append(samples, s)
	}
	tick.Stop()
	close(stop)
	wg.Wait()

	admitted := func(w int64) [3]int64 {
		var a [3]int64
		for r, rr := range runs {
			a[r] = rr.admitted[w]
		}
		return a
	}
	for w := int64(-1); w <= int64(end/window)+1; w++ {
		if a := admitted(w); a[0]+a[1]+a[2] > q {
			t.Errorf("window %d: admitted %v = %d in all, above the quota %d", w, a, a[0]+a[1]+a[2], q)
		}
	}
	delivered := true
	for _, w := range []int64{1, 2, 3, 5, 7, 8} {
		a := admitted(w)
		short := false
		for r, rr := range runs {
			if want := rate(r, time.Duration(w)*window+window/2) * window.Seconds(); float64(rr.asked[w]) < 0.97*want {
				short = true
				t.Logf("window %d: region %d asked %d of %.0f: use not checked", w, r, rr.asked[w], want)
			}
		}
		delivered = delivered && !short
		if sum := a[0] + a[1] + a[2]; sum < q*95/100 && !short {
			t.Errorf("window %d: admitted %v = %d in all, below 95%% of the quota", w, a, sum)
		}
		t.Logf("window %d: admitted %v = %.1f%% of Q", w, a, 100*float64(a[0]+a[1]+a[2])/float64(q))
	}
	// The demand each region reported is its three processes' together:
	// checked in window 3 (steady, before the step), by the median sample.
	for r := range runs {
		var rs []float64
		for _, s := range samples {
			if s.window == 3 {
				rs = append(rs, s.rates[r])
			}
		}
		if len(rs) == 0 {
			t.Fatalf("no samples in window 3")
		}
		med := median(rs)
		if want := rate(r, 0); delivered && (med < 0.85*want || med > 1.15*want) {
			t.Errorf("region %d reported a median demand of %.1f/s in window 3, want its processes' %.1f/s ± 15%%", r, med, want)
		}
		t.Logf("region %d: median reported demand in window 3 %.1f/s (true %.1f/s)", r, med, rate(r, 0))
	}
	// Re-convergence after the step, in intervals since it.
	oracle := func(s sample) []int64 {
		reports := make([]region.RegionReport, 3)
		ws := region.WindowState{Index: s.window + w0, Granted: []int64{q, q, q}, Debited: make([]int64, 3)}
		at := t0.Add(s.at)
		for r := range reports {
			reports[r] = region.RegionReport{Report: region.Report{Rate: rate(r, s.at), Window: ws.Index, Used: s.used[r]}, At: at}
		}
		targets, err := region.CurrentTargets(q, sRegions, ws, reports, 0, at, time.Unix(0, (ws.Index+1)*int64(window)).Sub(at), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return targets
	}
	bound := 4 // as TestRegionsRedis: the simulator's 3, plus one for sampling and the scheduler
	if raceEnabled {
		bound = 10
	}
	converged := false
	for _, s := range samples {
		if s.at < step || s.at >= kill {
			continue
		}
		ok := true
		for r, want := range oracle(s) {
			ok = ok && s.held[r]-want <= q/50 && want-s.held[r] <= q/50
		}
		if ok {
			n := float64(s.at-step) / float64(interval)
			// A loaded machine (the race detector, other packages' tests)
			// runs the reconcilers late: count the rounds they ran too.
			// Each region calls the coordinator at most twice a round, so
			// a region that made more than 2·bound calls since the step
			// ran more than bound rounds.
			rounds := math.MaxInt
			for _, rr := range runs {
				rr.mu.Lock()
				rounds = min(rounds, countBefore(rr.calls, t0.Add(s.at))-countBefore(rr.calls, t0.Add(step)))
				rr.mu.Unlock()
			}
			t.Logf("step at %v: within 2%% of the fair share at %v, %.1f intervals after it (the least calls of a region since: %d): held %v, fair %v", step, s.at, n, rounds, s.held, oracle(s))
			if n > float64(bound) && rounds > 2*bound && delivered {
				t.Errorf("within 2%% of the fair share only %.1f intervals after the step, after %d calls or more of each region", n, rounds)
			}
			converged = true
			break
		}
	}
	if !converged && delivered {
		t.Errorf("never within 2%% of the fair share between the step and the kill")
	}
	// Calls: one caller per region before the kill; at most 2 per region
	// in any span of one interval, but for c across its takeover; at most
	// 2 per interval on average; someone else in c after the kill.
	lease := 3 * interval
	for r, rr := range runs {
		rr.mu.Lock() // the reconcilers still run
		defer rr.mu.Unlock()
		callers := 0
		for _, p := range rr.procs {
			if n := countBefore(p.calls, t0.Add(kill)); n > 0 {
				callers++
			}
		}
		if callers != 1 {
			t.Errorf("region %d: %d processes called the coordinator before the kill, want 1", r, callers)
		}
		var steady []time.Time
		for _, c := range rr.calls {
			if r != 2 || c.Before(t0.Add(kill)) || c.After(t0.Add(kill+lease+3*interval)) {
				steady = append(steady, c)
			}
		}
		// The Store spaces its calls on its clock just before each; the
		// log here is taken a moment later, so a third call exactly one
		// interval after the first can be logged a little sooner: 5ms of
		// slack for that. Under the race detector, with other packages'
		// tests beside it, that moment reached 6ms in CI (a first call
		// logged 6ms after the Store's clock read it, the third at once):
		// 15ms there. .ci/run runs the test without it too.
		slack := 5 * time.Millisecond
		if raceEnabled {
			slack = 15 * time.Millisecond
		}
		if n := maxWithin(steady, interval-slack); n > 2 {
			t.Errorf("region %d: %d calls to the coordinator within one interval, want at most 2", r, n)
			for i, p := range rr.procs {
				var at []string
				for _, c := range p.calls {
					at = append(at, c.Sub(t0).Round(time.Millisecond).String())
				}
				t.Logf("region %d, process %d (killed: %v): calls at %v", r, i, p == victim, at)
			}
		}
		span := end + window // the reconcilers ran from before t0 until the test's end
		if n := len(rr.calls); float64(n) > 2*float64(span)/float64(interval)+4 {
			t.Errorf("region %d: %d calls in %v, above 2 per interval", r, n, span)
		}
		t.Logf("region %d: %d calls to the coordinator; at most %d within one interval (less %v) outside a takeover", r, len(rr.calls), maxWithin(steady, interval-slack), slack)
	}
	took := false // runs[2].mu is held
	for _, p := range runs[2].procs {
		if p != victim && countBefore(p.calls, t0.Add(end)) > countBefore(p.calls, t0.Add(kill)) {
			took = true
		}
	}
	if !took {
		t.Error("no other process of c called the coordinator after its leader was killed")
	}
}

// callLog is a Coordinator that records when each call starts.
type callLog struct {
	region.Coordinator
	record func(time.Time)
}

func (c *callLog) Exchange(ctx context.Context, m *region.Message) (*region.Reply, error) {
	c.record(time.Now())
	return c.Coordinator.Exchange(ctx, m)
}

func countBefore(ts []time.Time, at time.Time) int {
	n := 0
	for _, t := range ts {
		if t.Before(at) {
			n++
		}
	}
	return n
}

// maxWithin returns the most of ts (in order) that lie within any span
// shorter than d.
func maxWithin(ts []time.Time, d time.Duration) int {
	most := 0
	for i := range ts {
		n := 0
		for _, u := range ts[i:] {
			if u.Sub(ts[i]) < d {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
