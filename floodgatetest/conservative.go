package floodgatetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/step"
)

// Options configures Run. A nil *Options checks an exact store.
type Options struct {
	// Conservative checks the conservative tier of floodgate.Store instead
	// of the exact one: a store that may deny what the reference
	// transitions would admit, but never admits what they, given the
	// same admissions, would deny. Run then runs "Errors", "NeverOver",
	// "Concurrent", "UnderAdmission" and "Close" (see the package doc)
	// on the algorithms the store binds; an algorithm it refuses at Bind
	// with an error matching floodgate.ErrInvalidConfig is skipped, with
	// a line in the test log.
	Conservative bool

	// Fleet, when set, returns n stores that share their state, as the
	// processes of a fleet do over one backend (n wrappers over one
	// Redis, or over one memstore), all on the clock now: the
	// conservative cases decide through all of them. When nil, they
	// decide through one store of Run's newStore.
	Fleet func(t *testing.T, now func() time.Time, n int) []floodgate.Store

	// UnderAdmission is the conservative store's stated bound of
	// under-admission: at any instant, the units of one key it may deny
	// beyond those the reference would deny, for alg decided through n
	// stores of Fleet (n is 1 without a Fleet). "UnderAdmission" checks
	// that, on a frozen clock, the first denial of a take comes no
	// earlier than the quota minus this bound. nil means 0: the store
	// denies no earlier than the reference does.
	UnderAdmission func(alg floodgate.Algorithm, n int) int64

	// Skip, when set, returns a reason to skip alg in the conservative
	// cases, or "": for an algorithm the store binds but does not keep in
	// the conservative tier (which its documentation must say). The
	// reason is logged.
	Skip func(alg floodgate.Algorithm) string

	// MaxTake, when set, returns the most units the store admits in one
	// take for alg, when that is less than its quota: a sharded store
	// admits a take on one shard, and refuses more than a shard's quota
	// with an error matching floodgate.ErrExceedsLimit (which its
	// documentation must say). "NeverOver" then takes at most that many
	// units at once. nil means the quota.
	MaxTake func(alg floodgate.Algorithm) int64
}

// fleetSize is the number of stores of a Fleet the conservative cases
// decide through.
const fleetSize = 3

// runConservative runs the cases of the conservative tier.
func (h *harness) runConservative(t *testing.T) {
	t.Run("Errors", h.conservativeErrors)
	t.Run("NeverOver", h.neverOver)
	t.Run("Concurrent", h.conservativeConcurrent)
	t.Run("UnderAdmission", h.underAdmission)
	t.Run("Close", h.runClose)
}

// fleet returns the stores the conservative cases decide through, on the
// clock now.
func (h *harness) fleet(t *testing.T, now func() time.Time) []*store {
	t.Helper()
	if h.opts.Fleet == nil {
		return []*store{h.open(t, now)}
	}
	ss := h.opts.Fleet(t, now, fleetSize)
	if len(ss) != fleetSize {
		t.Fatalf("floodgatetest: Fleet returned %d stores, want %d", len(ss), fleetSize)
	}
	out := make([]*store, len(ss))
	for i, s := range ss {
		if s == nil {
			t.Fatal("floodgatetest: Fleet returned a nil Store")
		}
		out[i] = h.adopt(t, s)
	}
	return out
}

// supported reports whether the conservative cases check alg on s: it
// binds (an error matching ErrInvalidConfig refuses alg, any other fails
// the test) and Options.Skip does not skip it.
func (h *harness) supported(t *testing.T, s *store, alg floodgate.Algorithm) bool {
	t.Helper()
	if _, err := s.Bind(name, alg); err != nil {
		if !errors.Is(err, floodgate.ErrInvalidConfig) {
			t.Fatalf("Bind(%q, %v) = %v, want nil or an error matching ErrInvalidConfig", name, alg, err)
		}
		t.Logf("%T refuses %v at Bind (%v): skipped", s.Store, alg, err)
		return false
	}
	if h.opts.Skip != nil {
		if why := h.opts.Skip(alg); why != "" {
			t.Logf("%v skipped: %s", alg, why)
			return false
		}
	}
	return true
}

