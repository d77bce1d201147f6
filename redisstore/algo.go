package redisstore

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/timemath"
	"github.com/floodgate-go/floodgate/redisstore/internal/scripts"
	"github.com/floodgate-go/floodgate/step"
)

// algo is one of the five algorithm configurations, validated, with the
// numbers its script takes (see scripts.Args); or a Limits of them, whose
// limits are its members.
type algo struct {
	kind  step.Kind // 0 for a Limits
	quota int64     // for a Limits, its Policy's: the smallest
	tb    floodgate.TokenBucket
	lb    floodgate.LeakyBucket
	fw    floodgate.FixedWindow
	cw    floodgate.CalendarWindow // with cal set: decided as a fixed window
	cal   bool
	sw    floodgate.SlidingWindow
	sl    floodgate.SlidingLog

	period int64 // emission interval (buckets) or window (windows), in ns
	tau    int64 // the time to restore the full quota (buckets), in ns

	ls      floodgate.Limits
	members []algo          // ls's limits, resolved
	limits  []scripts.Limit // their numbers, as limits.lua takes them
	hasCal  bool            // a member is a calendar window
}

// resolve validates alg, one of the five configurations or a Limits of
// them, as a value (floodgate.New dereferences pointers), and returns its
// algo.
func resolve(alg floodgate.Algorithm) (algo, error) {
	if ls, ok := alg.(floodgate.Limits); ok {
		return resolveLimits(ls)
	}
	return resolveOne(alg)
}

// resolveLimits validates ls and resolves its limits.
func resolveLimits(ls floodgate.Limits) (algo, error) {
	if err := ls.Validate(); err != nil {
		return algo{}, err
	}
	a := algo{quota: ls.Policy().Quota, ls: ls, members: make([]algo, len(ls)), limits: make([]scripts.Limit, len(ls))}
	for i, l := range ls {
		m, err := resolveOne(l)
		if err != nil {
			return algo{}, fmt.Errorf("redisstore: Limits[%d]: %w", i, err)
		}
		a.members[i] = m
		a.limits[i] = scripts.Limit{Kind: m.kind, Quota: m.quota, Period: m.period, Tau: m.tau}
		if m.cal {
			a.limits[i].Kind, a.hasCal = scripts.KindCalendar, true
		}
	}
	return a, nil
}

// kindCode returns the code of kind in Redis keys.
func kindCode(kind step.Kind) string {
	switch kind {
	case step.KindTokenBucket:
		return "tb"
	case step.KindLeakyBucket:
		return "lb"
	case step.KindFixedWindow:
		return "fw"
	case step.KindSlidingWindow:
		return "sw"
	case step.KindSubWindows:
		return "sws"
	case step.KindCalendarWindow:
		return "cw"
	}
	return "sl"
}

// singleSuffix returns what follows the hash tag in the Redis key of a
// single algorithm of kind named name (see Store.Key).
func singleSuffix(name string, kind step.Kind) string {
	return ":" + name + ":" + kindCode(kind)
}

// limitSuffix returns what follows the hash tag in the Redis key of the
// ord-th limit of kind in a Limits named name (see Store.LimitKey).
func limitSuffix(name string, kind step.Kind, ord int) string {
	return ":" + name + ":L:" + kindCode(kind) + strconv.Itoa(ord)
}

