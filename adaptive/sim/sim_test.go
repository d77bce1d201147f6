package sim

import (
	"bytes"
	"encoding/csv"
	"math"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/adaptive/shed"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func simple(seed uint64, load float64, d time.Duration) Config {
	return Config{Seed: seed, Workers: 4, ServiceTime: S, Phases: []Phase{{Name: "p", Duration: d, Load: load}}}
}

func fixedLimiter(n int) func(Env) (*adaptive.Limiter, error) {
	return func(env Env) (*adaptive.Limiter, error) {
		f, err := adaptive.NewFixed(n)
		if err != nil {
			return nil, err
		}
		return adaptive.NewLimiter(f, &adaptive.LimiterOptions{Now: env.Now})
	}
}

func TestRunIsDeterministic(t *testing.T) {
	cfg := standard(7, 10, Lognormal, windowedVegas(nil))
	a, err := Run(cfg)
	require.NoError(t, err)
	b, err := Run(cfg)
	require.NoError(t, err)
	assert.Equal(t, a.Series, b.Series, "same seed, same series")
	cfg.Seed = 8
	c, err := Run(cfg)
	require.NoError(t, err)
	assert.NotEqual(t, a.Series, c.Series, "another seed, another series")
}

func TestArrivalRate(t *testing.T) {
	// Poisson arrivals at 0.5·4/10ms = 200/s for 100s: 20000 ± 3 sigma.
	r, err := Run(simple(1, 0.5, 100*time.Second))
	require.NoError(t, err)
	s := r.Stats(0, 100*time.Second)
	assert.InDelta(t, 20000, s.Offered, 3*math.Sqrt(20000))
	assert.Equal(t, s.Offered, s.Good+s.Unfinished, "no queueing to speak of at 0.5x: all good")
	assert.Equal(t, S, s.P50, "deterministic service: the median request does not wait")
}

func TestSaturatedThroughput(t *testing.T) {
	// At 3x with no limiter the server completes exactly one request per
	// worker per S: 4/10ms over 1s is 400, give or take the requests in
	// service at the edges.
	r, err := Run(simple(1, 3, time.Second))
	require.NoError(t, err)
	s := r.Stats(0, time.Second)
	assert.InDelta(t, 400, s.Good+s.Late, 4)
	assert.Positive(t, s.Unfinished, "the queue outlives the run")
}

func TestCollapse(t *testing.T) {
	// With κ = 1, a request starting behind a queue of n takes (1 + n/C)·S:
	// a saturated server completes far fewer requests.
	cfg := simple(1, 3, time.Second)
	cfg.Collapse = 1
	r, err := Run(cfg)
	require.NoError(t, err)
	s := r.Stats(0, time.Second)
	assert.Less(t, s.Good+s.Late, 200)
}

func TestCapacityStep(t *testing.T) {
	// A limit of 8 keeps the queue short, so every request is good and the
	// series' goodput counts completions.
	cfg := simple(1, 3, time.Second)
	cfg.Limiter = fixedLimiter(8)
	cfg.Phases = append(cfg.Phases, Phase{Name: "q", Duration: time.Second, Load: 3, Workers: 2})
	r, err := Run(cfg)
	require.NoError(t, err)
	var done int
	for _, p := range r.Series {
		if p.Time > time.Second {
			done += int(math.Round(p.Goodput * r.Config.Interval.Seconds()))
		}
	}
	// Goodput counts completions by completion time: 2 workers for 1s.
	assert.InDelta(t, 200, done, 4)
}

func TestLimiterRejects(t *testing.T) {
	cfg := simple(1, 3, time.Second)
	cfg.Limiter = fixedLimiter(2)
	r, err := Run(cfg)
	require.NoError(t, err)
	s := r.Stats(0, time.Second)
	// Each slot serves for S, then waits for the next arrival (mean 1/λ,
	// λ = 1200/s) since arrivals meanwhile were rejected: 2 slots ·
	// 1s/(10ms + 0.83ms) ≈ 185.
	assert.InDelta(t, 185, s.Good, 10, "two requests at a time")
	assert.Equal(t, s.Offered, s.Good+s.Rejected+s.Unfinished)
	for _, p := range r.Series {
		assert.LessOrEqualf(t, p.InFlight, 2, "in flight at %v", p.Time)
		assert.Equalf(t, 2, p.Limit, "limit at %v", p.Time)
	}
}