// conservativeErrors checks the errors of bad arguments on every
// algorithm the store binds, through a Limiter and the Bound: the typed
// errors of an exact store, since a wrapper checks what it serves.
func (h *harness) conservativeErrors(t *testing.T) {
	clock := NewClock(t0)
	s := h.open(t, clock.Now)
	ctx := context.Background()
	long := strings.Repeat("k", floodgate.MaxKeyLen+1)
	for _, alg := range append(fiveAlgorithms(), floodgate.Limits{fiveAlgorithms()[0], fiveAlgorithms()[2]}) {
		if !h.supported(t, s, alg) {
			continue
		}
		p := s.pair(t, alg)
		q := alg.Policy().Quota
		for _, tc := range []struct {
			key  string
			req  floodgate.Request
			want error
		}{
			{"", take(1), floodgate.ErrEmptyKey},
			{long, take(1), floodgate.ErrKeyTooLong},
			{"k", take(0), floodgate.ErrInvalidN},
			{"k", take(q + 1), floodgate.ErrExceedsLimit},
			{"k", reserve(1, -1), floodgate.ErrInvalidDelay},
			{"k", floodgate.Request{Op: 99, N: 1}, floodgate.ErrInvalidConfig},
			{"k", floodgate.Request{Op: floodgate.OpSettle}, floodgate.ErrInvalidN},
		} {
			for _, r := range routes(tc.req) {
				if _, err := p.do(ctx, r, tc.key, tc.req); !errors.Is(err, tc.want) {
					t.Errorf("%v %v %s on %.10q = %v, want an error matching %v", alg, r, opString(tc.req, t0), tc.key, err, tc.want)
				}
			}
		}
	}
}

// admittedAt is units admitted for an instant, by a limiter's name, for
// the replay of neverOver.
type admittedAt struct {
	at  time.Time
	n   int64
	seq int // the order of the decision, for a stable sort and messages
	log string
}

