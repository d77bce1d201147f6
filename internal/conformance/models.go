package conformance

import (
	"context"
	"testing"
	"time"

	"pgregory.net/rapid"

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

// RunModels runs random AllowN traces, with time moving forward, through the
// store and through naive models of each algorithm, and requires the same
// admissions and Remaining. For the sliding log it also checks that no
// window-long interval ever holds more than Limit admitted units.
func RunModels(t *testing.T, newStore NewStore) {
	clock := NewClock(T0)
	s := newStore(t, clock.Now)
	ctx := context.Background()
	rapid.Check(t, func(rt *rapid.T) {
		alg := genAlgorithm(rt)
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
		key := Key(t, "m")
		now := T0.UnixNano() + rapid.Int64Range(0, window).Draw(rt, "start")
		var admitted []int64
		// Steps on a grid of window/20 hit window ends, refill instants and
		// log expiries exactly, where off-by-one errors live.
		tick := window / 20
		for i := range rapid.IntRange(1, 60).Draw(rt, "steps") {
			switch rapid.IntRange(0, 3).Draw(rt, "move") {
			case 0:
			case 1:
				now += rapid.Int64Range(1, window/3).Draw(rt, "dt")
			default:
				now += tick * rapid.Int64Range(1, 25).Draw(rt, "ticks")
			}
			clock.Set(time.Unix(0, now))
			n := rapid.Int64Range(1, quota).Draw(rt, "n")
			wantOK, wantRem := m.allow(now, n)
			got, err := apply(ctx, s, key, alg, floodgate.Request{N: n})
			if err != nil {
				rt.Fatalf("step %d: %v", i, err)
			}
			if got.Allowed != wantOK || got.Remaining != wantRem {
				rt.Fatalf("step %d: %v AllowN(T0+%v, %d) = allowed %v remaining %d, model says %v, %d",
					i, alg, time.Duration(now-T0.UnixNano()), n, got.Allowed, got.Remaining, wantOK, wantRem)
			}
			if got.Allowed {
				for range n {
					admitted = append(admitted, now)
				}
			}
		}
		if _, ok := alg.(floodgate.SlidingLog); ok {
			for i, end := range admitted {
				count := 0
				for _, u := range admitted[:i+1] {
					if u > end-window {
						count++
					}
				}
				if int64(count) > quota {
					rt.Fatalf("%d units in the window ending at T0+%v, limit %d", count, time.Duration(end-T0.UnixNano()), quota)
				}
			}
		}
	})
}
