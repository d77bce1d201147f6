package client

import "time"

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
