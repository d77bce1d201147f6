package bench

import (
	"context"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

// The sliding window counter's error, measured against the exact sliding
// log on virtual time. floodgate.SlidingWindow estimates the units of the
// last Window as prev·(1 − f) + curr; floodgate.SlidingLog counts them. Both
// run on memstores whose clock is the trace's, with the same Limit and
// Window, on the same arrival trace of one-unit requests.
//
// An admission of the counter "would be denied by an exact window" when, at
// its instant, the units the counter itself admitted in (now − Window, now],
// this one included, exceed Limit. The most units in any window is the
// largest such count over the whole trace.
//
// The docs (README's "Choosing an algorithm", docs/algorithms.md, the
// SlidingWindow doc) quote the figures these tests log, and the tests assert
// them with a little slack, so the docs cannot go stale silently:
//
//	cd bench && go test -count=1 -run '^TestSlidingWindow' -v .
//
// The traces and the stores are deterministic: the same command gives the
// same figures.

const (
	// swLimit and swWindow are the quota of the traffic shapes.
	swLimit  = 100
	swWindow = time.Minute
	// swSeeds is the number of traces per shape (seeds 1 to swSeeds);
	// swWindows their length in windows.
	swSeeds   = 10
	swWindows = 1000
	// swShareSlack (a share of admissions) and swMostSlack (units) are how
	// far a measured figure may move from the one the docs state before the
	// test fails.
	swShareSlack = 0.005
	swMostSlack  = 2
)

// swStart is the trace's first instant, aligned to the windows (they are
// aligned to the Unix epoch).
var swStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// swShape is a traffic shape: arrivals returns the arrival instants, as
// offsets from swStart in increasing order, of a trace of span, offered to
// a quota of limit per swWindow.
type swShape struct {
	name     string
	arrivals func(r *rand.Rand, limit int64, span time.Duration) []time.Duration
}

// poisson offers one-unit requests as a Poisson process at load times the
// limit.
func poisson(load float64) func(r *rand.Rand, limit int64, span time.Duration) []time.Duration {
	return func(r *rand.Rand, limit int64, span time.Duration) []time.Duration {
		mean := float64(swWindow) / (load * float64(limit))
		var out []time.Duration
		for t := r.ExpFloat64() * mean; t < float64(span); t += r.ExpFloat64() * mean {
			out = append(out, time.Duration(t))
		}
		return out
	}
}

// onOff offers bursts: on periods of exponential length (mean Window/4)
// with Poisson arrivals at 4× the limit, separated by silent periods of
// exponential length (mean 3·Window/4), so the mean load is the limit and
// the bursts fall anywhere relative to the windows.
func onOff(r *rand.Rand, limit int64, span time.Duration) []time.Duration {
	const onMean, offMean = float64(swWindow) / 4, 3 * float64(swWindow) / 4
	mean := float64(swWindow) / (4 * float64(limit))
	var out []time.Duration
	for t := r.ExpFloat64() * offMean; t < float64(span); t += r.ExpFloat64() * offMean {
		end := t + r.ExpFloat64()*onMean
		for t += r.ExpFloat64() * mean; t < end && t < float64(span); t += r.ExpFloat64() * mean {
			out = append(out, time.Duration(t))
		}
		t = end
	}
	return out
}

var (
	poisson05 = swShape{"Poisson 0.5×", poisson(0.5)}
	poisson1  = swShape{"Poisson 1×", poisson(1)}
	poisson12 = swShape{"Poisson 1.2×", poisson(1.2)}
	poisson2  = swShape{"Poisson 2×", poisson(2)}
	poisson5  = swShape{"Poisson 5×", poisson(5)}
	onOff1    = swShape{"on/off bursts, 1× mean", onOff}
)

// swCounts is what one trace did.
type swCounts struct {
	offered     int
	admitted    int // by the counter
	overExact   int // counter admissions an exact window would deny
	most        int // the most counter admissions in any window
	logAdmitted int // by the sliding log on the same trace
	onlyCounter int // admitted by the counter, denied by the log
}

// swClock is a virtual clock for memstore.Options.Now.
type swClock struct{ now time.Time }

func (c *swClock) Now() time.Time { return c.now }

// newVirtualLimiter returns a limiter running alg on a memstore that reads
// clock.
func newVirtualLimiter(tb testing.TB, clock *swClock, alg floodgate.Algorithm) *floodgate.Limiter {
	tb.Helper()
	s, err := memstore.New(&memstore.Options{Now: clock.Now})
	if err != nil {
		tb.Fatal(err)
	}
	lim, err := floodgate.New(s, alg, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return lim
}

// window holds the instants of admissions, in order, and counts those in
// (now − w, now].
type window struct {
	w   time.Duration
	buf []time.Duration // buf[at:] are inside the window
	at  int
}

// add records an admission at now, no earlier than the last one, and
// returns the admissions in (now − w, now], this one included.
func (q *window) add(now time.Duration) int {
	q.buf = append(q.buf, now)
	for q.buf[q.at] <= now-q.w {
		q.at++
	}
	if q.at > 1024 && q.at > len(q.buf)/2 {
		q.buf = append(q.buf[:0], q.buf[q.at:]...)
		q.at = 0
	}
	return len(q.buf) - q.at
}

// runTrace offers the arrivals to a SlidingWindow and to a SlidingLog of
// limit per swWindow (the SlidingWindow of subs sub-windows), each on its
// own memstore, at the arrival's instant, and counts what they did.
func runTrace(tb testing.TB, limit int64, subs int, arrivals []time.Duration) swCounts {
	tb.Helper()
	ctx := context.Background()
	clock := &swClock{}
	counter := newVirtualLimiter(tb, clock, floodgate.SlidingWindow{Limit: limit, Window: swWindow, SubWindows: subs})
	exact := newVirtualLimiter(tb, clock, floodgate.SlidingLog{Limit: limit, Window: swWindow})
	c := swCounts{offered: len(arrivals)}
	q := window{w: swWindow}
	for _, at := range arrivals {
		clock.now = swStart.Add(at)
		dc, err := counter.Allow(ctx, "k")
		if err != nil {
			tb.Fatal(err)
		}
		de, err := exact.Allow(ctx, "k")
		if err != nil {
			tb.Fatal(err)
		}
		if de.Allowed {
			c.logAdmitted++
		}
		if !dc.Allowed {
			continue
		}
		if !de.Allowed {
			c.onlyCounter++
		}
		c.admitted++
		n := q.add(at)
		c.most = max(c.most, n)
		if n > int(limit) {
			c.overExact++
		}
	}
	return c
}

// swRow is one line of the table: the totals over the seeds, and the worst
// seed's share and most.
type swRow struct {
	offered, admitted, logAdmitted int
	share, onlyCounter             float64 // worst seed, shares of the counter's admissions
	most                           int     // worst seed
}

// measure runs shape on seeds traces of windows windows at limit, in
// parallel, and sums them up.
func measure(tb testing.TB, shape swShape, limit int64, subs, seeds, windows int) swRow {
	tb.Helper()
	runs := make([]swCounts, seeds)
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i := range seeds {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			r := rand.New(rand.NewPCG(uint64(i+1), 0x5eed))
			runs[i] = runTrace(tb, limit, subs, shape.arrivals(r, limit, time.Duration(windows)*swWindow))
		})
	}
	wg.Wait()
	var row swRow
	for _, c := range runs {
		row.offered += c.offered
		row.admitted += c.admitted
		row.logAdmitted += c.logAdmitted
		row.share = max(row.share, float64(c.overExact)/float64(c.admitted))
		row.onlyCounter = max(row.onlyCounter, float64(c.onlyCounter)/float64(c.admitted))
		row.most = max(row.most, c.most)
	}
	return row
}

