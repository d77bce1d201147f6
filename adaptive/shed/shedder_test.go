package shed

import (
	"math"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// level is a Gauge the test sets.
type level struct{ bits atomic.Uint64 }

func (g *level) Utilization() float64 { return math.Float64frombits(g.bits.Load()) }
func (g *level) set(u float64)        { g.bits.Store(math.Float64bits(u)) }

func newShedder(t *testing.T, g Gauge, o *Options) *Shedder {
	t.Helper()
	s, err := New(g, o)
	require.NoError(t, err)
	return s
}

// allowed returns which of the four classes (and an unknown one) s admits.
func allowed(s *Shedder) map[string]bool {
	m := map[string]bool{}
	for _, c := range []string{adaptive.ClassCritical, adaptive.ClassDefault, adaptive.ClassSheddable, adaptive.ClassBackground, "unknown"} {
		m[c] = s.Allow(c).Allowed
	}
	return m
}

func TestShedderGraduatedRule(t *testing.T) {
	g := &level{}
	s := newShedder(t, g, nil)
	all := map[string]bool{adaptive.ClassCritical: true, adaptive.ClassDefault: true, adaptive.ClassSheddable: true, adaptive.ClassBackground: true, "unknown": true}
	for _, tc := range []struct {
		u    float64
		want map[string]bool
	}{
		{0, all},
		{0.7, all},
		{0.7999, all},
		{0.8, map[string]bool{adaptive.ClassCritical: true, adaptive.ClassDefault: true, adaptive.ClassSheddable: false, adaptive.ClassBackground: false, "unknown": true}},
		{0.9499, map[string]bool{adaptive.ClassCritical: true, adaptive.ClassDefault: true, adaptive.ClassSheddable: false, adaptive.ClassBackground: false, "unknown": true}},
		{0.95, map[string]bool{adaptive.ClassCritical: true, adaptive.ClassDefault: false, adaptive.ClassSheddable: false, adaptive.ClassBackground: false, "unknown": false}},
		{3, map[string]bool{adaptive.ClassCritical: true, adaptive.ClassDefault: false, adaptive.ClassSheddable: false, adaptive.ClassBackground: false, "unknown": false}},
		{math.Inf(1), map[string]bool{adaptive.ClassCritical: true, adaptive.ClassDefault: false, adaptive.ClassSheddable: false, adaptive.ClassBackground: false, "unknown": false}},
		{math.NaN(), all}, // a broken gauge sheds nothing
		{-1, all},
	} {
		g.set(tc.u)
		assert.Equalf(t, tc.want, allowed(s), "utilization %v", tc.u)
	}
}

func TestShedderDecision(t *testing.T) {
	g := &level{}
	s := newShedder(t, g, nil)
	g.set(0.9)
	assert.Equal(t, Decision{Allowed: false, Class: adaptive.ClassSheddable, Utilization: 0.9, Threshold: 0.8}, s.Allow(adaptive.ClassSheddable))
	assert.Equal(t, Decision{Allowed: true, Class: adaptive.ClassDefault, Utilization: 0.9, Threshold: 0.95}, s.Allow("GET /charges"))
	assert.Equal(t, Decision{Allowed: true, Class: adaptive.ClassCritical, Utilization: 0.9, Threshold: Never}, s.Allow(adaptive.ClassCritical))
	g.set(math.NaN())
	assert.Equal(t, Decision{Allowed: true, Class: adaptive.ClassBackground, Utilization: 0, Threshold: 0.8}, s.Allow(adaptive.ClassBackground))
	assert.Equal(t, Stats{
		Critical:   ClassStats{Allowed: 1},
		Default:    ClassStats{Allowed: 1},
		Sheddable:  ClassStats{Shed: 1},
		Background: ClassStats{Allowed: 1},
	}, s.Stats())
}

func TestShedderCustomThresholds(t *testing.T) {
	g := &level{}
	s := newShedder(t, g, &Options{Thresholds: Thresholds{Critical: 1.5, Default: 0.8, Sheddable: 0.7, Background: 0.5}})
	g.set(0.6)
	assert.Equal(t, map[string]bool{adaptive.ClassCritical: true, adaptive.ClassDefault: true, adaptive.ClassSheddable: true, adaptive.ClassBackground: false, "unknown": true}, allowed(s))
	g.set(1.5)
	assert.False(t, s.Allow(adaptive.ClassCritical).Allowed, "critical shed at 150%")

	// Stripe's fleet usage load shedder: non-critical traffic as
	// ClassDefault at 80%.
	stripe := newShedder(t, g, &Options{Thresholds: Thresholds{Default: 0.8}})
	g.set(0.8)
	assert.Equal(t, map[string]bool{adaptive.ClassCritical: true, adaptive.ClassDefault: false, adaptive.ClassSheddable: false, adaptive.ClassBackground: false, "unknown": false}, allowed(stripe))
}

func TestNewShedderInvalid(t *testing.T) {
	_, err := New(nil, nil)
	assert.ErrorIs(t, err, ErrInvalidOption)
	for name, th := range map[string]Thresholds{
		"negative":                     {Sheddable: -0.1},
		"NaN":                          {Default: math.NaN()},
		"background above sheddable":   {Background: 0.9},
		"sheddable above default":      {Sheddable: 0.96},
		"default above critical":       {Critical: 0.9},
		"critical below its inferiors": {Critical: 0.5, Default: 0.6},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(&level{}, &Options{Thresholds: th})
			assert.ErrorIs(t, err, ErrInvalidOption)
		})
	}
}

func TestShedderOnLimiter(t *testing.T) {
	f, err := adaptive.NewFixed(10)
	require.NoError(t, err)
	l, err := adaptive.NewLimiter(f, nil)
	require.NoError(t, err)
	s := newShedder(t, l, nil)
	var toks []adaptive.Token
	for range 8 {
		require.True(t, s.Allow(adaptive.ClassSheddable).Allowed)
		tok, err := l.Acquire(t.Context())
		require.NoError(t, err)
		toks = append(toks, tok)
	}
	d := s.Allow(adaptive.ClassSheddable)
	assert.False(t, d.Allowed, "8 of 10 in flight")
	assert.Equal(t, 0.8, d.Utilization)
	assert.True(t, s.Allow(adaptive.ClassDefault).Allowed)
	toks[0].Success()
	assert.True(t, s.Allow(adaptive.ClassSheddable).Allowed)
}

func TestShedderAllocs(t *testing.T) {
	g := &level{}
	s := newShedder(t, g, nil)
	g.set(0.9)
	allocs := testing.AllocsPerRun(1000, func() {
		_ = s.Allow(adaptive.ClassCritical)
		_ = s.Allow(adaptive.ClassSheddable)
		_ = s.Allow("unknown")
	})
	assert.Zero(t, allocs)
}

func TestShedderConcurrent(t *testing.T) {
	// Many goroutines decide while the gauge moves; the counts add up.
	g := &level{}
	s := newShedder(t, g, nil)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 1000 {
				if i == 0 {
					g.set(float64(j%100) / 50)
				}
				s.Allow(adaptive.ClassSheddable)
			}
		})
	}
	wg.Wait()
	st := s.Stats().Sheddable
	assert.Equal(t, uint64(8000), st.Allowed+st.Shed)
}
