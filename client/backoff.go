package client

import (
	"math"
	"time"
)

// backoffCap returns the upper bound of the wait before retry number retry
// (0 for the first retry): min(max, base·2^retry), computed without
// overflow.
func backoffCap(retry int, base, maxDelay time.Duration) time.Duration {
	c := base
	for range retry {
		if c >= maxDelay/2 {
			return maxDelay
		}
		c *= 2
	}
	return min(c, maxDelay)
}

// backoff returns the full-jitter wait before retry number retry, given u
// drawn uniformly from [0, 1): U(0, min(max, base·2^retry)), the strategy
// Marc Brooker's "Exponential Backoff and Jitter" (AWS Architecture Blog,
// 2015) found to spread retries best for the least total work.
func backoff(retry int, base, maxDelay time.Duration, u float64) time.Duration {
	return time.Duration(u * float64(backoffCap(retry, base, maxDelay)))
}

// hintSpreadMin is the least spread of the jitter added to a server's wait.
// Retry-After in delta seconds, its HTTP-date and the t of the RateLimit
// field all count whole seconds, so every client refused within the same
// second is told the same instant; half of that resolution is enough to
// spread them out, and adds 250ms to the wait on average.
const hintSpreadMin = 500 * time.Millisecond

// hintSpread returns the width of the jitter added to a server's wait hint
// before retry number retry: min(maxDelay, max(base·2^retry, 500ms,
// hint/10)). It grows with the backoff, so repeated refusals spread further,
// and with the hint, so a long wait is not answered by a herd.
func hintSpread(retry int, hint, base, maxDelay time.Duration) time.Duration {
	return min(maxDelay, max(backoffCap(retry, base, maxDelay), hintSpreadMin, hint/10))
}

// retryDelay returns the wait before retry number retry, given the server's
// wait hint (0 when it gave none, or asked for none) and u drawn uniformly
// from [0, 1). Without a hint it is the full-jitter backoff. With one it is
// hint + U(0, hintSpread): never earlier than the server asked, and clients
// told the same instant do not all come back at that instant, as they would
// if the hint replaced the jitter instead of adding to it.
func retryDelay(retry int, hint, base, maxDelay time.Duration, u float64) time.Duration {
	if hint <= 0 {
		return backoff(retry, base, maxDelay, u)
	}
	j := time.Duration(u * float64(hintSpread(retry, hint, base, maxDelay)))
	if j > math.MaxInt64-hint {
		return math.MaxInt64
	}
	return hint + j
}
