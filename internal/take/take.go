// Package take holds the take steps of the token bucket and the fixed
// window in integer nanoseconds, so that the reference transitions
// (package step) and memstore's fast path for Allow run the same
// arithmetic.
package take

// Bucket takes n units at instant t from the bucket whose theoretical arrival
// time is tat, with emission interval and tolerance tau (the burst times the
// interval), waiting at most maxDelay. The caller checks that n ≥ 1,
// n·interval ≤ tau, maxDelay ≥ 0 and that t and tau are far enough from
// overflow (t is at most year 2262, tau at most 2^52).
//
// Admitted (ok), it returns the new arrival time, the whole units left, the
// delay before the units are available (≥ 0) and the time until the bucket
// is full again. Denied, it returns tat unchanged, the units left, how much
// longer than maxDelay the caller would have to wait, and the time until
// full.
func Bucket(tat, t, n, interval, tau, maxDelay int64) (next, remaining, wait, reset int64, ok bool) {
	base := max(tat, t)
	next = base + n*interval
	wait = next - tau - t // when the bucket holds the units again
	if wait > maxDelay {
		return tat, max(t+tau-base, 0) / interval, wait - maxDelay, base - t, false
	}
	if wait < 0 { // not in debt: whole tokens left
		return next, -wait / interval, 0, next - t, true
	}
	return next, 0, wait, next - t, true
}

// Window takes n units at instant t ≥ 0 from the fixed window state (start,
// count) of windows of w nanoseconds aligned to the epoch holding up to
// limit units, waiting at most maxDelay: into the current window when they
// fit, else into the next one. The caller checks that 1 ≤ n ≤ limit,
// maxDelay ≥ 0, and that t and w are far enough from overflow.
//
// Admitted (ok), it returns the new state, the units left in the window
// open at t, the delay before the units are admitted (≥ 0) and the time
// until the quota is restored. Denied, it returns the state unchanged, the
// units left, how much longer than maxDelay the caller would have to wait,
// and the time until the quota is restored.
func Window(start, count, t, n, limit, w, maxDelay int64) (nstart, ncount, remaining, wait, reset int64, ok bool) {
	st, sc := start, count
	if ws := t - t%w; start < ws {
		start, count = ws, 0
	}
	// Compared as n > limit − count: count + n overflows for limits near
	// MaxInt64. A window starting after t was reserved ahead: the one open
	// at t is closed.
	if n <= limit-count {
		if wait = max(start-t, 0); wait <= maxDelay {
			if start <= t {
				remaining = max(limit-count-n, 0)
			}
			return start, count + n, remaining, wait, start + w - t, true
		}
	} else if wait = start + w - t; wait <= maxDelay {
		return start + w, n, 0, wait, start + 2*w - t, true
	}
	if start <= t {
		remaining = max(limit-count, 0)
	}
	reset = start + w - t
	if count == 0 {
		// Empty, but a window reserved ahead (emptied by refunds) keeps the
		// current one closed until it starts.
		reset = max(start-t, 0)
	}
	return st, sc, remaining, wait - maxDelay, reset, false
}
