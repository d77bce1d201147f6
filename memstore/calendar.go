package memstore

import (
	"context"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/keytable"
	"github.com/floodgate-go/floodgate/internal/timemath"
	"github.com/floodgate-go/floodgate/step"
)

// cwBound runs one calendar window configuration. Its keys are in a fixed
// window table of their own (step.KindCalendarWindow: a calendar window
// shares no state with a fixed window bound under the same name); its
// entries keep their state under the entry's mutex, since a calendar
// window's start is not a multiple of a window length that a word could
// pack.
type cwBound struct {
	t  *fwTable
	sc keytable.Scope
	a  floodgate.CalendarWindow
}

func (s *Store) bindCW(sc keytable.Scope, a floodgate.CalendarWindow) *cwBound {
	t := lazy(s, &s.cw, func() *fwTable { return newFWTable(s) })
	// A state is restored once its window has ended: at most a leap year
	// and a day after its start.
	raise(&t.maxW, timemath.MaxCalendarWindow)
	return &cwBound{t: t, sc: sc, a: a}
}

// Apply executes one step on key; see floodgate.Bound.
func (b *cwBound) Apply(_ context.Context, key string, req floodgate.Request, _ []floodgate.Decision) (floodgate.Result, error) {
	if err := floodgate.CheckKey(key); err != nil {
		return floodgate.Result{}, err
	}
	for {
		s := b.t.entry(&b.sc, key, fwPacking{}).toSlow()
		if s == nil {
			continue // reclaimed after the lookup: look again
		}
		next, res, err := step.CalendarWindow(b.a, s.st, b.t.s.clock(), req)
		if !req.Check {
			s.st = next
		}
		s.mu.Unlock()
		return res, err
	}
}

// Take is Apply of a plain take.
func (b *cwBound) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	res, err := b.Apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: n}, nil)
	return res.Decision, err
}
