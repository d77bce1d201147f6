package floodgatetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/step"
)

// runIdentity checks what a step's state belongs to: the limiter's name,
// the key and the algorithm's kind, never one configuration (see
// floodgate.Store).
func (h *harness) runIdentity(t *testing.T) {
	t.Run("Names", h.identityNames)
	t.Run("Interleaved", h.identityInterleaved)
	t.Run("ConfigurationChange", h.identityChange)
	t.Run("Kinds", h.identityKinds)
	t.Run("Limits", h.identityLimits)
}

// identityNames checks that limiters built for different purposes keep
// their keys' states apart: two configurations of one kind under their
// derived names (a search limit and an upload limit keyed by the same
// user), one configuration under two names, and two Limits sharing kinds;
// and that two limiters of one configuration and no name share one
// state, as the processes of a fleet building the same limiter must.
func (h *harness) identityNames(t *testing.T) {
	ctx := context.Background()
	search := floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10}
	upload := floodgate.TokenBucket{Rate: 1, Per: time.Minute, Burst: 1}
	plan := floodgate.Limits{search, floodgate.FixedWindow{Limit: 100, Window: time.Hour}}
	other := floodgate.Limits{floodgate.TokenBucket{Rate: 5, Per: time.Second, Burst: 5}, floodgate.FixedWindow{Limit: 1, Window: time.Hour}}
	for _, tc := range []struct {
		name        string
		first, then func(s *store) pair
		firstN      int64 // units the first limiter spends
		want        int64 // units the second then admits, one at a time
		of          int64 // of so many asked
	}{
		{"SearchAfterUpload",
			func(s *store) pair { return s.named(t, "", upload) },
			func(s *store) pair { return s.named(t, "", search) }, 1, 10, 10},
		{"UploadAfterSearch",
			func(s *store) pair { return s.named(t, "", search) },
			func(s *store) pair { return s.named(t, "", upload) }, 10, 1, 1},
		{"OneConfigurationTwoNames",
			func(s *store) pair { return s.named(t, "search", search) },
			func(s *store) pair { return s.named(t, "export", search) }, 10, 10, 10},
		{"TwoLimits",
			func(s *store) pair { return s.named(t, "", other) },
			func(s *store) pair { return s.named(t, "", plan) }, 1, 10, 10},
		{"OneConfigurationNoName",
			func(s *store) pair { return s.named(t, "", search) },
			func(s *store) pair { return s.named(t, "", search) }, 4, 6, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewClock(t0)
			s := h.open(t, clock.Now)
			a, b := tc.first(s), tc.then(s)
			for _, r := range []route{viaAllowN, viaBoundApply} {
				key := "user:42/" + r.String()
				if got, err := a.do(ctx, r, key, take(tc.firstN)); err != nil || !got.Allowed {
					t.Fatalf("%v named %q: %v take(%d) on a new key = %s, %v, want admitted", a.alg, a.name, r, tc.firstN, show(r, got), err)
				}
				admitted := int64(0)
				for range tc.of {
					got, err := b.do(ctx, r, key, take(1))
					if err != nil {
						t.Fatalf("%v named %q: %v take(1): %v", b.alg, b.name, r, err)
					}
					if got.Allowed {
						admitted++
					}
				}
				if admitted != tc.want {
					t.Errorf("%v named %q after %v named %q took %d: %v admitted %d of %d, want %d",
						b.alg, b.name, a.alg, a.name, tc.firstN, r, admitted, tc.of, tc.want)
				}
			}
		})
	}
}