func TestLateRequestsAreDropped(t *testing.T) {
	// A fixed limit of 100 lets a queue of 96 build before 4 workers: 24
	// service times of wait, past the 10·S deadline. The limiter must see
	// those as drops.
	var l *adaptive.Limiter
	cfg := simple(1, 3, time.Second)
	cfg.Limiter = func(env Env) (*adaptive.Limiter, error) {
		f, err := adaptive.NewFixed(100)
		if err != nil {
			return nil, err
		}
		l, err = adaptive.NewLimiter(f, &adaptive.LimiterOptions{Now: env.Now})
		return l, err
	}
	r, err := Run(cfg)
	require.NoError(t, err)
	s := r.Stats(0, time.Second)
	assert.Positive(t, s.Late)
	st := l.Stats()
	assert.Equal(t, uint64(s.Late), st.Dropped, "late requests end with Dropped")
	assert.Equal(t, uint64(s.Good), st.Succeeded, "good requests end with Success")
}

func TestClasses(t *testing.T) {
	cfg := simple(1, 2, 10*time.Second)
	cfg.Classes = []Class{{Name: "a", Weight: 1}, {Name: "b", Weight: 3}}
	r, err := Run(cfg)
	require.NoError(t, err)
	s := r.Stats(0, 10*time.Second)
	a, b := s.Classes["a"], s.Classes["b"]
	assert.Equal(t, s.Offered, a.Offered+b.Offered)
	assert.InDelta(t, 0.25, float64(a.Offered)/float64(s.Offered), 0.01)
}

func TestPhaseStats(t *testing.T) {
	cfg := simple(1, 1, time.Second)
	cfg.Phases = append(cfg.Phases, Phase{Name: "q", Duration: time.Second, Load: 2})
	r, err := Run(cfg)
	require.NoError(t, err)
	assert.Equal(t, []Span{{Name: "p", Start: 0, End: time.Second}, {Name: "q", Start: time.Second, End: 2 * time.Second}}, r.Phases)
	q, ok := r.Phase("q", 500*time.Millisecond)
	require.True(t, ok)
	assert.Equal(t, r.Stats(1500*time.Millisecond, 2*time.Second), q)
	_, ok = r.Phase("nope", 0)
	assert.False(t, ok)
	assert.Len(t, r.Series, 20, "one point per 100ms interval")
	assert.Equal(t, "p", r.Series[9].Phase)
	assert.Equal(t, "q", r.Series[10].Phase)
}

func TestWriteCSV(t *testing.T) {
	cfg := simple(1, 1, time.Second)
	cfg.Limiter = fixedLimiter(3)
	r, err := Run(cfg)
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, r.WriteCSV(&buf, "fixed", true))
	rows, err := csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 1+len(r.Series))
	assert.Equal(t, CSVHeader, rows[0])
	assert.Equal(t, []string{"fixed", "p", "0.1"}, rows[1][:3])
	assert.Equal(t, "3", rows[1][6], "limit column")

	buf.Reset()
	require.NoError(t, r.WriteCSV(&buf, "fixed", false))
	rows, err = csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	assert.Len(t, rows, len(r.Series))
}

func TestRunInvalid(t *testing.T) {
	ok := simple(1, 1, time.Second)
	for name, mutate := range map[string]func(*Config){
		"no workers":        func(c *Config) { c.Workers = 0 },
		"no service time":   func(c *Config) { c.ServiceTime = 0 },
		"unknown service":   func(c *Config) { c.Service = 9 },
		"negative sigma":    func(c *Config) { c.Sigma = -1 },
		"NaN collapse":      func(c *Config) { c.Collapse = math.NaN() },
		"negative deadline": func(c *Config) { c.Deadline = -1 },
		"no phases":         func(c *Config) { c.Phases = nil },
		"empty phase":       func(c *Config) { c.Phases[0].Duration = 0 },
		"negative load":     func(c *Config) { c.Phases[0].Load = -1 },
		"infinite load":     func(c *Config) { c.Phases[0].Load = math.Inf(1) },
		"zero class weight": func(c *Config) { c.Classes = []Class{{Name: "a"}} },
		"negative cap":      func(c *Config) { c.Classes = []Class{{Name: "a", Weight: 1, MaxInFlight: -1}} },
		"negative service":  func(c *Config) { c.Classes = []Class{{Name: "a", Weight: 1, ServiceTime: -1}} },
		"negative procs":    func(c *Config) { c.Processes = -1 },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := ok
			cfg.Phases = append([]Phase(nil), ok.Phases...)
			mutate(&cfg)
			_, err := Run(cfg)
			assert.ErrorIs(t, err, ErrInvalidConfig)
		})
	}
	t.Run("limiter error", func(t *testing.T) {
		cfg := ok
		cfg.Limiter = fixedLimiter(0)
		_, err := Run(cfg)
		assert.ErrorIs(t, err, adaptive.ErrInvalidOption)
	})
}