// resolveOne validates alg, one of the five configurations as a value,
// and returns its algo.
func resolveOne(alg floodgate.Algorithm) (algo, error) {
	var a algo
	kind, err := step.KindOf(alg)
	if err != nil {
		return a, fmt.Errorf("redisstore: %w", err)
	}
	switch v := alg.(type) {
	case floodgate.TokenBucket:
		a.tb = v
	case floodgate.LeakyBucket:
		a.lb = v
	case floodgate.FixedWindow:
		a.fw = v
	case floodgate.CalendarWindow:
		a.cw, a.cal = v, true
	case floodgate.SlidingWindow:
		a.sw = v
	case floodgate.SlidingLog:
		a.sl = v
	}
	if err := alg.Validate(); err != nil {
		return a, err
	}
	a.kind = kind
	if a.cal {
		// Decided as a fixed window with civil boundaries; its keys are
		// of its own kind (stateKind).
		a.kind = step.KindFixedWindow
	}
	p := alg.Policy()
	a.quota = p.Quota
	if a.quota > scripts.MaxQuota {
		// The scripts count in doubles.
		return a, fmt.Errorf("%w: redisstore supports quotas up to %d, got %d", floodgate.ErrInvalidConfig, scripts.MaxQuota, a.quota)
	}
	switch a.kind {
	case step.KindTokenBucket, step.KindLeakyBucket:
		// Policy's window is tau = quota·interval exactly.
		a.period, a.tau = int64(p.Window)/a.quota, int64(p.Window)
	case step.KindSubWindows:
		// subwindow.lua takes the sub-window and S.
		a.period, a.tau = int64(a.sw.Window)/int64(a.sw.SubWindows), int64(a.sw.SubWindows)
	default:
		a.period = int64(p.Window)
	}
	return a, nil
}

// scale returns the configuration holding share of a's quota, for the
// local fallback: the buckets keep their rate per unit of quota (Per grows
// as the burst shrinks), the windows keep their window; a Limits scales
// each of its limits.
func (a algo) scale(share float64) floodgate.Algorithm {
	if a.members != nil {
		ls := make(floodgate.Limits, len(a.members))
		for i, m := range a.members {
			ls[i] = m.scale(share)
		}
		return ls
	}
	part := func(q int64) int64 { return max(int64(math.Floor(float64(q)*share)), 1) }
	per := func(d time.Duration) time.Duration {
		return time.Duration(min(math.Ceil(float64(d)/share), float64(math.MaxInt64/2)))
	}
	switch a.kind {
	case step.KindTokenBucket:
		if share == 1 {
			return a.tb
		}
		return floodgate.TokenBucket{Rate: a.tb.Rate, Per: per(a.tb.Per), Burst: part(a.tb.Burst)}
	case step.KindLeakyBucket:
		if share == 1 {
			return a.lb
		}
		return floodgate.LeakyBucket{Rate: a.lb.Rate, Per: per(a.lb.Per), Capacity: part(a.lb.Capacity)}
	case step.KindFixedWindow:
		if a.cal {
			cw := a.cw
			cw.Limit = part(cw.Limit)
			return cw
		}
		return floodgate.FixedWindow{Limit: part(a.fw.Limit), Window: a.fw.Window}
	case step.KindSlidingWindow, step.KindSubWindows:
		return floodgate.SlidingWindow{Limit: part(a.sw.Limit), Window: a.sw.Window, SubWindows: a.sw.SubWindows}
	default:
		return floodgate.SlidingLog{Limit: part(a.sl.Limit), Window: a.sl.Window}
	}
}

// args returns ARGV for the script: now is the client's clock in decimal
// nanoseconds, or "" for Redis TIME; clock is the client's clock, around
// which a calendar window's boundaries are given.
func (a algo) args(now string, clock time.Time, req floodgate.Request, marginMs int64) []any {
	args := scripts.Args{
		Op:       req.Op,
		Check:    req.Check,
		N:        req.N,
		MaxDelay: int64(min(req.MaxDelay, floodgate.MaxDelay)),
		MarginMs: marginMs,
		Quota:    a.quota,
		Period:   a.period,
		Tau:      a.tau,
		Now:      now,
	}
	if req.Op == floodgate.OpSettle {
		args.At = strconv.FormatInt(req.At.UnixNano(), 10)
	}
	if a.cal {
		args.Bounds = calendarBounds(a.cw, clock, args.MaxDelay)
	}
	if a.members != nil {
		limits := a.limits
		if a.hasCal {
			limits = append([]scripts.Limit(nil), a.limits...)
			for i, m := range a.members {
				if m.cal {
					limits[i].Bounds = calendarBounds(m.cw, clock, args.MaxDelay)
				}
			}
		}
		return args.LimitsARGV(limits)
	}
	return args.ARGV()
}