// identityLimits runs random traces that interleave two Limits sharing
// kinds (in another order, with other configurations) under one name, a
// single algorithm of one of their kinds under that name, and the first
// Limits under another name, on the same keys, and requires the Results
// of the reference: under one name a Limits' i-th limit of a kind shares
// the state of every Limits' i-th limit of that kind, and no single
// algorithm's; under two names nothing is shared.
func (h *harness) identityLimits(t *testing.T) {
	clock := NewClock(t0)
	s := h.open(t, clock.Now)
	for i := range traces / 2 {
		g := h.rng(t, i)
		a := genLimits(g)
		b := make(floodgate.Limits, len(a))
		for j, l := range a {
			b[len(a)-1-j] = genKind(g, kindOf(l))
		}
		ps := []pair{s.pair(t, a), s.pair(t, b), s.pair(t, genKind(g, kindOf(a[0]))), s.named(t, "other", a)}
		keys := []string{fmt.Sprintf("identity-limits/%d/a", i), fmt.Sprintf("identity-limits/%d/b", i)}
		h.trace(t, g, clock, i, ps, keys, g.count(1, 40))
	}
}

// identityInterleaved runs random traces (half as many as runReference:
// each is a Reference trace with more limiters) that interleave two
// limiters of one kind with different configurations and one of another
// kind, under one name, and one of the first kind under another name, on
// the same keys, and requires the Results of the reference applied to one
// state per (name, key, kind).
func (h *harness) identityInterleaved(t *testing.T) {
	clock := NewClock(t0)
	s := h.open(t, clock.Now)
	for i := range traces / 2 {
		g := h.rng(t, i)
		k := step.Kind(g.ints(int(step.KindTokenBucket), int(step.KindSlidingLog)))
		other := step.Kind(g.ints(int(step.KindTokenBucket), int(step.KindSlidingLog)-1))
		if other >= k {
			other++
		}
		ps := []pair{s.pair(t, genKind(g, k)), s.pair(t, genKind(g, k)), s.pair(t, genKind(g, other)), s.named(t, "other", genKind(g, k))}
		keys := []string{fmt.Sprintf("identity/%d/a", i), fmt.Sprintf("identity/%d/b", i)}
		h.trace(t, g, clock, i, ps, keys, g.count(1, 40))
	}
}

// changes are, per kind, an old configuration and the one a rolling deploy
// replaces it with, on the same key.
var changes = []struct {
	name     string
	old, new floodgate.Algorithm
}{
	{"TokenBucket", floodgate.TokenBucket{Rate: 2, Per: time.Second, Burst: 2}, floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10}},
	{"LeakyBucket", floodgate.LeakyBucket{Rate: 10, Per: time.Second, Capacity: 2}, floodgate.LeakyBucket{Rate: 10, Per: time.Second, Capacity: 5}},
	{"FixedWindow", floodgate.FixedWindow{Limit: 2, Window: time.Second}, floodgate.FixedWindow{Limit: 5, Window: 2 * time.Second}},
	{"SlidingWindow", floodgate.SlidingWindow{Limit: 2, Window: time.Second}, floodgate.SlidingWindow{Limit: 5, Window: 2 * time.Second}},
	{"SlidingLog", floodgate.SlidingLog{Limit: 2, Window: time.Second}, floodgate.SlidingLog{Limit: 5, Window: 2 * time.Second}},
}