// neverOver runs random traces of takes, reservations and takes up to n
// units through the stores of a fleet, on a virtual clock that moves
// forwards or stays, and requires that the reference transitions, given
// exactly the units admitted, at the instants they were admitted for, in
// time order, admit every one of them (a clock that goes backwards is the
// exact tier's case: there, a store's decisions follow its state, which
// stays ahead of the clock, rather than the instants the clock reads): the conservative tier's "never admits what the reference would
// deny", which for the token bucket is Burst + Rate·t over any interval
// of length t, for the windows the limit per window, for the sliding log
// the limit in any window.
func (h *harness) neverOver(t *testing.T) {
	clock := NewClock(t0)
	ss := h.fleet(t, clock.Now)
	ctx := context.Background()
	for i := range traces {
		g := h.rng(t, i)
		alg := genAlgorithm(g)
		if !h.supported(t, ss[0], alg) {
			continue
		}
		ps := make([]pair, len(ss))
		for j, s := range ss {
			ps[j] = s.pair(t, alg)
		}
		quota, window := alg.Policy().Quota, alg.Policy().Window
		maxTake := quota
		if h.opts.MaxTake != nil {
			maxTake = max(min(maxTake, h.opts.MaxTake(alg)), 1)
		}
		keys := []string{fmt.Sprintf("over/%d/a", i), fmt.Sprintf("over/%d/b", i)}
		admitted := map[string][]admittedAt{}
		now := clock.Now().Add(g.dur(0, window))
		var log []string
		for n := range g.count(1, 120) {
			switch g.ints(0, 9) {
			case 0, 1, 2: // stay: decisions at one instant
			case 3:
				now = now.Add(g.dur(1, 2*window))
			default:
				now = now.Add(window / 20 * time.Duration(g.int64s(1, 8)))
			}
			clock.Set(now)
			j := g.ints(0, len(ps)-1)
			p, key := ps[j], keys[g.ints(0, len(keys)-1)]
			req := take(g.int64s(1, maxTake))
			switch g.ints(0, 5) {
			case 0:
				req = upTo(g.int64s(1, quota+2))
			case 1:
				req.MaxDelay = g.dur(0, window)
			}
			rs := routes(req)
			r := rs[g.ints(0, len(rs)-1)]
			got, err := p.do(ctx, r, key, req)
			line := fmt.Sprintf("%d: t0+%v store %d %v on %s: %v %s: %s, %v", n, now.Sub(t0), j, alg, key, r, opString(req, t0), show(r, got), err)
			log = append(log, line)
			if err != nil {
				t.Fatalf("trace %d %s\n%s", i, h.replay(), strings.Join(log, "\n"))
			}
			if _, composite := alg.(floodgate.Limits); composite {
				// A Limits' Decision reports its binding limit's quota.
			} else if err := checkDecision(alg.Policy(), got.Decision); err != nil {
				t.Fatalf("trace %d %s\n%s\n%v", i, h.replay(), strings.Join(log, "\n"), err)
			}
			if got.Allowed {
				units := req.N
				if req.Op == floodgate.OpTakeUpTo {
					units = got.Granted
					if !r.full() || units < 1 || units > req.N {
						t.Fatalf("trace %d %s\n%s\ngranted %d of %d", i, h.replay(), strings.Join(log, "\n"), units, req.N)
					}
				}
				admitted[key] = append(admitted[key], admittedAt{at: now.Add(got.Delay), n: units, seq: n, log: line})
			}
		}
		for key, as := range admitted {
			if err := feasible(alg, key, as); err != nil {
				t.Fatalf("trace %d of %v %s\n%s\n%v", i, alg, h.replay(), strings.Join(log, "\n"), err)
			}
		}
	}
}

// feasible replays the admissions as through the reference transitions of
// alg, in time order, and returns an error for the first one it denies.
func feasible(alg floodgate.Algorithm, key string, as []admittedAt) error {
	slices.SortStableFunc(as, func(a, b admittedAt) int { return cmp.Compare(a.at.UnixNano(), b.at.UnixNano()) })
	var ref Reference
	for _, a := range as {
		res, err := ref.Apply(name, key, alg, a.at, take(a.n), nil)
		if err != nil {
			return fmt.Errorf("the reference fails the admission of %d units at t0+%v (%s): %w", a.n, a.at.Sub(t0), a.log, err)
		}
		if !res.Allowed {
			return fmt.Errorf("over-admission: the reference, given the admissions before it, denies the %d units admitted for t0+%v on %s (%s): %+v",
				a.n, a.at.Sub(t0), key, a.log, res.Decision)
		}
	}
	return nil
}

