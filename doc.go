// Package floodgate is a rate-limiting and traffic-shaping library: a
// concrete [Limiter] running one of five algorithms on a [Store], the one
// interface of its back end. The stores are an in-process one (package
// memstore) and Redis or Redis Cluster (package redisstore); the wrappers
// are Stores around a Store, as slog's handlers are: a lease layer that
// serves most decisions locally (package lease) and observation (package
// observe). Beside them: adaptive concurrency limits (package adaptive),
// requests in flight (package inflight), and rate-limit HTTP fields,
// middleware and a backing-off client (packages headers, httplimit and
// client).
//
// Most users want New with memstore for one process, or with redisstore
// for many, and a TokenBucket:
//
//	store, _ := memstore.New(nil)
//	lim, _ := floodgate.New(store, floodgate.TokenBucket{Rate: 100, Per: time.Second, Burst: 200}, nil)
//	d, err := lim.Allow(ctx, "user:42")
//	if err == nil && !d.Allowed {
//		// reject; d.RetryAfter says when to come back
//	}
//
// # Algorithms
//
// [TokenBucket] admits bursts of up to Burst units and a long-run rate of
// Rate per Per. It is the usual choice for APIs. Its state is one word (the
// theoretical arrival time of GCRA, ITU-T I.371).
//
// [LeakyBucket] shapes instead of admitting bursts: requests leave a FIFO
// queue exactly Per/Rate apart, waiting Decision.Delay; the queue holds at
// most Capacity units. Use it in front of a dependency that needs an even
// rate.
//
// [FixedWindow] counts units per epoch-aligned window. It is the cheapest
// and easiest to explain, but lets up to 2·Limit units through across a
// window boundary.
//
// [SlidingWindow] estimates a sliding window from two counters per key:
// the previous fixed window's count, weighted by its share of the sliding
// window, plus the current one's (Cloudflare's two-counter estimate). It is
// cheap but approximate, since it assumes the previous window's traffic was
// even: it can pass 2·Limit − 1 units in one window (a burst at a window's
// end, then retries at RetryAfter), and on Poisson traffic at 1× and 1.2× a
// Limit of 100, 11.82% and 16.35% of its admissions would be denied by an
// exact window (docs/algorithms.md). With SubWindows S of 2 to 64 it is a
// bounded counter instead: S+1 counts of sub-windows of Window/S, never
// more than Limit in any interval of Window, at least S/(S+1) of what an
// exact log admits, and windows up to 367 days.
//
// [SlidingLog] is the exact sliding window: one entry per admitted request,
// at most Limit per key. Use it where small limits must be exact.
//
// # Several limits on one key
//
// [Limits] decides several algorithms as one: "10 per second and 1,000 per
// day". A request is admitted only if every limit admits it; a denial
// changes no limit's state; the Decision reports the limit that bound
// (Decision.Binding), and Limiter.Apply's each argument receives every
// limit's own Decision. On Redis it is one script call per decision.
//
// # Check-only and settle-later
//
// A [Request] with Check reports what the step would do and changes
// nothing (a quota preview). [OpSettle] settles a cost known only after
// the work (the tokens of an LLM completion): a positive N charges more
// units into at most one quota of debt, a negative N gives units back. The
// admission's instant names the work: Result.At plus Result.Delay, from
// Limiter.Apply.
//
// # Decisions
//
// Being limited is a result, not an error: a [Decision] says whether the
// units were admitted, how many remain, how long to wait (Delay, for
// reservations and shaping), when a denied request would succeed
// (RetryAfter, never 0 on a denial) and when the quota is full again
// (ResetAfter). Errors are bad arguments ([ErrInvalidN], [ErrExceedsLimit],
// [ErrEmptyKey], [ErrKeyTooLong], [ErrInvalidDelay]), unusable
// configurations ([ErrInvalidConfig]), failing stores ([ErrUnavailable]) and
// ended contexts.
//
// # Exactness
//
// The algorithms compute in integer nanoseconds since the Unix epoch.
// Every exact store (memstore, redisstore) reproduces each algorithm's
// reference transition (package step) exactly, which the conformance
// harness (package floodgatetest) checks. Token and leaky bucket rates are
// exact when Per is a multiple of Rate nanoseconds and otherwise lower by
// less than one nanosecond per unit; windows are whole microseconds;
// windows and restore times are at most [MaxWindow] (about 52 days) so
// that the Lua scripts' doubles stay exact.
//
// # Names and state
//
// A step's state belongs to (name, key, algorithm kind), and for the
// limits of a Limits also to the limit's ordinal among those of its kind
// (see [Store]). The name is the Limiter's: [Options].Name, or one derived
// from the configuration ("tb:100/1s:b200"). So two limiters built for
// different purposes, a search limit and an upload limit keyed by the same
// user, never share a key's state, while the processes of a fleet that
// build the same limiter on one Redis share it. Name a limiter to keep two
// equal configurations apart, or to keep its keys' state across a change
// of configuration: under an explicit name a rolling deploy that raises a
// limit continues from what the old one counted, while under a derived
// name the new configuration is a new limiter and starts every key with a
// full quota. The name is also what observers and the metrics adapters
// report.
//
// # Stores and wrappers
//
// A [Store] binds an algorithm under a name ([Store.Bind]) and returns a
// [Bound], which applies steps: the store protocol (take, take up to n,
// settle, check) that [Limiter.Apply] reaches for the few callers that
// need more than Allow, Reserve and Wait. A wrapper is a Store around a
// Store, so they compose:
//
//	leases, _ := lease.New(redis, nil)
//	observed, _ := observe.Store(leases, &observe.Observer{Tally: tally})
//	lim, _ := floodgate.New(observed, alg, &floodgate.Options{Name: "api"})
//
// An exact store decides as the reference transitions of package step; a
// conservative one (a lease) may deny what they would admit and never
// admits what they would deny. Package floodgatetest checks both tiers;
// package step holds what the author of a store needs, and the argument
// rules every store applies are [CheckKey], [CheckRequest], [CheckTime]
// and [CheckName].
package floodgate
