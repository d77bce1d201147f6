package adaptive

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/floodgate-go/floodgate/observe"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeClock is a manual clock for single-goroutine tests.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time          { return c.t }
func (c *fakeClock) Advance(d time.Duration) { c.t = c.t.Add(d) }
func newFakeClock() *fakeClock               { return &fakeClock{t: t0} }
func fixed(t *testing.T, n int) *Fixed {
	t.Helper()
	f, err := NewFixed(n)
	require.NoError(t, err)
	return f
}
func newLimiter(t *testing.T, l Limit, o *LimiterOptions) *Limiter {
	t.Helper()
	lim, err := NewLimiter(l, o)
	require.NoError(t, err)
	return lim
}

// mustAcquire acquires a token of partition p ("" for none) and fails the
// test on rejection.
func mustAcquire(t *testing.T, l *Limiter, p string) Token {
	t.Helper()
	tok, err := l.AcquirePartition(context.Background(), p)
	require.NoErrorf(t, err, "AcquirePartition(%q) with %d in flight, limit %d", p, l.InFlight(), l.Limit())
	return tok
}

// mustReject checks that a request of partition p is rejected.
func mustReject(t *testing.T, l *Limiter, p string) {
	t.Helper()
	_, err := l.AcquirePartition(context.Background(), p)
	require.ErrorIsf(t, err, ErrLimitExceeded, "AcquirePartition(%q) with %d in flight, limit %d", p, l.InFlight(), l.Limit())
}

func TestLimiterEnforcesLimit(t *testing.T) {
	l := newLimiter(t, fixed(t, 2), nil)
	a := mustAcquire(t, l, "")
	b := mustAcquire(t, l, "")
	mustReject(t, l, "")
	assert.Equal(t, 2, l.InFlight())

	a.Success()
	c := mustAcquire(t, l, "")
	mustReject(t, l, "")
	b.Dropped()
	c.Ignore()
	assert.Equal(t, Stats{Limit: 2, Succeeded: 1, Dropped: 1, Ignored: 1, Rejected: 2}, l.Stats())
}

func TestLimiterSamples(t *testing.T) {
	clk := newFakeClock()
	rec := &recorder{limit: 10}
	l := newLimiter(t, rec, &LimiterOptions{Now: clk.Now})

	a := mustAcquire(t, l, "") // in flight 1
	clk.Advance(5 * ms)
	b := mustAcquire(t, l, "") // in flight 2
	clk.Advance(5 * ms)
	c := mustAcquire(t, l, "") // in flight 3
	clk.Advance(10 * ms)
	b.Success()
	a.Dropped()
	c.Ignore()
	d := mustAcquire(t, l, "") // in flight 1 again
	clk.Advance(-time.Second)  // the clock steps back
	d.Success()

	assert.Equal(t, []Sample{
		{Start: t0.Add(5 * ms), RTT: 15 * ms, InFlight: 2},
		{Start: t0, RTT: 20 * ms, InFlight: 1, Dropped: true},
		{Start: t0.Add(20 * ms), RTT: 0, InFlight: 1},
	}, rec.samples, "Ignore gives no sample; a clock stepping back gives RTT 0")
}

func TestLimiterFollowsLimit(t *testing.T) {
	var changes []observe.LimitChange
	var l *Limiter
	rec := &recorder{limit: 1, script: []int{3, 3, 0}}
	l = newLimiter(t, rec, &LimiterOptions{Observer: &observe.Observer{OnLimitChange: func(_ context.Context, c observe.LimitChange) {
		changes = append(changes, c)
		_ = l.Stats() // observers run without the lock: this must not deadlock
	}}})

	a := mustAcquire(t, l, "")
	mustReject(t, l, "")
	a.Success() // limit 3
	toks := []Token{mustAcquire(t, l, ""), mustAcquire(t, l, ""), mustAcquire(t, l, "")}
	mustReject(t, l, "")
	toks[0].Success() // limit stays 3
	toks[1].Success() // the Limit says 0: enforced as 1
	assert.Equal(t, 1, l.Limit())
	mustReject(t, l, "") // one still in flight
	toks[2].Success()
	last := mustAcquire(t, l, "")
	last.Success()
	assert.Equal(t, []observe.LimitChange{{Name: "adaptive", Old: 1, New: 3, InFlight: 0}, {Name: "adaptive", Old: 3, New: 1, InFlight: 1}}, changes)
}

func TestTokenEndsOnce(t *testing.T) {
	rec := &recorder{limit: 1}
	l := newLimiter(t, rec, nil)
	tok := mustAcquire(t, l, "")
	tok.Success()
	tok.Success()
	tok.Dropped()
	tok.Ignore()
	assert.Equal(t, 0, l.InFlight())
	assert.Len(t, rec.samples, 1)

	var zero Token
	zero.Success() // inert
	_, err := l.Acquire(context.Background())
	require.NoError(t, err)
}

func TestLimiterContextDone(t *testing.T) {
	l := newLimiter(t, fixed(t, 1), nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := l.Acquire(ctx)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 0, l.InFlight())
}