// up rounds a share up to a hundredth of a percent, so a figure copied
// from the log never flatters the counter.
func up(share float64) float64 { return max(math.Ceil(share*1e4-1e-9)/100, 0) }

// swStated is what the docs state for one shape: the worst seed's share of
// the counter's admissions an exact window would deny, and its most units
// in any window.
type swStated struct {
	shape swShape
	share float64
	most  int
}

// checkStated asserts that a measured row agrees with what the docs state,
// within the slack.
func checkStated(t *testing.T, st swStated, limit int64, row swRow) {
	t.Helper()
	if math.Abs(row.share-st.share) > swShareSlack {
		t.Errorf("%s, Limit %d: %.2f%% of the counter's admissions over an exact window, the docs say %.2f%%: update them",
			st.shape.name, limit, up(row.share), 100*st.share)
	}
	if row.most < st.most-swMostSlack || row.most > st.most+swMostSlack {
		t.Errorf("%s, Limit %d: at most %d units in a window, the docs say %d: update them", st.shape.name, limit, row.most, st.most)
	}
	if row.most > int(2*limit-1) {
		t.Errorf("%s, Limit %d: %d units in a window, above the bound 2·Limit − 1 = %d", st.shape.name, limit, row.most, 2*limit-1)
	}
}

func TestSlidingWindowError(t *testing.T) {
	// The figures of docs/algorithms.md's table, shape by shape.
	stated := []swStated{
		{poisson05, 0, 83},
		{poisson1, 0.1182, 119},
		{poisson12, 0.1635, 117},
		{poisson2, 0.0800, 107},
		{poisson5, 0.0040, 102},
		{onOff1, 0.1673, 176},
	}
	t.Logf("SlidingWindow and SlidingLog{Limit: %d, Window: %v} on the same traces, seeds 1–%d × %d windows per shape",
		swLimit, swWindow, swSeeds, swWindows)
	t.Logf("| shape | offered per window | admitted of offered: counter / log (all seeds) | counter admissions an exact window would deny (worst seed) | most units in any window (worst seed) | counter admissions the log denied on the same trace (worst seed) |")
	for _, st := range stated {
		row := measure(t, st.shape, swLimit, 0, swSeeds, swWindows)
		t.Logf("| %s | %.1f | %.2f%% / %.2f%% | %.2f%% | %d (%.2f·Limit) | %.2f%% |",
			st.shape.name, float64(row.offered)/float64(swSeeds*swWindows),
			100*float64(row.admitted)/float64(row.offered), 100*float64(row.logAdmitted)/float64(row.offered),
			up(row.share), row.most, float64(row.most)/swLimit, up(row.onlyCounter))
		checkStated(t, st, swLimit, row)
	}
}