// identityChange changes a key's configuration mid-traffic under one
// name, for every algorithm: the old limiter spends its quota, the new one
// (a higher limit) continues from the old one's state rather than from a
// fresh quota, and the old one, still running on another process, sees
// what the new one admitted (its limit is now lower than the count). Under
// the names derived from the configurations, the new one starts from a
// fresh quota instead.
func (h *harness) identityChange(t *testing.T) {
	ctx := context.Background()
	for _, tc := range changes {
		t.Run(tc.name+"/Derived", func(t *testing.T) {
			clock := NewClock(t0)
			s := h.open(t, clock.Now)
			old, cur := s.named(t, "", tc.old), s.named(t, "", tc.new)
			oldQ, newQ := tc.old.Policy().Quota, tc.new.Policy().Quota
			for _, r := range []route{viaAllowN, viaBoundApply} {
				key := "change/derived/" + r.String()
				if got, err := old.do(ctx, r, key, take(oldQ)); err != nil || !got.Allowed {
					t.Fatalf("%v %v take(%d) on a new key = %s, %v, want admitted", tc.old, r, oldQ, show(r, got), err)
				}
				if got, err := cur.do(ctx, r, key, take(newQ)); err != nil || !got.Allowed {
					t.Errorf("%v %v take(%d) after %v spent the key under another derived name = %s, %v, want a fresh quota",
						tc.new, r, newQ, tc.old, show(r, got), err)
				}
			}
		})
		t.Run(tc.name, func(t *testing.T) {
			clock := NewClock(t0)
			s := h.open(t, clock.Now)
			old, cur := s.pair(t, tc.old), s.pair(t, tc.new)
			oldQ, newQ := tc.old.Policy().Quota, tc.new.Policy().Quota
			script := []struct {
				p   pair
				at  time.Duration
				req floodgate.Request
			}{
				{old, 0, take(oldQ)},
				{cur, 10 * ms, take(1)}, // the deploy: must not see a fresh quota
				{cur, 20 * ms, upTo(newQ)},
				{old, 30 * ms, take(1)},
				{old, 40 * ms, upTo(oldQ)},
				{cur, 600 * ms, reserve(2, time.Second)},
				{old, 700 * ms, reserve(1, 2*time.Second)},
				{cur, 700 * ms, refund(1, 20*ms)},
				// A window the old configuration started, not aligned to
				// the new one's: the new windows follow it until they roll
				// over.
				{cur, 800 * ms, reserve(newQ, 5*time.Second)},
				{cur, 1500 * ms, take(newQ)},
				{old, 2500 * ms, take(1)},
				{cur, 2500 * ms, upTo(newQ)},
				{old, 9 * time.Second, take(oldQ)},
			}
			var ref Reference
			for _, route := range []func(floodgate.Request) route{typed, func(floodgate.Request) route { return viaBoundApply }} {
				key := fmt.Sprintf("change/%v", route(take(1)))
				for i, st := range script {
					now := t0.Add(st.at)
					clock.Set(now)
					r := route(st.req)
					want, err := ref.Apply(st.p.name, key, st.p.alg, now, st.req, nil)
					if err != nil {
						t.Fatalf("step %d: the reference: %v", i, err)
					}
					got, err := st.p.do(ctx, r, key, st.req)
					if err != nil {
						t.Fatalf("step %d: %v %v %s at t0+%v: %v", i, st.p.alg, r, opString(st.req, t0), st.at, err)
					}
					if i == 1 {
						var fresh Reference
						if f, _ := fresh.Apply(st.p.name, key, st.p.alg, now, st.req, nil); same(r, f, got) {
							t.Fatalf("step %d: %v %v %s after %v spent the key = %s: a fresh quota, want one state per (name, key, kind), %s",
								i, st.p.alg, r, opString(st.req, t0), tc.old, show(r, got), show(r, want))
						}
					}
					if !same(r, want, got) {
						t.Errorf("step %d: %v %v %s at t0+%v:\n got %s\nwant %s (one state per name, key and kind)",
							i, st.p.alg, r, opString(st.req, t0), st.at, show(r, got), show(r, want))
					}
				}
			}
		})
	}
}

// identityKinds checks that the five kinds on one key under one name keep
// five states: each admits its whole quota after the others spent theirs.
func (h *harness) identityKinds(t *testing.T) {
	clock := NewClock(t0)
	s := h.open(t, clock.Now)
	ctx := context.Background()
	algs := fiveAlgorithms()
	for round, r := range []route{viaAllowN, viaBoundApply} {
		key := fmt.Sprintf("kinds/%v", r)
		clock.Set(t0.Add(time.Duration(round) * ms))
		for _, alg := range algs {
			p := s.pair(t, alg)
			q := alg.Policy().Quota
			got, err := p.do(ctx, r, key, take(q))
			if err != nil {
				t.Fatalf("%v %v take(%d): %v", alg, r, q, err)
			}
			if !got.Allowed || got.Remaining != 0 {
				t.Errorf("%v %v take(%d) on a key the other kinds spent = %s, want its whole quota admitted: a state per kind",
					alg, r, q, show(r, got))
			}
		}
	}
}