func TestLimiterRejectionObserver(t *testing.T) {
	var got []observe.Reject
	l := newLimiter(t, fixed(t, 1), &LimiterOptions{
		Name:       "api",
		Partitions: []Partition{{Name: "live", Share: 0.5}},
		Observer:   &observe.Observer{OnReject: func(_ context.Context, r observe.Reject) { got = append(got, r) }},
	})
	mustAcquire(t, l, "nobody") // unknown traffic may use the idle capacity
	mustAcquire(t, l, "live")   // under its guarantee of ceil(1·0.5) = 1
	mustReject(t, l, "live")
	mustReject(t, l, "nobody")
	assert.Equal(t, []observe.Reject{
		{Name: "api", Partition: "live", Limit: 1, InFlight: 2, Reason: "limit"},
		{Name: "api", Partition: "", Limit: 1, InFlight: 2, Reason: "limit"},
	}, got)
}

func TestLimiterUtilization(t *testing.T) {
	l := newLimiter(t, fixed(t, 4), nil)
	assert.Equal(t, 0.0, l.Utilization())
	a := mustAcquire(t, l, "")
	mustAcquire(t, l, "")
	mustAcquire(t, l, "")
	assert.Equal(t, 0.75, l.Utilization())
	a.Success()
	assert.Equal(t, 0.5, l.Utilization())
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = l.Utilization() }))
}

func TestLimiterAllocs(t *testing.T) {
	v, err := NewVegas(nil)
	require.NoError(t, err)
	w, err := NewWindowed(v, nil)
	require.NoError(t, err)
	l := newLimiter(t, w, &LimiterOptions{Partitions: []Partition{{Name: "a", Share: 0.5}}})
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		tok, err := l.AcquirePartition(ctx, "a")
		if err != nil {
			panic(err)
		}
		tok.Success()
		tok, _ = l.Acquire(ctx)
		tok.Dropped()
	})
	assert.Zero(t, allocs, "allocations per Acquire+Success")
}

func TestNewLimiterInvalid(t *testing.T) {
	_, err := NewLimiter(nil, nil)
	assert.ErrorIs(t, err, ErrInvalidOption, "nil Limit")
	for name, o := range map[string]LimiterOptions{
		"unknown wait mode":        {Wait: WaitLIFO + 1},
		"negative wait mode":       {Wait: -1},
		"negative max waiters":     {MaxWaiters: -1},
		"negative max wait":        {MaxWait: -time.Second},
		"empty partition name":     {Partitions: []Partition{{Name: "", Share: 0.5}}},
		"duplicate partition":      {Partitions: []Partition{{Name: "a", Share: 0.1}, {Name: "a", Share: 0.1}}},
		"share above one":          {Partitions: []Partition{{Name: "a", Share: 1.5}}},
		"negative share":           {Partitions: []Partition{{Name: "a", Share: -0.1}}},
		"shares sum above one":     {Partitions: []Partition{{Name: "a", Share: 0.6}, {Name: "b", Share: 0.5}}},
		"partitions and ordering":  {Partitions: []Partition{{Name: "a", Share: 0.5}}, Criticality: &CriticalityOptions{}},
		"sheddable above default":  {Criticality: &CriticalityOptions{Default: 0.5, Sheddable: 0.7}},
		"background above default": {Criticality: &CriticalityOptions{Background: 0.9}},
		"default above one":        {Criticality: &CriticalityOptions{Default: 1.1}},
		"negative background":      {Criticality: &CriticalityOptions{Background: -0.1}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := NewLimiter(fixed(t, 1), &o)
			assert.ErrorIs(t, err, ErrInvalidOption)
		})
	}
}

func TestLimiterConcurrent(t *testing.T) {
	// Hammer one limiter from many goroutines in every mode; -race checks
	// the locking, and the counts must balance at the end.
	for _, mode := range []WaitMode{NoWait, WaitFIFO, WaitLIFO} {
		v, err := NewVegas(&VegasOptions{InitialLimit: 4, MaxConcurrency: 8})
		require.NoError(t, err)
		l := newLimiter(t, v, &LimiterOptions{
			Wait:       mode,
			MaxWait:    time.Millisecond,
			Partitions: []Partition{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.25}},
		})
		var wg sync.WaitGroup
		var mu sync.Mutex
		admitted := 0
		for g := range 8 {
			wg.Go(func() {
				for i := range 200 {
					tok, err := l.AcquirePartition(context.Background(), []string{"a", "b", "c"}[(g+i)%3])
					if err != nil {
						if !errors.Is(err, ErrLimitExceeded) {
							t.Errorf("Acquire: %v", err)
						}
						continue
					}
					mu.Lock()
					admitted++
					mu.Unlock()
					switch i % 3 {
					case 0:
						tok.Success()
					case 1:
						tok.Dropped()
					default:
						tok.Ignore()
					}
				}
			})
		}
		wg.Wait()
		s := l.Stats()
		assert.Equalf(t, 0, s.InFlight, "mode %d", mode)
		assert.Equalf(t, 0, s.Waiting, "mode %d", mode)
		assert.Equalf(t, uint64(8*200), s.Succeeded+s.Dropped+s.Ignored+s.Rejected, "mode %d", mode)
		assert.Equalf(t, uint64(admitted), s.Succeeded+s.Dropped+s.Ignored, "mode %d", mode)
		for _, p := range s.Partitions {
			assert.Zerof(t, p.InFlight, "mode %d partition %q", mode, p.Name)
		}
	}
}
