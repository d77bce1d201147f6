package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/floodgate-go/floodgate"
)

// JointStep is one part of a joint step (Store.ApplyJoint): the state
// of Key under the limiter named Name with the algorithm Alg, the state
// a floodgate.Limiter of that name and algorithm on this Store decides
// on.
type JointStep struct {
	Name string
	Alg  floodgate.Algorithm
	Key  string
}

// ErrNotJoint reports steps that ApplyJoint cannot decide as one script
// call: their keys are not on one Cluster slot (or one Ring shard), two
// of them are one state, or they are more than a floodgate.Limits holds.
// The caller decides them another way.
var ErrNotJoint = errors.New("redisstore: steps not decidable as one script call")

// ApplyJoint decides req on the states of several limiters' keys as one
// step, as a floodgate.Limits decides its limits: admitted only if every
// step admits, a denial changes no state, Result's Decision is the
// binding step's, and each, when it holds len(steps) Decisions, gets each
// step's own. It is one script call, atomic on the server, on the states
// the limiters' own decisions use. It returns an error matching
// ErrNotJoint when the keys are on different Cluster slots, on a Ring, or
// when two steps name one state; a failure of Redis as the error it is,
// whatever Options.OnFailure says (the caller decides what a failed joint
// step counts as). req.UndoLate is honoured as by a Bound: a take that
// timed out and that Redis made is given back on every step.
func (s *Store) ApplyJoint(ctx context.Context, steps []JointStep, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	if len(steps) == 0 || len(steps) > 8 {
		return floodgate.Result{}, fmt.Errorf("%w: %d steps, want 1 to 8", ErrNotJoint, len(steps))
	}
	if s.ring != nil {
		return floodgate.Result{}, fmt.Errorf("%w: a Ring", ErrNotJoint)
	}
	ls := make(floodgate.Limits, len(steps))
	for i, st := range steps {
		if err := floodgate.CheckName(st.Name); err != nil {
			return floodgate.Result{}, err
		}
		if err := floodgate.CheckKey(st.Key); err != nil {
			return floodgate.Result{}, err
		}
		ls[i] = st.Alg
	}
	a, err := resolveLimits(ls)
	if err != nil {
		return floodgate.Result{}, err
	}
	now, err := s.begin(ctx, req, a.quota)
	if err != nil {
		return floodgate.Result{}, err
	}
	keys := make([]string, len(steps))
	for i, st := range steps {
		keys[i] = s.prefix + "{" + s.hashed(st.Key) + "}" + singleSuffix(st.Name, a.members[i].stateKind())
		for _, k := range keys[:i] {
			if k == keys[i] {
				return floodgate.Result{}, fmt.Errorf("%w: two steps on %q", ErrNotJoint, k)
			}
		}
		if s.cluster != nil && i > 0 && slotOf(keys[i]) != slotOf(keys[0]) {
			return floodgate.Result{}, fmt.Errorf("%w: keys on Cluster slots %d and %d", ErrNotJoint, slotOf(keys[0]), slotOf(keys[i]))
		}
	}
	var late func(any)
	if req.UndoLate && !req.Check && req.Op != floodgate.OpSettle {
		late = func(reply any) { s.giveBack(&a, nil, keys[0], keys, req, reply) }
	}
	reply, o, n, err := s.exec(ctx, a.prog(), false, keys[0], keys, (*argsCache)(nil).args(a, now, s.calClock, req, s.marginMs), late)
	if err == nil {
		res, derr := a.decodeLimits(reply, req, each)
		if derr == nil {
			return res, nil
		}
		err = derr
	}
	if o != ignored {
		s.failures(n, false, err)
	}
	return floodgate.Result{}, err
}
