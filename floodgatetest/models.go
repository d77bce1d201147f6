package floodgatetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// model is a naive implementation of one algorithm for AllowN only, written
// from the definition rather than from the Steps' state encodings.
type model interface {
	allow(now int64, n int64) (allowed bool, remaining int64)
	// fits reports whether allow would admit, changing nothing allow's
	// outcome depends on.
	fits(now int64, n int64) bool
}

// limitsModel is a Limits: it admits when every model fits, and then
// reports the fewest units left; on a denial the limit that binds depends
// on retry times the models do not compute, so remaining is -1 (not
// compared).
type limitsModel []model

func (ms limitsModel) fits(now, n int64) bool {
	for _, m := range ms {
		if !m.fits(now, n) {
			return false
		}
	}
	return true
}

func (ms limitsModel) allow(now, n int64) (bool, int64) {
	if !ms.fits(now, n) {
		return false, -1
	}
	fewest := int64(-1)
	for _, m := range ms {
		_, r := m.allow(now, n)
		if fewest < 0 || r < fewest {
			fewest = r
		}
	}
	return true, fewest
}

// bucketModel is a token bucket holding tokens·interval nanoseconds of
// credit: refill adds elapsed time, capped at the burst.
type bucketModel struct {
	interval, burst int64
	credit, last    int64
	started         bool
}

func (m *bucketModel) fits(now, n int64) bool {
	m.refill(now)
	return m.credit >= n*m.interval
}

func (m *bucketModel) refill(now int64) {
	if !m.started {
		m.credit, m.last, m.started = m.burst*m.interval, now, true
	}
	if now > m.last {
		m.credit = min(m.credit+(now-m.last), m.burst*m.interval)
		m.last = now
	}
}

func (m *bucketModel) allow(now, n int64) (bool, int64) {
	if !m.started {
		m.credit, m.last, m.started = m.burst*m.interval, now, true
	}
	if now > m.last {
		m.credit = min(m.credit+(now-m.last), m.burst*m.interval)
		m.last = now
	}
	if m.credit >= n*m.interval {
		m.credit -= n * m.interval
		return true, m.credit / m.interval
	}
	return false, m.credit / m.interval
}

// queueModel is a leaky bucket queried with AllowN: a request passes only
// when the queue is empty, and occupies it for n intervals.
type queueModel struct {
	interval, capacity int64
	busyUntil          int64
}

func (m *queueModel) fits(now, _ int64) bool { return m.busyUntil <= now }

func (m *queueModel) allow(now, n int64) (bool, int64) {
	if m.busyUntil <= now {
		m.busyUntil = now + n*m.interval
		return true, m.capacity - n
	}
	return false, max(m.capacity-ceilDivModel(m.busyUntil-now, m.interval), 0)
}

func ceilDivModel(a, b int64) int64 { return (a + b - 1) / b }

// windowModel counts units per epoch-aligned window.
type windowModel struct {
	limit, window int64
	counts        map[int64]int64
	sliding       bool
	cal           *floodgate.CalendarWindow // civil windows, keyed by their start, in place of window
}

// index returns the key of the window holding now.
func (m *windowModel) index(now int64) int64 {
	if m.cal != nil {
		start, _ := m.cal.Window(time.Unix(0, now))
		return start.UnixNano()
	}
	return now / m.window
}

func (m *windowModel) fits(now, n int64) bool {
	return float64(n) <= m.avail(now)
}

// avail returns Limit minus the count (or the estimate) at now.
func (m *windowModel) avail(now int64) float64 {
	k := m.index(now)
	curr := m.counts[k]
	if m.sliding {
		e := now - k*m.window
		return float64(m.limit-curr) - float64(m.counts[k-1])*float64(m.window-e)/float64(m.window)
	}
	return float64(m.limit - curr)
}

func (m *windowModel) allow(now, n int64) (bool, int64) {
	k := m.index(now)
	curr := m.counts[k]
	avail := float64(m.limit - curr)
	if m.sliding {
		// The same order of float operations as the reference.
		e := now - k*m.window
		avail = float64(m.limit-curr) - float64(m.counts[k-1])*float64(m.window-e)/float64(m.window)
	}
	if float64(n) <= avail {
		m.counts[k] += n
		avail -= float64(n)
		return true, max(int64(floorF(avail)), 0)
	}
	return false, max(int64(floorF(avail)), 0)
}

