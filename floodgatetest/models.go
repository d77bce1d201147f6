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
}

// bucketModel is a token bucket holding tokens·interval nanoseconds of
// credit: refill adds elapsed time, capped at the burst.
type bucketModel struct {
	interval, burst int64
	credit, last    int64
	started         bool
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
}

func (m *windowModel) allow(now, n int64) (bool, int64) {
	k := now / m.window
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
		alg := genAlgorithm(g)
		lim := s.limiter(t, alg)
		quota, window := alg.Policy().Quota, int64(alg.Policy().Window)
		var m model
		switch a := alg.(type) {
		case floodgate.TokenBucket:
			m = &bucketModel{interval: int64(a.Policy().Window) / a.Burst, burst: a.Burst}
		case floodgate.LeakyBucket:
			m = &queueModel{interval: int64(a.Policy().Window) / a.Capacity, capacity: a.Capacity}
		case floodgate.FixedWindow:
			m = &windowModel{limit: a.Limit, window: window, counts: map[int64]int64{}}
		case floodgate.SlidingWindow:
			m = &windowModel{limit: a.Limit, window: window, counts: map[int64]int64{}, sliding: true}
		case floodgate.SlidingLog:
			m = &logModel{limit: a.Limit, window: window}
		}
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
			if got.Allowed != wantOK || got.Remaining != wantRem {
				fail("the model says allowed %v, remaining %d", wantOK, wantRem)
			}
			if got.Allowed {
				for range cost {
					admitted = append(admitted, now)
				}
			}
		}
		if _, ok := alg.(floodgate.SlidingLog); ok {
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