func TestSlidingWindowErrorByLimit(t *testing.T) {
	// The same measure at other limits, on shorter traces: the figures of
	// docs/algorithms.md's paragraph on Limit.
	const windows = 200
	stated := []struct {
		limit int64
		swStated
	}{
		{10, swStated{poisson12, 0.0900, 15}},
		{10, swStated{onOff1, 0.1324, 17}},
		{1000, swStated{poisson12, 0.1917, 1028}},
		{1000, swStated{onOff1, 0.2129, 1739}},
	}
	t.Logf("seeds 1–%d × %d windows of %v", swSeeds, windows, swWindow)
	for _, st := range stated {
		row := measure(t, st.shape, st.limit, 0, swSeeds, windows)
		t.Logf("Limit %d, %s: %.2f%% of the counter's admissions over an exact window, at most %d units (%.2f·Limit) in a window",
			st.limit, st.shape.name, up(row.share), row.most, float64(row.most)/float64(st.limit))
		checkStated(t, st.swStated, st.limit, row)
	}
}

// adversary is a client of a fresh key that sends limit one-unit requests
// lead before a window boundary (all admitted), then asks again at once
// after every admission and exactly RetryAfter after every denial, for
// windows windows. It returns the most units admitted in any window of
// length w, and when (after the burst) that window ends.
func adversary(tb testing.TB, limit int64, w, lead time.Duration, windows int) (most int, end time.Duration) {
	tb.Helper()
	ctx := context.Background()
	clock := &swClock{}
	lim := newVirtualLimiter(tb, clock, floodgate.SlidingWindow{Limit: limit, Window: w})
	burst := w - lead // from swStart, so inside the first window
	q := window{w: w}
	for t := burst; t < burst+time.Duration(windows)*w; {
		clock.now = swStart.Add(t)
		d, err := lim.Allow(ctx, "k")
		if err != nil {
			tb.Fatal(err)
		}
		if !d.Allowed {
			if d.RetryAfter <= 0 {
				tb.Fatalf("Allow at %v denied with RetryAfter %v, want > 0", t, d.RetryAfter)
			}
			t += d.RetryAfter
			continue
		}
		if n := q.add(t); n > most {
			most, end = n, t-burst
		}
	}
	return most, end
}

func TestSlidingWindowAdversary(t *testing.T) {
	// A burst of Limit at a window's end fills the counter of that window;
	// in the next, the estimate Limit·(1 − f) + curr lets curr grow as
	// Limit·f, so a client that retries exactly when RetryAfter says gets
	// Limit − 1 more units before the window of the burst has slid past:
	// 2·Limit − 1 in one window of length Window, the most the counter
	// ever admits (TestSlidingWindowBound).
	for _, limit := range []int64{10, 50, 100, 1000} {
		for _, lead := range []time.Duration{time.Nanosecond, time.Millisecond, swWindow / time.Duration(2*limit)} {
			most, end := adversary(t, limit, swWindow, lead, 4)
			t.Logf("Limit %d, Window %v, the burst %v before a boundary: %d units (%.3f·Limit) in the window ending %v after the burst",
				limit, swWindow, lead, most, float64(most)/float64(limit), end)
			if most != int(2*limit-1) {
				t.Errorf("Limit %d, burst %v before the boundary: %d units in a window, the docs say 2·Limit − 1 = %d", limit, lead, most, 2*limit-1)
			}
		}
	}
}

