package redisstore

import (
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/step"
)

// decodeLimits builds the Result of a Limits decision from limits.lua's
// reply: it runs step.Limits, the reference, with the script's steps as
// the limits' (each checked against its limit's reference transition, as
// a single script's reply is), and checks that the script took the steps
// step.Limits takes, in its order, and wrote exactly when step.Limits
// keeps the limits' states.
func (a algo) decodeLimits(reply any, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	vals, ok := reply.([]any)
	if !ok {
		return floodgate.Result{}, badReply("%T, want an array", reply)
	}
	r := replyReader{vals: vals}
	now, wrote := r.now(), r.int(2)
	if r.err == nil && wrote != 0 && wrote != 1 {
		r.err = badReply("written %d, want 0 or 1", wrote)
	}
	if r.err != nil {
		return floodgate.Result{}, r.err
	}
	m := replyMembers{a: &a, steps: vals[3:]}
	res, err := step.Limits(a.ls, &m, time.Unix(0, now), req, each)
	switch {
	case m.err != nil:
		return floodgate.Result{}, m.err
	case err != nil:
		return floodgate.Result{}, unavailable(ErrMismatch, fmt.Errorf("redisstore: Limits: the reference fails the script's steps: %w", err))
	case m.next != len(m.steps):
		return floodgate.Result{}, unavailable(ErrMismatch, fmt.Errorf("redisstore: Limits: the script took %d steps, the reference %d", len(m.steps)/2, m.next/2))
	case m.kept != (wrote == 1):
		return floodgate.Result{}, unavailable(ErrMismatch, fmt.Errorf("redisstore: Limits: the script wrote=%v, the reference kept=%v", wrote == 1, m.kept))
	}
	return res, nil
}

// replyMembers is step.Members over limits.lua's reply: Step returns the
// Result of the script's next step, which must be of the limit and at the
// instant step.Limits asks for, and read the same stored state as the
// limit's other steps (the script wrote nothing in between).
type replyMembers struct {
	a     *algo
	steps []any // pairs: the limit's index from 1, the step's reply
	next  int
	old   [8]string // the stored state each limit's steps read (a sliding log's: none)
	kept  bool
	err   error // the first error of a step
}

var _ step.Members = (*replyMembers)(nil)

func (m *replyMembers) Step(i int, at time.Time, req floodgate.Request) (floodgate.Result, error) {
	res, err := m.step(i, at, req)
	if err != nil && m.err == nil {
		m.err = err
	}
	return res, err
}

func (m *replyMembers) step(i int, at time.Time, req floodgate.Request) (floodgate.Result, error) {
	mismatch := func(format string, args ...any) (floodgate.Result, error) {
		return floodgate.Result{}, unavailable(ErrMismatch, fmt.Errorf("redisstore: Limits[%d]: "+format, append([]any{i}, args...)...))
	}
	if m.next+1 >= len(m.steps) {
		return mismatch("the reference takes step %d, which the script did not", m.next/2+1)
	}
	idx, reply := m.steps[m.next], m.steps[m.next+1]
	m.next += 2
	if idx != int64(i+1) {
		return mismatch("the script's step %d is of limit %v (from 1)", m.next/2, idx)
	}
	lim := &m.a.members[i]
	res, err := lim.decode(reply, req, nil)
	if err != nil {
		return floodgate.Result{}, fmt.Errorf("redisstore: Limits[%d]: %w", i, err)
	}
	if !res.At.Equal(at) {
		return mismatch("the script stepped at %d, the reference at %d", res.At.UnixNano(), at.UnixNano())
	}
	if lim.kind != step.KindSlidingLog {
		r, _ := newReplyReader(reply) // decode read it
		switch old := r.str(2); {
		case m.old[i] == "":
			m.old[i] = old
		case old != m.old[i]:
			return mismatch("the script's steps read the states %q and %q", m.old[i], old)
		}
	}
	return res, nil
}

// Keep notes that step.Limits keeps the limits' states, which the script
// wrote.
func (m *replyMembers) Keep(int) { m.kept = true }

// failed returns the Result of a decision that Redis did not make, under
// FailOpen (admit: every unit asked for, up to the quota) or FailClosed
// (deny, retry after retry); a settlement settles nothing. A Limits'
// Result is step.Limits' over its limits' such Results: each limit's
// Decision in each, the binding one reported.
func (a algo) failed(req floodgate.Request, now time.Time, admit bool, retry time.Duration, each []floodgate.Decision) floodgate.Result {
	if a.members != nil {
		res, err := step.Limits(a.ls, policyMembers{a: &a, admit: admit, retry: retry}, now, req, each)
		if err == nil {
			return res
		}
		// Unreachable: apply checked req, and every limit admits or
		// denies alike.
	}
	return policyResult(a.quota, req, now, admit, retry)
}

// policyResult is failed's Result for a quota.
func policyResult(quota int64, req floodgate.Request, now time.Time, admit bool, retry time.Duration) floodgate.Result {
	res := floodgate.Result{At: now, Decision: floodgate.Decision{Limit: quota}}
	switch {
	case req.Op == floodgate.OpSettle:
	case admit:
		res.Allowed, res.Granted = true, min(req.N, quota)
		res.Remaining = quota - res.Granted
	default:
		res.RetryAfter = retry
	}
	return res
}

// policyMembers is step.Members of the Results of failed for each limit.
type policyMembers struct {
	a     *algo
	admit bool
	retry time.Duration
}

func (p policyMembers) Step(i int, at time.Time, req floodgate.Request) (floodgate.Result, error) {
	return policyResult(p.a.members[i].quota, req, at, p.admit, p.retry), nil
}

func (policyMembers) Keep(int) {}