// calendarBounds returns the boundaries of a's windows that
// calendarwindow.lua takes, in decimal seconds separated by spaces: from
// the start of the window before the one holding the client's clock c to
// the third boundary after c + maxDelay, so that the script finds the
// window holding the server's clock, off c by less than a window, and the
// two after it, for a take at up to maxDelay later (a Limits' shifted
// take). Calendar boundaries are whole seconds: time zones' offsets and
// transitions are, and so is Offset.
func calendarBounds(a floodgate.CalendarWindow, c time.Time, maxDelay int64) string {
	start, end := a.Window(c)
	prev, _ := a.Window(start.Add(-time.Nanosecond))
	b := make([]byte, 0, 72)
	b = strconv.AppendInt(b, prev.Unix(), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, start.Unix(), 10)
	horizon := c.Add(time.Duration(maxDelay))
	for n, beyond := 2, 0; n < 6 || beyond < 3; n++ {
		b = append(b, ' ')
		b = strconv.AppendInt(b, end.Unix(), 10)
		if end.After(horizon) {
			beyond++
		}
		_, end = a.Window(end)
	}
	return string(b)
}

// stateKind returns the kind of a's state in Redis keys: its kind, or
// step.KindCalendarWindow for a calendar window (decided as a fixed
// window).
func (a *algo) stateKind() step.Kind {
	if a.cal {
		return step.KindCalendarWindow
	}
	return a.kind
}

// prog returns the script of a's decisions.
func (a algo) prog() prog {
	if a.members != nil {
		return progLimits
	}
	if a.cal {
		return prog(scripts.KindCalendar)
	}
	return prog(a.kind)
}

// argsCache remembers the ARGV of a bound algorithm's last take on Redis
// TIME. A limiter's decisions mostly repeat one (op, n, maxDelay), and the
// arguments are then the same slice: go-redis copies them into each
// command and never writes to them, so one slice serves every call at once
// (measured: 5 allocations a decision fewer).
type argsCache struct {
	last atomic.Pointer[cachedArgs]
}

type cachedArgs struct {
	op          floodgate.Op
	check       bool
	n, maxDelay int64
	args        []any
}

// args is algo.args through the cache; a nil c builds them. A calendar
// window's boundaries change with the clock: its arguments are built for
// each call.
func (c *argsCache) args(a algo, now string, clock func() time.Time, req floodgate.Request, marginMs int64) []any {
	if c == nil || now != "" || req.Op == floodgate.OpSettle || a.cal || a.hasCal {
		return a.args(now, clock(), req, marginMs)
	}
	maxDelay := int64(min(req.MaxDelay, floodgate.MaxDelay))
	if l := c.last.Load(); l != nil && l.op == req.Op && l.check == req.Check && l.n == req.N && l.maxDelay == maxDelay {
		return l.args
	}
	args := a.args(now, time.Time{}, req, marginMs)
	c.last.Store(&cachedArgs{op: req.Op, check: req.Check, n: req.N, maxDelay: maxDelay, args: args})
	return args
}

// decode builds the Result of a script's reply, re-running the reference
// Step on the state and instant the script used and checking that both
// agree.
func (a algo) decode(reply any, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	if a.members != nil {
		// A copy of its own, moved to the heap on this path only (the
		// store decodes a Limits on its bound's algo instead).
		c := a
		return c.decodeLimits(reply, req, each)
	}
	r, err := newReplyReader(reply)
	if err != nil {
		return floodgate.Result{}, err
	}
	return a.decodeReader(&r, req)
}

