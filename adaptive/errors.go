package adaptive

import "errors"

// Errors returned by this package. Test for them with errors.Is: constructors
// wrap ErrInvalidOption with the name of the offending field.
var (
	// ErrInvalidOption reports a constructor argument or option field that is
	// out of range (zero or negative limits, NaN or infinite ratios, shares
	// that sum past 1, ...).
	ErrInvalidOption = errors.New("adaptive: invalid option")

	// ErrLimitExceeded is returned by Limiter.Acquire when the request is
	// rejected: the concurrency limit (or its partition's share of it) is in
	// use, the wait backlog is full, or the wait timed out. Rejection is the
	// limiter working as intended: the caller should shed the request (for
	// HTTP, a 503 with Retry-After; see Middleware).
	ErrLimitExceeded = errors.New("adaptive: concurrency limit exceeded")
)