// conservativeConcurrent runs goroutines on one key through every store
// of a fleet, on a frozen clock, and requires that they admit no more
// than the quota (for the leaky bucket, whose admissions at one instant
// are one: its queue departs one unit at a time).
func (h *harness) conservativeConcurrent(t *testing.T) {
	for _, alg := range append(fiveAlgorithms(), floodgate.Limits{floodgate.FixedWindow{Limit: 40, Window: time.Hour}, floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: 30}}) {
		t.Run(fmt.Sprint(kindOfAny(alg)), func(t *testing.T) {
			clock := NewClock(t0)
			ss := h.fleet(t, clock.Now)
			if !h.supported(t, ss[0], alg) {
				t.Skip("not in the tier of the store")
			}
			alg := scaleQuota(alg, 32)
			var admitted atomic.Int64
			var wg sync.WaitGroup
			ctx := context.Background()
			for g := range goroutines {
				p := ss[g%len(ss)].pair(t, alg)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 4 * alg.Policy().Quota / goroutines {
						d, err := p.lim.Allow(ctx, "hot")
						if err != nil {
							t.Errorf("Allow: %v", err)
							return
						}
						if d.Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			want := alg.Policy().Quota
			if _, leaky := alg.(floodgate.LeakyBucket); leaky {
				want = 1
			}
			if got := admitted.Load(); got > want {
				t.Errorf("%v: %d goroutines through %d stores admitted %d on a frozen clock, more than %d", alg, goroutines, len(ss), got, want)
			}
		})
	}
}

// underAdmission takes one unit at a time, round robin through the
// stores of a fleet, on a frozen clock, and requires that the first
// denial comes no earlier than the quota less the store's stated bound
// (Options.UnderAdmission), and that the stores never admit more than
// the quota.
func (h *harness) underAdmission(t *testing.T) {
	for _, alg := range fiveAlgorithms() {
		t.Run(fmt.Sprint(kindOf(alg)), func(t *testing.T) {
			clock := NewClock(t0)
			ss := h.fleet(t, clock.Now)
			if !h.supported(t, ss[0], alg) {
				t.Skip("not in the tier of the store")
			}
			if _, leaky := alg.(floodgate.LeakyBucket); leaky {
				t.Skip("a leaky bucket admits one unit at an instant: nothing to under-admit")
			}
			alg := scaleQuota(alg, 64)
			ps := make([]pair, len(ss))
			for i, s := range ss {
				ps[i] = s.pair(t, alg)
			}
			quota := alg.Policy().Quota
			bound := int64(0)
			if h.opts.UnderAdmission != nil {
				bound = h.opts.UnderAdmission(alg, len(ss))
			}
			ctx := context.Background()
			admitted, first, denials := int64(0), int64(-1), 0
			for i := 0; denials < 2*len(ps) && i < int(4*quota); i++ {
				d, err := ps[i%len(ps)].lim.Allow(ctx, "under")
				if err != nil {
					t.Fatalf("Allow: %v", err)
				}
				if d.Allowed {
					admitted++
					denials = 0
					continue
				}
				denials++
				if first < 0 {
					first = admitted
				}
			}
			if admitted > quota {
				t.Errorf("%v: %d stores admitted %d on a frozen clock, more than the quota %d", alg, len(ps), admitted, quota)
			}
			if first >= 0 && first < quota-bound {
				t.Errorf("%v: the first denial came after %d units of a quota of %d through %d stores: more than the stated bound of %d under-admitted",
					alg, first, quota, len(ps), bound)
			}
		})
	}
}

// scaleQuota returns alg with its quota (burst, capacity or limit) set to
// q, its rate kept slow: the cases on a frozen clock need a quota large
// enough to spread over goroutines and stores.
func scaleQuota(alg floodgate.Algorithm, q int64) floodgate.Algorithm {
	switch a := alg.(type) {
	case floodgate.TokenBucket:
		return floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: q}
	case floodgate.LeakyBucket:
		return floodgate.LeakyBucket{Rate: 1, Per: time.Hour, Capacity: q}
	case floodgate.FixedWindow:
		return floodgate.FixedWindow{Limit: q, Window: time.Hour}
	case floodgate.SlidingWindow:
		return floodgate.SlidingWindow{Limit: q, Window: time.Hour}
	case floodgate.SlidingLog:
		return floodgate.SlidingLog{Limit: q, Window: time.Hour}
	case floodgate.Limits:
		out := make(floodgate.Limits, len(a))
		for i, l := range a {
			out[i] = scaleQuota(l, q+int64(i)*8)
		}
		return out
	}
	return alg
}

// kindOfAny names alg for a subtest: its kind, or "Limits".
func kindOfAny(alg floodgate.Algorithm) string {
	if k, err := step.KindOf(alg); err == nil {
		return k.String()
	}
	return "Limits"
}