func floorF(f float64) float64 {
	i := float64(int64(f))
	if i > f {
		i--
	}
	return i
}

// logModel keeps every admitted unit's instant.
type logModel struct {
	limit, window int64
	units         []int64
}

func (m *logModel) fits(now, n int64) bool {
	inWindow := int64(0)
	for _, u := range m.units {
		if u > now-m.window {
			inWindow++
		}
	}
	return inWindow+n <= m.limit
}

func (m *logModel) allow(now, n int64) (bool, int64) {
	inWindow := int64(0)
	for _, u := range m.units {
		if u > now-m.window {
			inWindow++
		}
	}
	if inWindow+n <= m.limit {
		for range n {
			m.units = append(m.units, now)
		}
		return true, m.limit - inWindow - n
	}
	return false, m.limit - inWindow
}

// runModels runs random AllowN traces, with time moving forward, through
// a Limiter on the store and through naive models of each algorithm, and
// requires the same admissions and Remaining. For the sliding log it also
// checks that no window-long interval ever holds more than Limit admitted
// units.
func (h *harness) runModels(t *testing.T) {
	clock := NewClock(t0)
	s := h.open(t, clock.Now)
	ctx := context.Background()
	for i := range traces {
		g := h.rng(t, i)
		alg := genOne(g)
		if i%3 == 0 {
			alg = genLimits(g)
		}
		lim := s.limiter(t, name, alg)
		quota, window := alg.Policy().Quota, int64(alg.Policy().Window)
		m := newModel(alg)
		key := fmt.Sprintf("models/%d", i)
		now := t0.UnixNano() + g.int64s(0, window)
		var (
			admitted []int64
			log      []string
		)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("trace %d of %v %s\n%s\n%s", i, alg, h.replay(), strings.Join(log, "\n"), fmt.Sprintf(format, args...))
		}
		// Steps on a grid of window/20 hit window ends, refill instants and
		// log expiries exactly, where off-by-one errors live.
		tick := window / 20
		for n := range g.count(1, 60) {
			switch g.ints(0, 3) {
			case 0:
			case 1:
				now += g.int64s(1, window/3)
			default:
				now += tick * g.int64s(1, 25)
			}
			clock.Set(time.Unix(0, now))
			cost := g.int64s(1, quota)
			wantOK, wantRem := m.allow(now, cost)
			got, err := lim.AllowN(ctx, key, cost)
			log = append(log, fmt.Sprintf("%d: AllowN(t0+%v, %d) = %+v", n, time.Duration(now-t0.UnixNano()), cost, got))
			if err != nil {
				fail("error %v", err)
			}
			if got.Allowed != wantOK || wantRem >= 0 && got.Remaining != wantRem {
				fail("the model says allowed %v, remaining %d", wantOK, wantRem)
			}
			if got.Allowed {
				for range cost {
					admitted = append(admitted, now)
				}
			}
		}
		if _, ok := alg.(floodgate.SlidingLog); ok { // (a Limits' log: the Reference cases)
			for j, end := range admitted {
				count := 0
				for _, u := range admitted[:j+1] {
					if u > end-window {
						count++
					}
				}
				if int64(count) > quota {
					fail("%d units in the window ending at t0+%v, limit %d", count, time.Duration(end-t0.UnixNano()), quota)
				}
			}
		}
	}
}

// newModel returns the model of alg.
func newModel(alg floodgate.Algorithm) model {
	window := int64(alg.Policy().Window)
	switch a := alg.(type) {
	case floodgate.TokenBucket:
		return &bucketModel{interval: window / a.Burst, burst: a.Burst}
	case floodgate.LeakyBucket:
		return &queueModel{interval: window / a.Capacity, capacity: a.Capacity}
	case floodgate.FixedWindow:
		return &windowModel{limit: a.Limit, window: window, counts: map[int64]int64{}}
	case floodgate.CalendarWindow:
		return &windowModel{limit: a.Limit, window: window, counts: map[int64]int64{}, cal: &a}
	case floodgate.SlidingWindow:
		return &windowModel{limit: a.Limit, window: window, counts: map[int64]int64{}, sliding: true}
	case floodgate.SlidingLog:
		return &logModel{limit: a.Limit, window: window}
	case floodgate.Limits:
		ms := make(limitsModel, len(a))
		for i, m := range a {
			ms[i] = newModel(m)
		}
		return ms
	}
	panic(fmt.Sprintf("floodgatetest: no model of %T", alg))
}
