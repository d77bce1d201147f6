package client

import (
	"fmt"
	"math"
	"sync"
)

// RetryBudget bounds the retries a Transport makes across all its requests,
// as gRPC's retry throttling does ("retryThrottling" in gRFC A6, "gRPC
// Retry Design"): a bucket holds up to MaxTokens tokens and starts full;
// every failed attempt (a 503 response, a 429 response that names no wait,
// or a broken connection) takes one token and every successful response
// (status below 500, 429 excepted) gives back TokenRatio. A request may be
// retried only while more than MaxTokens/2 tokens are left. Other 5xx
// responses and other errors count as neither, as A6 counts only failures
// it would retry.
//
// A 429 response that names a wait (Retry-After above 0, or the t of an
// exhausted RateLimit policy) counts as neither, and its retry does not
// need the budget. The budget protects a backend that is overloaded or
// failing from a retry storm; a server that refuses a request under its
// quota and says when to return is neither, and the retry it asked for is
// the one that gets the request served. Against a quota of 5 per second
// (burst 5), 20 requests sent at once through a default Transport are all
// served, within three retries; were the 15 first refusals counted, they
// would drain the 10 tokens and hand 9 to 11 of the requests back as 429.
// What bounds those retries is MaxAttempts and MaxWait, and each waits at
// least what the server named.
//
// A healthy backend keeps the bucket full, and every request may use all
// of MaxAttempts. Once failures outnumber TokenRatio per success the bucket
// drains to half and retries stop, except as successes earn them back. Over
// any stretch of time in which s responses succeed, a Transport retries
// fewer than MaxTokens/2 + TokenRatio·s times (each allowed retry spends a
// token from above the half-way mark, and only successes put tokens back):
// with the defaults, about one retry per ten successes, instead of up to
// MaxAttempts−1 per request. Against a backend that fails everything with
// 503, 100 requests through a default Transport make at most 104 attempts,
// where without a budget they make 400.
//
// The zero value means the defaults, those of A6's example: MaxTokens 10,
// TokenRatio 0.1. A RetryBudget is a plain value; NewTransport copies it.
type RetryBudget struct {
	// MaxTokens is the size of the bucket, between 1 and 1000 as in A6.
	// A larger bucket absorbs a longer burst of failures before retries
	// stop. The default is 10.
	MaxTokens int

	// TokenRatio is the share of a token each success gives back: the
	// ratio of failed attempts to successes above which retries are
	// throttled. It is kept to three decimals, as A6 specifies, and must
	// be between 0.001 and MaxTokens. The default is 0.1.
	TokenRatio float64
}

// milli is the scale of the budget's arithmetic: tokens are counted in
// thousandths, as gRPC's implementations count them, so that a TokenRatio
// of 0.1 adds up exactly and the threshold MaxTokens/2 is exact.
const milli = 1000

// retryBudget is the token bucket of a RetryBudget. Its methods are safe for
// concurrent use. A mutex is the simplest primitive that works: it is taken
// once per attempt, next to a network round trip.
type retryBudget struct {
	max, ratio int64 // thousandths of a token

	mu     sync.Mutex
	tokens int64 // thousandths of a token, in [0, max]
}

func newRetryBudget(b RetryBudget) (*retryBudget, error) {
	if b.MaxTokens == 0 {
		b.MaxTokens = 10
	}
	if b.MaxTokens < 1 || b.MaxTokens > 1000 {
		return nil, fmt.Errorf("client: RetryBudget.MaxTokens = %d, want 1 to 1000", b.MaxTokens)
	}
	if b.TokenRatio == 0 {
		b.TokenRatio = 0.1
	}
	ratio := math.Round(b.TokenRatio * milli)
	if !(ratio >= 1) || ratio > float64(b.MaxTokens)*milli { // !(>=) also rejects NaN
		return nil, fmt.Errorf("client: RetryBudget.TokenRatio = %v, want 0.001 to MaxTokens (%d)", b.TokenRatio, b.MaxTokens)
	}
	m := int64(b.MaxTokens) * milli
	return &retryBudget{max: m, ratio: int64(ratio), tokens: m}, nil
}

// failure takes a token for a failed attempt and reports whether the request
// may be retried: whether more than half the bucket is left. The token is
// taken whether or not a retry follows, as in A6: the attempt loaded the
// backend all the same.
func (b *retryBudget) failure() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens = max(0, b.tokens-milli)
	return 2*b.tokens > b.max
}

// success gives back a share of a token for a successful response.
func (b *retryBudget) success() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens = min(b.max, b.tokens+b.ratio)
}

// level returns the tokens left.
func (b *retryBudget) level() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return float64(b.tokens) / milli
}
