package redisstore

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/step"
)

// decodeLimits builds the Result of a Limits decision from limits.lua's
// reply, an array, or limits_fast.lua's, the same elements as one string:
// it runs step.Limits, the reference, with the script's steps as the
// limits' (each checked against its limit's reference transition, as a
// single script's reply is), and checks that the script took the steps
// step.Limits takes, in its order, and wrote exactly when step.Limits
// keeps the limits' states. A pointer receiver and a pooled replyMembers:
// no allocation of its own.
func (a *algo) decodeLimits(reply any, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	m := membersPool.Get().(*replyMembers)
	defer func() {
		*m = replyMembers{}
		membersPool.Put(m)
	}()
	m.a = a
	var (
		now   int64
		wrote int64
	)
	switch v := reply.(type) {
	case []any:
		r := replyReader{vals: v}
		now, wrote = r.now(), r.int(2)
		if r.err != nil {
			return floodgate.Result{}, r.err
		}
		m.steps = v[3:]
	case string:
		// "s ns wrote", then the steps.
		var r replyReader
		rest := v
		for i := range 3 {
			f, tail, more := strings.Cut(rest, " ")
			if f == "" || !more && i < 2 {
				return floodgate.Result{}, badReply("Limits reply %q, want the instant, written and the steps", v)
			}
			r.fields[i] = f
			rest = tail
		}
		r.n = 3
		now, wrote = r.now(), r.int(2)
		if r.err != nil {
			return floodgate.Result{}, r.err
		}
		m.str, m.isStr = rest, true
	default:
		return floodgate.Result{}, badReply("%T, want an array or a string", reply)
	}
	if wrote != 0 && wrote != 1 {
		return floodgate.Result{}, badReply("written %d, want 0 or 1", wrote)
	}
	res, err := step.Limits(a.ls, m, time.Unix(0, now), req, each)
	switch {
	case m.err != nil:
		return floodgate.Result{}, m.err
	case err != nil:
		return floodgate.Result{}, unavailable(ErrMismatch, fmt.Errorf("redisstore: Limits: the reference fails the script's steps: %w", err))
	case m.left():
		return floodgate.Result{}, unavailable(ErrMismatch, fmt.Errorf("redisstore: Limits: the script took more steps than the reference's %d", m.taken))
	case m.kept != (wrote == 1):
		return floodgate.Result{}, unavailable(ErrMismatch, fmt.Errorf("redisstore: Limits: the script wrote=%v, the reference kept=%v", wrote == 1, m.kept))
	}
	return res, nil
}

// membersPool holds replyMembers between decisions: step.Limits takes
// them as an interface, which would move a new one to the heap each time.
var membersPool = sync.Pool{New: func() any { return new(replyMembers) }}

// replyMembers is step.Members over limits.lua's reply: Step returns the
// Result of the script's next step, which must be of the limit and at the
// instant step.Limits asks for, and read the same stored state as the
// limit's other steps (the script wrote nothing in between).
type replyMembers struct {
	a *algo
	// The steps not read yet: pairs of the limit's index from 1 and the
	// step's reply, as array elements (steps) or, for a string reply,
	// as its remaining elements (str), seven a step.
	steps []any
	str   string
	isStr bool
	taken int       // the steps read
	old   [8]string // the stored state each limit's steps read (a sliding log's: none)
	kept  bool
	err   error // the first error of a step
}

var _ step.Members = (*replyMembers)(nil)

// left reports whether steps remain unread.
func (m *replyMembers) left() bool {
	if m.isStr {
		return m.str != ""
	}
	return len(m.steps) > 0
}

func (m *replyMembers) Step(i int, at time.Time, req floodgate.Request) (floodgate.Result, error) {
	res, err := m.step(i, at, req)
	if err != nil && m.err == nil {
		m.err = err
	}
	return res, err
}

// fastFields is the number of elements of a fast path's reply.
const fastFields = 6

func (m *replyMembers) step(i int, at time.Time, req floodgate.Request) (floodgate.Result, error) {
	mismatch := func(format string, args ...any) (floodgate.Result, error) {
		return floodgate.Result{}, unavailable(ErrMismatch, fmt.Errorf("redisstore: Limits[%d]: "+format, append([]any{i}, args...)...))
	}
	m.taken++
	var (
		idx int64
		r   replyReader
	)
	if m.isStr {
		if m.str == "" {
			return mismatch("the reference takes step %d, which the script did not", m.taken)
		}
		f, rest, _ := strings.Cut(m.str, " ")
		var err error
		if idx, err = strconv.ParseInt(f, 10, 64); err != nil {
			return floodgate.Result{}, badReply("Limits step %d: limit %q", m.taken, f)
		}
		for j := range fastFields {
			var more bool
			r.fields[j], rest, more = strings.Cut(rest, " ")
			if r.fields[j] == "" || !more && j < fastFields-1 {
				return floodgate.Result{}, badReply("Limits step %d: a reply of %d elements, want %d", m.taken, j+1, fastFields)
			}
		}
		r.n = fastFields
		m.str = rest
	} else {
		if len(m.steps) < 2 {
			return mismatch("the reference takes step %d, which the script did not", m.taken)
		}
		v, reply := m.steps[0], m.steps[1]
		m.steps = m.steps[2:]
		n, ok := v.(int64)
		if !ok {
			return floodgate.Result{}, badReply("Limits step %d: limit %v, want an integer", m.taken, v)
		}
		idx = n
		var err error
		if r, err = newReplyReader(reply); err != nil {
			return floodgate.Result{}, fmt.Errorf("redisstore: Limits[%d]: %w", i, err)
		}
	}
	if idx != int64(i+1) {
		return mismatch("the script's step %d is of limit %v (from 1)", m.taken, idx)
	}
	lim := &m.a.members[i]
	res, err := lim.decodeReader(&r, req)
	if err != nil {
		return floodgate.Result{}, fmt.Errorf("redisstore: Limits[%d]: %w", i, err)
	}
	if !res.At.Equal(at) {
		return mismatch("the script stepped at %d, the reference at %d", res.At.UnixNano(), at.UnixNano())
	}
	if lim.kind != step.KindSlidingLog {
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
