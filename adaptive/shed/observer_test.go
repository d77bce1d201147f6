package shed

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/observe"
)

// sheds keeps the events of the Observer it makes.
type sheds struct {
	mu     sync.Mutex
	events []observe.Shed
	bg     bool // every event came with context.Background()
}

func (r *sheds) observer() *observe.Observer {
	r.bg = true
	return &observe.Observer{OnShed: func(ctx context.Context, e observe.Shed) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.events = append(r.events, e)
		r.bg = r.bg && ctx == context.Background()
	}}
}

// TestObserverShed: every shed request is one OnShed with the Shedder's
// name, the class it was counted as, the reading and the class's
// threshold; an allowed request reports nothing.
func TestObserverShed(t *testing.T) {
	g := &level{}
	var rec sheds
	s := newShedder(t, g, &Options{Name: "edge", Observer: rec.observer()})
	g.set(0.5)
	for _, c := range []string{adaptive.ClassCritical, adaptive.ClassDefault, adaptive.ClassSheddable, adaptive.ClassBackground, "unknown"} {
		require.True(t, s.Allow(c).Allowed)
	}
	assert.Empty(t, rec.events, "allowed requests report nothing")
	g.set(0.9)
	for _, c := range []string{adaptive.ClassCritical, adaptive.ClassDefault, adaptive.ClassSheddable, adaptive.ClassBackground} {
		s.Allow(c)
	}
	g.set(0.97)
	s.Allow("unknown")
	s.Allow(adaptive.ClassCritical)
	assert.Equal(t, []observe.Shed{
		{Name: "edge", Class: adaptive.ClassSheddable, Utilization: 0.9, Threshold: 0.8},
		{Name: "edge", Class: adaptive.ClassBackground, Utilization: 0.9, Threshold: 0.8},
		{Name: "edge", Class: adaptive.ClassDefault, Utilization: 0.97, Threshold: 0.95},
	}, rec.events)
	assert.True(t, rec.bg, "Allow takes no context: events carry context.Background()")

	// The default name.
	var def sheds
	s = newShedder(t, g, &Options{Observer: def.observer()})
	s.Allow(adaptive.ClassBackground)
	require.Len(t, def.events, 1)
	assert.Equal(t, "shed", def.events[0].Name)
}

// TestObserverShedCounts: from many goroutines while the gauge moves, the
// events of each class add up to its Stats.Shed, and observers that call
// back into the Shedder and its Gauge (an adaptive.Limiter) do not
// deadlock.
func TestObserverShedCounts(t *testing.T) {
	f, err := adaptive.NewFixed(10)
	require.NoError(t, err)
	l, err := adaptive.NewLimiter(f, nil)
	require.NoError(t, err)
	var s *Shedder
	var perClass [classes]atomic.Uint64
	s = newShedder(t, l, &Options{Observer: &observe.Observer{OnShed: func(_ context.Context, e observe.Shed) {
		perClass[classIndex(e.Class)].Add(1)
		_ = s.Stats()
		_ = l.Stats()
		s.Allow(adaptive.ClassCritical) // never shed: no recursion
	}}})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			var held []adaptive.Token
			for j := range 1000 {
				if tok, err := l.Acquire(context.Background()); err == nil {
					held = append(held, tok)
				}
				if len(held) > 0 && j%3 == 0 {
					held[0].Success()
					held = held[1:]
				}
				s.Allow(classNames[(i+j)%classes])
			}
			for _, tok := range held {
				tok.Success()
			}
		})
	}
	wg.Wait()
	st := s.Stats()
	assert.Equal(t, st.Critical.Shed, perClass[critical].Load())
	assert.Equal(t, st.Default.Shed, perClass[standard].Load())
	assert.Equal(t, st.Sheddable.Shed, perClass[sheddable].Load())
	assert.Equal(t, st.Background.Shed, perClass[background].Load())
	assert.Positive(t, st.Sheddable.Shed)
}

// TestObserverMiddleware: a request the middleware sheds is reported
// once.
func TestObserverMiddleware(t *testing.T) {
	g := &level{}
	g.set(0.85)
	var rec sheds
	s := newShedder(t, g, &Options{Observer: rec.observer()})
	h := newMiddleware(t, s, &MiddlewareOptions{Class: classHeader})
	assert.Equal(t, http.StatusServiceUnavailable, serve(h, adaptive.ClassSheddable).StatusCode)
	assert.Equal(t, http.StatusNoContent, serve(h, adaptive.ClassDefault).StatusCode)
	assert.Equal(t, []observe.Shed{{Name: "shed", Class: adaptive.ClassSheddable, Utilization: 0.85, Threshold: 0.8}}, rec.events)
}

// TestObserverNone: without an Observer, or with one of other components'
// events, the Shedder decides the same and reports nothing.
func TestObserverNone(t *testing.T) {
	var other atomic.Int64
	g := &level{}
	g.set(0.9)
	for _, o := range []*Options{nil, {}, {Observer: &observe.Observer{}}, {Observer: &observe.Observer{OnReject: func(context.Context, observe.Reject) { other.Add(1) }}}} {
		s := newShedder(t, g, o)
		assert.False(t, s.Allow(adaptive.ClassSheddable).Allowed)
		assert.EqualValues(t, 1, s.Stats().Sheddable.Shed)
	}
	assert.Zero(t, other.Load())
}

func TestObserverInvalid(t *testing.T) {
	for _, o := range []*observe.Observer{{LatencyEvery: -1}, {FailureInterval: -time.Second}} {
		s, err := New(&level{}, &Options{Observer: o})
		assert.Nil(t, s)
		assert.ErrorIs(t, err, ErrInvalidOption)
		assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	}
}

// TestObserverAllocs: reporting a shed request allocates nothing.
func TestObserverAllocs(t *testing.T) {
	g := &level{}
	g.set(0.9)
	var n atomic.Int64
	s := newShedder(t, g, &Options{Observer: &observe.Observer{OnShed: func(context.Context, observe.Shed) { n.Add(1) }}})
	allocs := testing.AllocsPerRun(1000, func() {
		_ = s.Allow(adaptive.ClassCritical)
		_ = s.Allow(adaptive.ClassSheddable)
		_ = s.Allow("unknown")
	})
	assert.Zero(t, allocs)
	assert.EqualValues(t, 1001, n.Load(), "one shed request per run, and the warm-up run")
}