// decodeReader is decode of one of the five algorithms' replies, read by r.
func (a *algo) decodeReader(r *replyReader, req floodgate.Request) (floodgate.Result, error) {
	var err error
	switch a.kind {
	case step.KindSlidingLog:
		return a.decodeLog(r, req)
	case step.KindSubWindows:
		return a.decodeSub(r, req)
	}
	now, old, next := r.now(), r.str(2), r.str(3)
	allowed, granted := r.int(4) == 1, r.int(5)
	if r.err != nil {
		return floodgate.Result{}, r.err
	}
	t := time.Unix(0, now)
	var (
		res  floodgate.Result
		same bool          // the script's new state is the reference's
		want func() string // the reference's new state, for the error
	)
	switch a.kind {
	case step.KindTokenBucket, step.KindLeakyBucket:
		tat, perr := strconv.ParseInt(old, 10, 64)
		if perr != nil {
			return res, badReply("state %q", old)
		}
		var n int64
		if a.kind == step.KindTokenBucket {
			n, res, err = step.TokenBucket(a.tb, tat, t, req)
		} else {
			n, res, err = step.LeakyBucket(a.lb, tat, t, req)
		}
		got, gerr := strconv.ParseInt(next, 10, 64)
		same = gerr == nil && got == n
		want = func() string { return strconv.FormatInt(n, 10) }
	case step.KindFixedWindow:
		st, ok := parseFixed(old)
		if !ok {
			return res, badReply("fixed window state %q", old)
		}
		var n step.FixedWindowState
		if a.cal {
			n, res, err = step.CalendarWindow(a.cw, st, t, req)
		} else {
			n, res, err = step.FixedWindow(a.fw, st, t, req)
		}
		got, ok := parseFixed(next)
		same = ok && got == n
		want = func() string { return strconv.FormatInt(n.Start, 10) + ":" + strconv.FormatInt(n.Count, 10) }
	default:
		st, ok := parseSliding(old)
		if !ok {
			return res, badReply("sliding window state %q", old)
		}
		var n step.SlidingWindowState
		n, res, err = step.SlidingWindow(a.sw, st, t, req)
		got, ok := parseSliding(next)
		same = ok && got == n
		want = func() string {
			return strconv.FormatInt(n.Start, 10) + ":" + strconv.FormatInt(n.Prev, 10) + ":" + strconv.FormatInt(n.Curr, 10)
		}
	}
	if err != nil {
		return floodgate.Result{}, unavailable(ErrMismatch, fmt.Errorf("%v: the reference rejects the step the script took: %w", a.kind, err))
	}
	if res.Allowed != allowed || res.Granted != granted || !same {
		return floodgate.Result{}, unavailable(ErrMismatch, fmt.Errorf(
			"%v at %d from state %q: script allowed=%v granted=%d state %q, reference allowed=%v granted=%d state %q",
			a.kind, now, old, allowed, granted, next, res.Allowed, res.Granted, want()))
	}
	return res, nil
}

