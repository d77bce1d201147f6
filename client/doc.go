// Package client is the calling side of rate limiting: an http.RoundTripper
// that keeps a client within its quotas and behaves well when it is not.
//
// [NewTransport] wraps a base transport. Its [Transport]:
//
//   - waits on an optional floodgate.Limiter before each attempt, so the
//     client throttles itself before the server has to;
//   - retries 429 Too Many Requests and 503 Service Unavailable (and broken
//     connections) for requests it can replay, with exponential backoff and
//     full jitter, U(0, min(MaxDelay, BaseDelay·2^n)) before retry n, as
//     Marc Brooker's "Exponential Backoff and Jitter" recommends;
//   - never retries sooner than the server asked: Retry-After, in seconds or
//     as an HTTP-date, takes precedence over the t of the RateLimit field,
//     and a wait beyond its budget (MaxWait, the context's deadline) ends
//     the retries instead of hanging; the server's wait gets jitter of its
//     own on top, at least U(0, 500ms), so clients refused in the same
//     second do not all return in the same instant;
//   - spends a retry budget shared by all its requests ([RetryBudget]), the
//     retry throttling of gRPC (gRFC A6): each failed attempt (a 503, a
//     broken connection, a 429 that names no wait) costs a token, each
//     success earns back a tenth of one (by default), and retries stop
//     while half the tokens are gone, so a failing backend sees about one
//     retry per ten successes instead of every request sent MaxAttempts
//     times;
//   - retries a 429 that names a wait (Retry-After, or the t of an
//     exhausted RateLimit policy) outside that budget: the server is
//     pacing the client through its quota, not failing, and a retry at the
//     time it named is the one most likely to succeed. MaxAttempts and
//     MaxWait still bound these retries, so a server that answers 429
//     forever gets at most MaxAttempts attempts per request, each at least
//     the wait it named after the last;
//   - optionally throttles adaptively ([ThrottleOptions]): it rejects
//     requests locally, with a [ThrottledError], in proportion to how many
//     the backend has been rejecting, following the client-side throttling
//     of Google's SRE book;
//   - keeps the rate-limit state of the last response ([Transport.State]),
//     parsed by package headers, for callers that pace themselves.
//
// Every random draw comes from Options.Rand and the throttling window reads
// Options.Now, so tests can fix both; waits use timers and run under
// testing/synctest.
package client
