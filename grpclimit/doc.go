// Package grpclimit limits gRPC servers with floodgate, and paces their
// clients: server interceptors for a rate limit (New, on a
// *floodgate.Limiter), for the calls of a key in flight (NewInflight, on an
// *inflight.Limiter) and for an adaptive concurrency limit (NewAdaptive, on
// an *adaptive.Limiter), and a client interceptor that retries a refusal no
// sooner than the server said (NewClient).
//
// Most servers want New's Interceptor, installed as both a unary and a
// stream interceptor so that calls and streams draw from one quota; a
// server whose expensive calls may pile up chains NewInflight's after it:
//
//	rate, _ := grpclimit.New(limiter, nil)
//	conc, _ := grpclimit.NewInflight(inflightLimiter, nil)
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(rate.Unary, conc.Unary),
//		grpc.ChainStreamInterceptor(rate.Stream, conc.Stream),
//	)
//
// # Rate limits
//
//   - Keys: by default the peer's IP address (IPv6 grouped by /64,
//     KeyByPeer); KeyByMetadata reads a metadata key, KeyWithMethod gives
//     each method its own quota, KeyChain tries several. A call without a
//     key is refused with codes.Unauthenticated (ErrNoKey).
//   - Costs: 1 unit a call by default; Options.Cost prices a unary call by
//     its request and, on a stream, every message the server receives
//     (decided when RecvMsg has read it); opening a stream costs 1 unit.
//   - A denial is codes.ResourceExhausted with google.rpc.RetryInfo whose
//     retry_delay is the Decision's RetryAfter rounded up to a whole
//     millisecond (RetryDelay), a google.rpc.QuotaFailure naming the
//     policy, and a grpc-retry-pushback-ms trailer of the same value, so
//     that a client that waits what it is told is never early.
//   - The IETF ratelimit and ratelimit-policy fields (package headers) go
//     in the response header of every decided call, as package httplimit
//     writes them for HTTP (a denial's in its trailer with
//     DenialFieldsInTrailer, see Clients); OmitFields leaves them out.
//   - A failing store (floodgate.ErrUnavailable, after the store's own
//     failure policy) refuses the call with codes.Unavailable and a
//     RetryInfo of Options.UnavailableRetryAfter (1 s by default).
//   - Interceptor.Limit satisfies go-grpc-middleware's ratelimit.Limiter
//     (a test checks it at compile time; the package does not import
//     go-grpc-middleware), though that package's interceptors replace
//     the status, details included, with their own.
//
// # Calls in flight
//
// NewInflight's interceptors take a slot of the call's key with
// inflight.Limiter.Acquire before the handler runs, and give it back when
// the handler returns, while a panic of the handler unwinds, and, unless
// InflightOptions.HoldUntilReturn, as soon as the call's context ends (the
// client cancelled, the deadline passed), as httplimit.NewInflight does. A
// call whose context ends while its slot is being taken never reaches the
// handler and its slot is given back at once.
//
// The release runs on context.WithoutCancel of the call's context, bounded
// by InflightOptions.ReleaseTimeout (1 s by default): a cancelled call
// releases its slot when its context has ended, and a release on that
// context would itself be cancelled by a store that honours it, leaving
// the slot held until its hold expires (or, on an inflight.LocalStore,
// forever). A test makes 10,000 calls, unary and streams, from 64
// goroutines, each cancelled by its client before the slot is asked for,
// while the store takes it, or in the handler, and checks that each ends
// Canceled and that no slot stays held, on an inflight.LocalStore and, when
// REDIS_ADDR is set, on redisstore (whose Acquire cut short by a
// cancellation removes its hold in the background).
//
// A denial is codes.ResourceExhausted by default: the limit is the
// caller's own, as httplimit.NewInflight answers 429. InflightOptions.Code
// may make it codes.Unavailable (the server is busy: clients, proxies and
// gRPC's retry policy may retry it elsewhere). Either way it carries
// RetryInfo, QuotaFailure (subject InflightPolicy) and the pushback, of the
// inflight.Limiter's Options.RetryAfter rounded up to 1 ms. No ratelimit
// fields are sent: they describe a quota restored over a window.
//
// # Adaptive concurrency
//
// NewAdaptive's interceptors admit a call through adaptive.Limiter.Acquire
// (or AcquirePartition, with AdaptiveOptions.Partition) and end its token
// when the handler returns: Dropped when the call's deadline has passed
// (whether its context ended DeadlineExceeded or, as often happens, the
// client's cancellation arrived first), Ignore when it was cancelled
// before its deadline or the handler panicked, Success otherwise, or what
// AdaptiveOptions.Outcome decides from the handler's error. A rejection is
// codes.Unavailable by default (the server is overloaded, as Netflix's
// concurrency-limits and adaptive.Middleware's 503 answer; an adaptive
// limit cannot tell one client's excess from another's), or
// codes.ResourceExhausted by AdaptiveOptions.Code, with a RetryInfo and
// pushback of AdaptiveOptions.RetryAfter (1 s by default).
//
// # Clients
//
// NewClient's Client.Unary is a grpc.UnaryClientInterceptor that retries
// by package client's policy (client.RetryDelay, client.RetryBucket):
//
//   - ResourceExhausted with a RetryInfo: after its delay plus jitter,
//     never before the delay, outside the retry budget (the server is
//     pacing the client through its quota, as package client treats a 429
//     that names its wait);
//   - Unavailable with a RetryInfo: the same, within the retry budget;
//   - ResourceExhausted without a RetryInfo: not retried, unless
//     ClientOptions.RetryWithoutInfo (then with full-jitter backoff, within
//     the budget): such a status may be a quota that does not come back
//     soon;
//   - nothing else, and no retry whose wait reaches the context's deadline
//     or would pass ClientOptions.MaxWait (30 s); at most MaxAttempts (4)
//     attempts.
//
// Client.Stream is a grpc.StreamClientInterceptor that retries a stream
// the same way, per stream, for as long as the client has received no
// message of it: the stream keeps what the client sends (up to
// ClientOptions.StreamBuffer, 256 KiB by default, grpc's own retry buffer;
// more commits it) and sends it again, in order, on the new stream, with
// CloseSend if the client had called it. A send that meets the end of a
// refused stream (io.EOF) is kept and reported as sent; the receive that
// learns the status retries. Once a message has arrived, the stream is the
// client's: its status is returned as it is. Tests check that a refused
// stream's handler, client streaming, server streaming and bidirectional
// with 16 goroutines, gets each message once, in order, from the attempt
// that is served.
//
// gRPC's own retry policy (retryPolicy in the service config, gRFC A6,
// which honours grpc-retry-pushback-ms) retries only a response that
// carried no header, a trailers-only one; a denial of New's interceptors
// carries the ratelimit fields in its header, so a client's retry policy
// never retries it, pushback or not. Options.DenialFieldsInTrailer sends
// them in the trailer instead, and OmitFields sends none: then it does
// (TestNativeRetryPolicy). Client retries either way.
//
// # Cost
//
// Measured with the benchmarks of this package on a memstore token bucket
// that admits every call, medians of 6 runs on the 2-core build machine
// while another engineer's tests ran beside them (so with a wide spread):
//
//	cd grpclimit && go test -run '^$' -bench . -benchmem -count 6 > new.txt
//	go run golang.org/x/perf/cmd/benchstat@latest new.txt
//
// Unary called directly (BenchmarkInterceptorUnary): the bare decision
// took 94.8 ns (±16%) and no allocation; the interceptor 993 ns (±18%)
// and 5 allocations (480 B); with OmitFields 251 ns (±27%) and 1
// allocation (16 B). On a quieter machine earlier: 75–88 ns, 722–856 ns
// and 193–220 ns. A test (TestUnaryAllocs) holds the allocations.
//
// A unary call over bufconn (BenchmarkInterceptorBufconn), where client
// and server allocate in the one process: 141 allocations with no limit
// and with a bare decision in the handler, 143 with a bare decision in an
// interceptor of its own, 144 with the interceptor and OmitFields, 152 with
// the fields. The time of a call, 49–52 µs at the median in every case
// (±19–41%), does not tell the interceptor's cost apart.
//
// The goal of at most 2 allocations a call over a bare decision is met by
// none of these, and cannot be with grpc's API, for these reasons:
//
//   - grpc allocates the call's UnaryServerInfo and the closure of its
//     handler for any interceptor (the 2 of the bare interceptor);
//   - the key is a string made for the call (KeyByPeer formats the peer's
//     address): 1;
//   - the fields are metadata.MD, a map, which grpc keeps as the stream's
//     header for the stream's life, so it cannot be pooled: a new map is
//     2 allocations (its header and its group), and its values 2 more (the
//     text that varies and the array of both values, from package
//     headers' PolicySet, which formats the rest once);
//   - two more header fields cost grpc's transport 4 (the server's header
//     list outgrows its initial capacity; the client decodes them into a
//     metadata map of its own).
//
// KeyByPeer no longer parses an address without a colon (bufconn's, a Unix
// socket's), which allocated a parse error on every call. Writing the
// fields of a single policy without WriteReports' http.Header saved no
// measurable time (the map's allocation dominates) and was not kept.
//
// # Not built
//
//   - ratelimit fields for in-flight and adaptive decisions;
//   - a Client option to pace calls with a local floodgate.Limiter before
//     they are sent, as client.Options.Limiter does for HTTP, and the
//     adaptive throttling of client.ThrottleOptions;
//   - a cache of the formatted fields or of the keys of in-memory peers,
//     which would save an allocation or two when the same values repeat.
package grpclimit
