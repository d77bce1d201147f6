package observe

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/floodgate-go/floodgate"
)

func TestTallyAddReusesCounters(t *testing.T) {
	var tally Tally
	a, b := tally.add("r", 0), tally.add("r", 0)
	c := tally.add("r", 2)
	if a != b || a == c || len(tally.sets) != 2 {
		t.Errorf("add(r, 0) twice and add(r, 2): %p %p %p, %d sets; want the first two shared and 2 sets", a, b, c, len(tally.sets))
	}
}

// admitAll is a Store whose Bounds admit every step.
type admitAll struct{}

func (admitAll) Bind(string, floodgate.Algorithm) (floodgate.Bound, error) { return admitAll{}, nil }

func (admitAll) Take(context.Context, string, int64) (floodgate.Decision, error) {
	return floodgate.Decision{Allowed: true}, nil
}

func (admitAll) Apply(context.Context, string, floodgate.Request, []floodgate.Decision) (floodgate.Result, error) {
	return floodgate.Result{Decision: floodgate.Decision{Allowed: true}}, nil
}

// TestOneAdditionPerDecision checks the hot path's arithmetic: a decision
// of one unit adds 1 to one counter of one stripe, and nothing else; one
// of several units adds to two (its count and its extra units).
func TestOneAdditionPerDecision(t *testing.T) {
	for _, tc := range []struct {
		name        string
		n           int64
		words, sums uint64 // counter words changed per decision, and by how much
	}{{"one unit", 1, 1, 1}, {"three units", 3, 2, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			var tally Tally
			s, err := Store(admitAll{}, &Observer{Tally: &tally})
			if err != nil {
				t.Fatal(err)
			}
			b, err := s.Bind("x", floodgate.TokenBucket{Rate: 1, Per: 1, Burst: 1})
			if err != nil {
				t.Fatal(err)
			}
			const decisions = 1000
			for range decisions {
				if _, err := b.Take(context.Background(), "k", tc.n); err != nil {
					t.Fatal(err)
				}
			}
			c := tally.sets[0]
			var stripes, words, sum uint64
			for i := range c.stripes {
				st := &c.stripes[i]
				touched := uint64(0)
				for _, arr := range []*[NumActions][4]atomic.Uint64{&st.n, &st.none, &st.extra} {
					for a := range NumActions {
						for o := range 4 {
							if v := arr[a][o].Load(); v != 0 {
								touched++
								sum += v
							}
						}
					}
				}
				for j := range st.binding {
					if st.binding[j].Load() != 0 {
						touched++
					}
				}
				if touched > 0 {
					stripes++
					words += touched
				}
			}
			if got, want := tally.Read()[0].Decisions[ActionTake][Allowed], uint64(decisions); got != want {
				t.Fatalf("%d admitted takes counted, want %d", got, want)
			}
			// Each stripe a decision landed on has the same counter words
			// changed: n[take][allowed], and extra[take][allowed] for
			// several units.
			if words != stripes*tc.words || sum != decisions*tc.sums {
				t.Errorf("%d counter words changed on %d stripes, adding up to %d; want %d per stripe and %d in all",
					words, stripes, sum, tc.words, decisions*tc.sums)
			}
		})
	}
}