// decodeLog builds the Result of the sliding log's reply with the formulas
// of step.SlidingLog, from the facts the script returns (the log itself is
// too large to return), checking the facts for consistency.
func (a algo) decodeLog(r *replyReader, req floodgate.Request) (floodgate.Result, error) {
	t, allowed, granted := r.now(), r.int(2) == 1, r.int(3)
	from, atStr := r.int(4), r.str(5)
	before, after, lastStr := r.int(6), r.int(7), r.str(8)
	if r.err != nil {
		return floodgate.Result{}, r.err
	}
	limit, w := a.sl.Limit, int64(a.sl.Window)
	res := floodgate.Result{At: time.Unix(0, t), Decision: floodgate.Decision{Limit: limit}}
	var last int64
	hasLast := lastStr != ""
	if hasLast {
		var err error
		if last, err = strconv.ParseInt(lastStr, 10, 64); err != nil {
			return res, badReply("newest instant %q", lastStr)
		}
	}
	remaining := func(from, total int64) int64 {
		if from > t {
			return 0
		}
		return max(limit-total, 0) // negative after the Limit of a live key is lowered, as in step.SlidingLog
	}
	resetAfter := func() time.Duration {
		if !hasLast {
			return 0
		}
		return time.Duration(max(last+w-t, 0))
	}
	mismatch := func(why string) (floodgate.Result, error) {
		return floodgate.Result{}, unavailable(ErrMismatch, fmt.Errorf(
			"%v at %d, op %d n %d: %s (allowed=%v granted=%d from=%d at=%q before=%d after=%d last=%q)",
			a.kind, t, req.Op, req.N, why, allowed, granted, from, atStr, before, after, lastStr))
	}
	if from < t || before < 0 || after < 0 || (hasLast && last > from+int64(floodgate.MaxDelay)) {
		return mismatch("facts out of range")
	}
	switch req.Op {
	case floodgate.OpTake:
		at, err := strconv.ParseInt(atStr, 10, 64)
		if err != nil {
			return res, badReply("admission instant %q", atStr)
		}
		wait, maxDelay := at-t, int64(min(req.MaxDelay, floodgate.MaxDelay))
		if at < from || allowed != (wait <= maxDelay) {
			return mismatch("admission instant disagrees with the decision")
		}
		if !allowed {
			if granted != 0 || after != before {
				return mismatch("a denial changed the log")
			}
			res.Remaining = remaining(from, before)
			res.RetryAfter = time.Duration(wait - maxDelay)
			res.ResetAfter = resetAfter()
			return res, nil
		}
		if granted != req.N || !hasLast || last != at {
			return mismatch("the admission is not the newest entry")
		}
		if after < req.N || after > before+req.N || after > limit {
			return mismatch("the units after the admission are out of range")
		}
		res.Allowed, res.Granted = true, req.N
		res.Delay = time.Duration(wait)
		res.Remaining = remaining(at, after)
		res.ResetAfter = resetAfter()
		return res, nil
	case floodgate.OpTakeUpTo:
		m := min(req.N, remaining(from, before))
		if m <= 0 {
			if allowed || granted != 0 || after != before {
				return mismatch("a denial changed the log")
			}
			at, err := strconv.ParseInt(atStr, 10, 64)
			if err != nil {
				return res, badReply("retry instant %q", atStr)
			}
			if at < from || at <= t {
				return mismatch("a denial with room now")
			}
			res.RetryAfter = time.Duration(at - t)
			res.ResetAfter = resetAfter()
			return res, nil
		}
		if !allowed || granted != m || after != before+m || last != t {
			return mismatch("take up to n disagrees with the free units")
		}
		res.Allowed, res.Granted = true, m
		res.Remaining = remaining(from, after)
		res.ResetAfter = resetAfter()
		return res, nil
	default: // OpSettle
		if req.N > 0 {
			// A charge finds the entry and adds what the log has room
			// for (up to 2·Limit units), or finds none.
			room := max(limit-(before-limit), 0)
			if (granted != 0 && granted != min(req.N, room)) || after != before+granted || allowed != (granted > 0) {
				return mismatch("the charge disagrees with the units charged")
			}
		} else if granted < 0 || granted > settleBack(req.N) || after != before-granted || allowed != (granted > 0) {
			return mismatch("the give-back disagrees with the units given back")
		}
		res.Allowed, res.Granted = allowed, granted
		res.Remaining = remaining(from, after)
		res.ResetAfter = resetAfter()
		return res, nil
	}
}

// settleBack returns the units a settlement of n < 0 asks back, -n, as
// the largest count when -n overflows (as package step does).
func settleBack(n int64) int64 {
	if n == math.MinInt64 {
		return math.MaxInt64
	}
	return -n
}

