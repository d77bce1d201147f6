package shed

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// memFleet is an in-process FleetSource: the load each process last
// recorded, summed.
type memFleet struct {
	mu    sync.Mutex
	loads map[string]Load
	calls int
	err   error
}

func (m *memFleet) source(id string) FleetSource {
	return FleetSourceFunc(func(_ context.Context, local Load) (Load, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.calls++
		if m.err != nil {
			return Load{}, m.err
		}
		if m.loads == nil {
			m.loads = map[string]Load{}
		}
		m.loads[id] = local
		var sum Load
		for _, l := range m.loads {
			sum.InFlight += l.InFlight
			sum.Capacity += l.Capacity
		}
		return sum, nil
	})
}

// localLoad is a process's load the test sets.
type localLoad struct {
	mu sync.Mutex
	l  Load
}

func (p *localLoad) get() Load  { p.mu.Lock(); defer p.mu.Unlock(); return p.l }
func (p *localLoad) set(l Load) { p.mu.Lock(); defer p.mu.Unlock(); p.l = l }

func newFleet(t *testing.T, src FleetSource, local func() Load, o *FleetOptions) *Fleet {
	t.Helper()
	f, err := NewFleet(src, local, o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func TestFleetUtilization(t *testing.T) {
	m := &memFleet{}
	a, b := &localLoad{}, &localLoad{}
	fa := newFleet(t, m.source("a"), a.get, &FleetOptions{Manual: true})
	fb := newFleet(t, m.source("b"), b.get, &FleetOptions{Manual: true})
	a.set(Load{InFlight: 9, Capacity: 10})
	b.set(Load{InFlight: 1, Capacity: 10})
	assert.Equal(t, 0.9, fa.Utilization(), "before any exchange: its own load")
	ctx := context.Background()
	require.NoError(t, fa.Sync(ctx))
	require.NoError(t, fb.Sync(ctx))
	assert.Equal(t, 0.5, fb.Utilization(), "(9+1)/(10+10)")
	assert.Equal(t, 0.9, fa.Utilization(), "a's exchange came before b's")
	require.NoError(t, fa.Sync(ctx))
	assert.Equal(t, 0.5, fa.Utilization())
	// Its own rise counts at once, the others' at the next exchange.
	a.set(Load{InFlight: 10, Capacity: 10})
	assert.Equal(t, 0.55, fa.Utilization(), "(10+1)/20")
	b.set(Load{InFlight: 10, Capacity: 10})
	assert.Equal(t, 0.55, fa.Utilization())
	require.NoError(t, fb.Sync(ctx))
	require.NoError(t, fa.Sync(ctx))
	assert.Equal(t, 1.0, fa.Utilization(), "(10+10)/20")
	// Its own fall counts at once, and the others' load is taken to have
	// fallen by the same fraction.
	a.set(Load{InFlight: 6, Capacity: 10})
	assert.Equal(t, 0.6, fa.Utilization(), "(6 + 10·6/10)/20")
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = fa.Utilization() }))
}

func TestFleetFalling(t *testing.T) {
	// The others' fall between two exchanges counts twice at the second:
	// the others' records in the total were up to an Interval old, and the
	// reading gets up to an Interval older.
	m := &memFleet{}
	mine, other := &localLoad{}, &localLoad{}
	mine.set(Load{InFlight: 5, Capacity: 10})
	other.set(Load{InFlight: 10, Capacity: 10})
	f := newFleet(t, m.source("mine"), mine.get, &FleetOptions{Manual: true})
	fo := newFleet(t, m.source("other"), other.get, &FleetOptions{Manual: true})
	ctx := context.Background()
	sync := func(t *testing.T) {
		t.Helper()
		require.NoError(t, fo.Sync(ctx))
		require.NoError(t, f.Sync(ctx))
	}
	sync(t)
	assert.Equal(t, 0.75, f.Utilization(), "(5+10)/20")
	other.set(Load{InFlight: 8, Capacity: 10})
	sync(t)
	assert.Equal(t, 0.45, f.Utilization(), "(5 + 8-2·2)/20")
	sync(t)
	assert.Equal(t, 0.65, f.Utilization(), "no fall since: (5+8)/20")
	mine.set(Load{InFlight: 4, Capacity: 10})
	assert.InDelta(t, 0.52, f.Utilization(), 1e-12, "its own fall by a fifth: (4 + 8·4/5)/20")
	other.set(Load{InFlight: 7, Capacity: 10})
	sync(t)
	assert.Equal(t, 0.45, f.Utilization(), "the others' trend: (4 + 7-2·1)/20")
	mine.set(Load{InFlight: 5, Capacity: 10})
	assert.Equal(t, 0.6, f.Utilization(), "not while its own load rises: (5+7)/20")
	mine.set(Load{InFlight: 2, Capacity: 10})
	assert.Equal(t, 0.275, f.Utilization(), "its own fall by half, lower than the trend's: (2 + 7/2)/20")
	other.set(Load{InFlight: 1, Capacity: 10})
	sync(t)
	assert.Equal(t, 0.1, f.Utilization(), "the others' estimate stops at 0: (2+0)/20")
	other.set(Load{InFlight: 10, Capacity: 10})
	mine.set(Load{InFlight: 5, Capacity: 10})
	sync(t)
	assert.Equal(t, 0.75, f.Utilization(), "a rise is not extrapolated")

	// An exchange that follows a failed one measures no fall: the view it
	// would compare with is older than an Interval.
	boom := errors.New("boom")
	m.err = boom
	require.ErrorIs(t, f.Sync(ctx), boom)
	m.err = nil
	other.set(Load{InFlight: 6, Capacity: 10})
	sync(t)
	assert.Equal(t, 0.55, f.Utilization(), "(5+6)/20")

	// A total below this process's own load (a source at odds with
	// itself) is not raised to 0.
	odd := newFleet(t, FleetSourceFunc(func(context.Context, Load) (Load, error) {
		return Load{InFlight: 1, Capacity: 20}, nil
	}), mine.get, &FleetOptions{Manual: true})
	mine.set(Load{InFlight: 3, Capacity: 10})
	require.NoError(t, odd.Sync(ctx))
	mine.set(Load{InFlight: 2, Capacity: 10})
	assert.Equal(t, 0.0, odd.Utilization(), "(1-3+2)/20, as without the discount")
}