func TestSlidingWindowBound(t *testing.T) {
	// Random traces of AllowN and Reserve (costs 1 to Limit, delays up to
	// two windows), counting admitted units at the instant they proceed:
	// never more than 2·Limit − 1 in any window of length Window. The
	// counter admits at most Limit per fixed window (est ≥ curr), and at
	// offset e into a window whose predecessor admitted prev, the units
	// admitted since its start are at most Limit − prev·(W − e)/W, so a
	// sliding window ending there holds at most Limit + prev·e/W < 2·Limit.
	ctx := context.Background()
	worst := 0.0
	for seed := range 300 {
		r := rand.New(rand.NewPCG(uint64(seed), 0xb0d))
		limit := int64(1 + r.IntN(50))
		w := time.Duration(1+r.IntN(1000)) * time.Millisecond
		clock := &swClock{}
		lim := newVirtualLimiter(t, clock, floodgate.SlidingWindow{Limit: limit, Window: w})
		var proceed []time.Duration // instants at which admitted units proceed
		now := time.Duration(0)
		for range 3000 {
			now += time.Duration(r.ExpFloat64() * float64(w) / float64(2*limit))
			clock.now = swStart.Add(now)
			n := int64(1)
			if r.IntN(2) == 0 {
				n += r.Int64N(limit)
			}
			var maxDelay time.Duration
			if r.IntN(3) == 0 {
				maxDelay = time.Duration(r.Int64N(int64(2 * w)))
			}
			d, err := lim.Reserve(ctx, "k", n, maxDelay)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				for range n {
					proceed = append(proceed, now+d.Delay)
				}
			}
		}
		slices.Sort(proceed)
		q := window{w: w}
		most := 0
		for _, at := range proceed {
			most = max(most, q.add(at))
		}
		if most > int(2*limit-1) {
			t.Errorf("seed %d, SlidingWindow{%d per %v}: %d units in a window, want <= 2·Limit − 1 = %d", seed, limit, w, most, 2*limit-1)
		}
		worst = max(worst, float64(most)/float64(limit))
	}
	t.Logf("300 random traces: at most %.3f·Limit in any window (rounded up)", math.Ceil(worst*1000)/1000)
}

func TestSubWindowsAccuracy(t *testing.T) {
	// The sliding window of S sub-windows beside the two-counter estimate
	// (S = 1) and the exact log, on the traces of TestSlidingWindowError:
	// docs/algorithms.md's table of sub-windows. With S ≥ 2 no window ever
	// holds more than Limit, and the counter admits at least S/(S+1) of
	// what the log admits on the same trace.
	const windows = 300
	t.Logf("SlidingWindow{Limit: %d, Window: %v, SubWindows: S} and SlidingLog on the same traces, seeds 1–%d × %d windows per shape",
		swLimit, swWindow, swSeeds, windows)
	t.Logf("| traffic | S | admitted of offered: counter / log | counter admissions an exact window would deny (worst seed) | most units in any window (worst seed) |")
	for _, shape := range []swShape{poisson1, poisson12, poisson2, onOff1} {
		for _, subs := range []int{1, 4, 10, 60} {
			row := measure(t, shape, swLimit, subs, swSeeds, windows)
			got, log := float64(row.admitted)/float64(row.offered), float64(row.logAdmitted)/float64(row.offered)
			t.Logf("| %s | %d | %.2f%% / %.2f%% | %.2f%% | %d |", shape.name, subs, 100*got, 100*log, up(row.share), row.most)
			if subs < 2 {
				continue
			}
			if row.most > swLimit || row.share > 0 {
				t.Errorf("%s, S = %d: %d units in a window (%.2f%% of admissions over), want at most Limit", shape.name, subs, row.most, 100*row.share)
			}
			if bound := float64(subs) / float64(subs+1); got < bound*log {
				t.Errorf("%s, S = %d: admitted %.4f of offered, below S/(S+1) of the log's %.4f", shape.name, subs, got, log)
			}
		}
	}
}