// parseFixed parses "start:count".
func parseFixed(s string) (step.FixedWindowState, bool) {
	a, b, ok := strings.Cut(s, ":")
	if !ok {
		return step.FixedWindowState{}, false
	}
	start, err1 := strconv.ParseInt(a, 10, 64)
	count, err2 := strconv.ParseInt(b, 10, 64)
	return step.FixedWindowState{Start: start, Count: count}, err1 == nil && err2 == nil
}

// parseSliding parses "start:prev:curr".
func parseSliding(s string) (step.SlidingWindowState, bool) {
	a, rest, ok1 := strings.Cut(s, ":")
	b, c, ok2 := strings.Cut(rest, ":")
	start, err1 := strconv.ParseInt(a, 10, 64)
	prev, err2 := strconv.ParseInt(b, 10, 64)
	curr, err3 := strconv.ParseInt(c, 10, 64)
	ok := ok1 && ok2 && err1 == nil && err2 == nil && err3 == nil
	return step.SlidingWindowState{Start: start, Prev: prev, Curr: curr}, ok
}

func badReply(format string, args ...any) error {
	return unavailable(ErrReply, fmt.Errorf(format, args...))
}

// replyReader reads the elements of a script's reply, remembering the
// first error; it never panics on an unexpected reply. A reply is an array,
// or a string of elements separated by single spaces: the fast paths'
// replies (see package scripts), which cost Redis less to build and the
// client less to read than an array.
type replyReader struct {
	vals   []any
	fields [maxFields]string
	n      int // the number of fields of a string reply
	err    error
}

// maxFields is the most elements of a string reply.
const maxFields = 6

// newReplyReader returns a reader of reply, an array or a string; a value,
// so that it stays on the caller's stack.
func newReplyReader(reply any) (replyReader, error) {
	switch v := reply.(type) {
	case []any:
		return replyReader{vals: v}, nil
	case string:
		var r replyReader
		for {
			f, rest, more := strings.Cut(v, " ")
			if r.n == maxFields || f == "" {
				return replyReader{}, badReply("reply %q, want at most %d elements separated by single spaces", reply, maxFields)
			}
			r.fields[r.n] = f
			r.n++
			if !more {
				return r, nil
			}
			v = rest
		}
	}
	return replyReader{}, badReply("%T, want an array or a string", reply)
}

// field returns element i of a string reply, or false (noting the error)
// if the reply is shorter.
func (r *replyReader) field(i int) (string, bool) {
	if i < r.n {
		return r.fields[i], true
	}
	r.err = badReply("%d elements, want more than %d", r.n, i)
	return "", false
}

// elem returns element i of an array reply, or false (noting the error)
// if the reply is shorter.
func (r *replyReader) elem(i int) (any, bool) {
	if i < len(r.vals) {
		return r.vals[i], true
	}
	r.err = badReply("%d elements, want more than %d", len(r.vals), i)
	return nil, false
}

// str returns element i, a string.
func (r *replyReader) str(i int) string {
	if r.err != nil {
		return ""
	}
	if r.vals == nil {
		s, _ := r.field(i)
		return s
	}
	v, ok := r.elem(i)
	if !ok {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		r.err = badReply("element %d is %T, want a string", i, v)
	}
	return s
}

// now returns the instant of elements 0 and 1, its seconds and
// nanoseconds since the Unix epoch, in nanoseconds.
func (r *replyReader) now() int64 {
	sec, nsec := r.int(0), r.int(1)
	if r.err == nil && (sec < 0 || sec >= timemath.MaxUnix || nsec < 0 || nsec >= 1e9) {
		r.err = badReply("instant %d s %d ns out of range", sec, nsec)
	}
	return sec*1e9 + nsec
}

// int returns element i, an integer or a decimal string.
func (r *replyReader) int(i int) int64 {
	if r.err != nil {
		return 0
	}
	if r.vals == nil {
		s, ok := r.field(i)
		if !ok {
			return 0
		}
		return r.parse(i, s)
	}
	v, ok := r.elem(i)
	if !ok {
		return 0
	}
	switch v := v.(type) {
	case int64:
		return v
	case string:
		return r.parse(i, v)
	}
	r.err = badReply("element %d is %T, want an integer", i, v)
	return 0
}