func TestProcesses(t *testing.T) {
	// Two processes with a Fixed limit of 3 each: arrivals split evenly,
	// the series reports the sum of the limits, and each process's
	// in-flight count is its own.
	cfg := simple(1, 1, 10*time.Second)
	cfg.Processes = 2
	var inflight []func() int
	cfg.Limiter = func(env Env) (*adaptive.Limiter, error) {
		inflight = append(inflight, env.InFlight)
		return fixedLimiter(3)(env)
	}
	r, err := Run(cfg)
	require.NoError(t, err)
	for _, p := range r.Series {
		require.Equal(t, 6, p.Limit)
		require.LessOrEqual(t, p.InFlight, 6)
	}
	require.Len(t, inflight, 2)
	var per [2]int
	for _, q := range r.reqs {
		per[q.process]++
	}
	assert.InDelta(t, 0.5, float64(per[0])/float64(len(r.reqs)), 0.02)
}

func TestEvery(t *testing.T) {
	cfg := simple(1, 0.5, time.Second)
	var at []time.Duration
	cfg.Limiter = func(env Env) (*adaptive.Limiter, error) {
		env.Every(300*time.Millisecond, func() { at = append(at, env.Now().Sub(epoch)) })
		return fixedLimiter(10)(env)
	}
	_, err := Run(cfg)
	require.NoError(t, err)
	assert.Equal(t, []time.Duration{300 * time.Millisecond, 600 * time.Millisecond, 900 * time.Millisecond}, at)
}

func TestShedder(t *testing.T) {
	// A Shedder on a Fixed limit of 10: sheddable requests are shed at 8 in
	// flight, critical ones reach the limiter.
	cfg := simple(1, 3, time.Second)
	cfg.Workers = 10
	cfg.Classes = []Class{{Name: adaptive.ClassCritical, Weight: 1}, {Name: adaptive.ClassSheddable, Weight: 1}}
	cfg.Limiter = fixedLimiter(10)
	cfg.Shedder = func(env Env) (*shed.Shedder, error) { return shed.New(env.Limiter, nil) }
	r, err := Run(cfg)
	require.NoError(t, err)
	s := r.Stats(0, time.Second)
	c, sh := s.Classes[adaptive.ClassCritical], s.Classes[adaptive.ClassSheddable]
	assert.Zero(t, c.Shed, "critical is never shed")
	assert.Positive(t, c.Rejected, "but the limit still holds")
	assert.Positive(t, sh.Shed)
	assert.Equal(t, s.Shed, sh.Shed)
	assert.Equal(t, 0.8, s.ShedGauge, "shed at 8 of 10")
	assert.Equal(t, 0.8, s.ShedUtilization, "8 requests in the server, 10 workers")
	assert.LessOrEqual(t, sh.MaxInFlight, 8)
	assert.Equal(t, s.Offered, s.Good+s.Late+s.Unfinished+s.Rejected+s.Shed)
}

func TestClassCapAndServiceTime(t *testing.T) {
	// A class of long requests capped at 2 in flight; the others are
	// untouched.
	cfg := simple(1, 0.5, 10*time.Second)
	cfg.Classes = []Class{
		{Name: "long", Weight: 1, ServiceTime: 10 * S, Deadline: 100 * S, MaxInFlight: 2},
		{Name: "short", Weight: 4},
	}
	r, err := Run(cfg)
	require.NoError(t, err)
	s := r.Stats(0, 9*time.Second)
	long, short := s.Classes["long"], s.Classes["short"]
	assert.Positive(t, long.Capped)
	assert.Equal(t, 2, long.MaxInFlight)
	assert.Zero(t, short.Capped)
	assert.Equal(t, long.Offered, long.Good+long.Capped+long.Unfinished, "within their deadline")
	// At most 2 in the server, less between an end and the next arrival.
	assert.True(t, long.Occupancy > 1.2 && long.Occupancy <= 2, "occupancy %v", long.Occupancy)
}

func TestOccupancy(t *testing.T) {
	// Little's law: the mean number in the server is the arrival rate times
	// the mean time in it (a little over 2 at 0.5x of 4 workers of 10ms:
	// some requests queue).
	r, err := Run(simple(1, 0.5, 100*time.Second))
	require.NoError(t, err)
	from, to := 10*time.Second, 90*time.Second
	s := r.Stats(from, to)
	var sojourn time.Duration
	for _, q := range r.reqs {
		if q.arrival >= from && q.arrival < to {
			sojourn += q.done - q.arrival
		}
	}
	little := float64(s.Offered) / (to - from).Seconds() * (sojourn / time.Duration(s.Offered)).Seconds()
	assert.InEpsilon(t, little, s.Occupancy, 0.01)
	assert.Equal(t, s.Occupancy, s.Classes[""].Occupancy)
}
