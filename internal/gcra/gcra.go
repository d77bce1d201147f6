// Package gcra holds the token bucket's take step in integer nanoseconds, so
// that the root package's reference Step and memstore's fast path for Allow
// run the same arithmetic.
package gcra

// Take takes n units at instant t from the bucket whose theoretical arrival
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
func Take(tat, t, n, interval, tau, maxDelay int64) (next, remaining, wait, reset int64, ok bool) {
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