// parse returns element i, the decimal s.
func (r *replyReader) parse(i int, s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		r.err = badReply("element %d is %q, want an integer", i, s)
	}
	return n
}

// decodeSub builds the Result of subwindow.lua's reply: it runs
// step.SubWindow on the old state at the script's instant and checks that
// the script wrote the same new state and decision.
func (a *algo) decodeSub(r *replyReader, req floodgate.Request) (floodgate.Result, error) {
	now, old, next := r.now(), r.str(2), r.str(3)
	allowed, granted := r.int(4) == 1, r.int(5)
	if r.err != nil {
		return floodgate.Result{}, r.err
	}
	st, ok := parseSub(old)
	if !ok {
		return floodgate.Result{}, badReply("sub-window state of %d bytes", len(old))
	}
	res, err := step.SubWindow(a.sw, &st, time.Unix(0, now), req)
	var header [3 * subField]byte // the new state's, compared without an allocation
	if err != nil {
		return floodgate.Result{}, unavailable(ErrMismatch, fmt.Errorf("%v: the reference rejects the step the script took: %w", a.kind, err))
	}
	// A check changes no state here; the script replies the state it
	// would have written, which only its decision tells apart. The script
	// replies the new state's header (newest, total, sub-window): the next
	// step's old state shows its counts, which parseSub checks add up.
	if res.Allowed != allowed || res.Granted != granted || !req.Check && string(appendSubHeader(header[:0], &st)) != next {
		return floodgate.Result{}, unavailable(ErrMismatch, fmt.Errorf(
			"%v at %d: script allowed=%v granted=%d, reference allowed=%v granted=%d, or their states differ",
			a.kind, now, allowed, granted, res.Allowed, res.Granted))
	}
	return res, nil
}

// subField is the width of subwindow.lua's integers, in bytes.
const subField = 7

// parseSub decodes subwindow.lua's state: the newest sub-window, the
// total, the sub-window in microseconds and the counts, 7-byte
// little-endian integers each; "" is a new key.
func parseSub(s string) (step.SubWindowState, bool) {
	var st step.SubWindowState
	if s == "" {
		return st, true
	}
	if len(s)%subField != 0 || len(s)/subField < 4 {
		return st, false
	}
	num := func(i int) int64 {
		var v int64
		for b := subField - 1; b >= 0; b-- {
			v = v<<8 | int64(s[i*subField+b])
		}
		return v
	}
	// Every field the script wrote is below 2^53 (exact in doubles), the
	// sub-window at most the longest window, and the counts add up to the
	// total: anything else is not a state floodgate wrote.
	const exact = 1 << 53
	subUs := num(2)
	if subUs < 1 || subUs > timemath.MaxCalendarWindow/1000 || len(s)/subField-3 > floodgate.MaxSubWindows+1 {
		return st, false
	}
	st.Newest, st.Total, st.Sub = num(0), num(1), subUs*1000
	st.Counts = make([]int64, len(s)/subField-3)
	var sum int64
	for i := range st.Counts {
		st.Counts[i] = num(3 + i)
		sum += st.Counts[i]
	}
	return st, st.Newest < exact && sum == st.Total && st.Total < exact
}

// appendSubHeader appends the first 21 bytes of st as subwindow.lua
// stores it: the newest sub-window, the total and the sub-window in
// microseconds, 7-byte little-endian integers each.
func appendSubHeader(b []byte, st *step.SubWindowState) []byte {
	return appendSubInt(appendSubInt(appendSubInt(b, st.Newest), st.Total), st.Sub/1000)
}

// appendSubInt appends v as a 7-byte little-endian integer.
func appendSubInt(b []byte, v int64) []byte {
	for range subField {
		b = append(b, byte(v))
		v >>= 8
	}
	return b
}
