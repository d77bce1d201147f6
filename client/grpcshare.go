package client

import "time"

// This file exports, for the gRPC client interceptor of module
// github.com/floodgate-go/floodgate/grpclimit, the two parts of the
// Transport's retry policy that a client of another protocol should not
// write again: the retry budget's bucket and the wait before a retry. The
// Transport itself keeps using the unexported originals; these are thin
// views of them, so both clients retry by one policy.

// RetryBucket is the token bucket of a RetryBudget in use, as a Transport
// keeps one: it starts full; Failure takes a token, Success gives back
// TokenRatio of one, and a retry is allowed while more than half the
// tokens are left. See RetryBudget for what it bounds.
//
// Create one with NewRetryBucket; the zero value is not usable. A
// RetryBucket is safe for concurrent use, so one may be shared by every
// call of a client.
type RetryBucket struct {
	b *retryBudget
}

// NewRetryBucket returns the bucket of b, full. The zero RetryBudget means
// its defaults (MaxTokens 10, TokenRatio 0.1). It fails, as NewTransport
// does, when MaxTokens or TokenRatio is out of range.
func NewRetryBucket(b RetryBudget) (*RetryBucket, error) {
	rb, err := newRetryBudget(b)
	if err != nil {
		return nil, err
	}
	return &RetryBucket{b: rb}, nil
}

// Failure takes a token for a failed attempt and reports whether the call
// may be retried: whether more than half the tokens are left. The token is
// taken whether or not a retry follows, as in gRFC A6.
func (b *RetryBucket) Failure() bool { return b.b.failure() }

// Success gives back TokenRatio of a token for a successful attempt.
func (b *RetryBucket) Success() { b.b.success() }

// Tokens returns the tokens left, between 0 and MaxTokens.
func (b *RetryBucket) Tokens() float64 { return b.b.level() }

// RetryDelay returns the wait before retry number retry (0 for the first)
// as a Transport computes it, given the server's wait hint (0 when it gave
// none) and u drawn uniformly from [0, 1):
//
//   - without a hint, the full-jitter backoff U(0, min(maxDelay,
//     base·2^retry));
//   - with one, hint + U(0, s) where s = min(maxDelay, max(base·2^retry,
//     500ms, hint/10)): never earlier than the server asked, and clients
//     told the same instant do not all return at that instant.
//
// base must be positive and maxDelay at least base, as Options requires;
// u outside [0, 1] is taken as the nearer bound, so the result is never
// negative and never below hint.
func RetryDelay(retry int, hint, base, maxDelay time.Duration, u float64) time.Duration {
	if !(u >= 0) { // NaN too
		u = 0
	}
	u = min(u, 1)
	retry = max(retry, 0)
	return retryDelay(retry, hint, base, maxDelay, u)
}