func TestFleetFailures(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	m := &memFleet{}
	other, mine := &localLoad{}, &localLoad{}
	other.set(Load{InFlight: 10, Capacity: 10})
	mine.set(Load{InFlight: 0, Capacity: 10})
	ctx := context.Background()
	require.NoError(t, newFleet(t, m.source("other"), other.get, &FleetOptions{Manual: true}).Sync(ctx))
	var errs []error
	f := newFleet(t, m.source("mine"), mine.get, &FleetOptions{
		Manual: true, MaxAge: 3 * time.Second, Now: func() time.Time { return now },
		OnError: func(err error) { errs = append(errs, err) },
	})
	require.NoError(t, f.Sync(ctx))
	assert.Equal(t, 0.5, f.Utilization())

	boom := errors.New("boom")
	m.err = boom
	now = now.Add(3 * time.Second)
	err := f.Sync(ctx)
	require.ErrorIs(t, err, boom)
	assert.Equal(t, 0.5, f.Utilization(), "3s old: still used")
	now = now.Add(time.Millisecond)
	require.ErrorIs(t, f.Sync(ctx), boom)
	assert.Equal(t, 0.0, f.Utilization(), "older than MaxAge: its own load")
	assert.Len(t, errs, 2)
	assert.ErrorIs(t, errs[0], boom)

	m.err = nil
	require.NoError(t, f.Sync(ctx))
	assert.Equal(t, 0.5, f.Utilization())

	bad := newFleet(t, FleetSourceFunc(func(context.Context, Load) (Load, error) {
		return Load{InFlight: math.NaN(), Capacity: 1}, nil
	}), mine.get, &FleetOptions{Manual: true})
	assert.Error(t, bad.Sync(ctx), "a NaN total is an error")
	assert.Equal(t, 0.0, bad.Utilization())
}

func TestFleetSyncDoesNotOverlap(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var calls int
	f := newFleet(t, FleetSourceFunc(func(context.Context, Load) (Load, error) {
		calls++
		close(entered)
		<-release
		return Load{InFlight: 1, Capacity: 2}, nil
	}), func() Load { return Load{} }, &FleetOptions{Manual: true})
	done := make(chan error)
	go func() { done <- f.Sync(context.Background()) }()
	<-entered
	assert.NoError(t, f.Sync(context.Background()), "returns at once")
	close(release)
	require.NoError(t, <-done)
	assert.Equal(t, 1, calls)
	assert.Equal(t, 0.5, f.Utilization())
}

func TestFleetRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &memFleet{}
		f, err := NewFleet(m.source("a"), func() Load { return Load{InFlight: 1, Capacity: 4} }, nil)
		require.NoError(t, err)
		synctest.Wait()
		m.mu.Lock()
		assert.Equal(t, 1, m.calls, "an exchange at once")
		m.mu.Unlock()
		time.Sleep(100*time.Millisecond + time.Microsecond)
		synctest.Wait()
		m.mu.Lock()
		assert.Equal(t, 11, m.calls, "then one per 10ms")
		m.mu.Unlock()
		assert.Equal(t, 0.25, f.Utilization())
		require.NoError(t, f.Close())
		require.NoError(t, f.Close(), "twice")
		time.Sleep(time.Second)
		m.mu.Lock()
		assert.Equal(t, 11, m.calls, "none after Close")
		m.mu.Unlock()
	})
}

func TestFleetCloseCancelsExchange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cause error
		f, err := NewFleet(FleetSourceFunc(func(ctx context.Context, _ Load) (Load, error) {
			<-ctx.Done()
			cause = ctx.Err()
			return Load{}, ctx.Err()
		}), func() Load { return Load{} }, &FleetOptions{Timeout: time.Hour})
		require.NoError(t, err)
		synctest.Wait()
		require.NoError(t, f.Close())
		assert.ErrorIs(t, cause, context.Canceled)
	})
}

func TestLimiterLoad(t *testing.T) {
	lim, err := adaptive.NewFixed(8)
	require.NoError(t, err)
	l, err := adaptive.NewLimiter(lim, nil)
	require.NoError(t, err)
	_, err = l.Acquire(t.Context())
	require.NoError(t, err)
	assert.Equal(t, Load{InFlight: 1, Capacity: 8}, LimiterLoad(l)())
	assert.Equal(t, 0.0, Load{InFlight: 3}.Utilization(), "no capacity: nothing to shed on")
}

func TestNewFleetInvalid(t *testing.T) {
	src := FleetSourceFunc(func(context.Context, Load) (Load, error) { return Load{}, nil })
	local := func() Load { return Load{} }
	for name, tc := range map[string]struct {
		src   FleetSource
		local func() Load
		o     *FleetOptions
	}{
		"no source":        {nil, local, nil},
		"no local":         {src, nil, nil},
		"negative":         {src, local, &FleetOptions{Interval: -1}},
		"negative timeout": {src, local, &FleetOptions{Timeout: -1}},
		"negative max age": {src, local, &FleetOptions{MaxAge: -1}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := NewFleet(tc.src, tc.local, tc.o)
			assert.ErrorIs(t, err, ErrInvalidOption)
		})
	}
}
