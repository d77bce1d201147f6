// Package redisstore is the Redis floodgate.Store: every process that
// shares a Redis (or a Redis Cluster) shares one exact quota per key.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
//	store, err := redisstore.New(rdb, &redisstore.Options{OnFailure: redisstore.FailLocal, LocalShare: 0.25})
//	...
//	defer store.Close()
//	limiter, err := floodgate.New(store, floodgate.TokenBucket{Rate: 100, Per: time.Second, Burst: 200})
//
// # Decisions
//
// Each decision is one Lua script run by Redis atomically (package scripts
// holds them): go-redis' Script.Run sends EVALSHA and, when the server
// lacks the script (a new Cluster node, a restart, SCRIPT FLUSH), EVAL, so
// no decision fails for a missing script. The script is the twin of the
// algorithm's reference Step: it reads the key's state, decides, writes the
// new state, and returns the state it read and the instant it used; Go then
// re-runs Step on them to build the Result, and fails with ErrMismatch if
// the script decided or wrote otherwise. (The sliding log, too large to
// return, returns the facts the Result needs.) Lua numbers are doubles, so
// the scripts hold instants as exact (seconds, nanoseconds) pairs and use
// single numbers only for differences, which floodgate bounds by 2^52 ns;
// quotas are limited to 2^52 here.
//
// # Time
//
// By default the instant of a decision is the Redis server's TIME (in
// microseconds), read inside the script: one clock for every process,
// whatever their own clocks say. Options.Now replaces it with the caller's
// clock, for deterministic tests.
//
// # Keys and memory
//
// The state of key k for an algorithm lives at Prefix + "{k}:" + kind, one
// Redis key per limiter key and algorithm: "tb" (the token bucket's
// theoretical arrival time, a string), "lb" (the leaky bucket's tail),
// "fw" ("start:count"), "sw" ("start:prev:curr") and "sl" (a sorted set
// with one member per admission instant, at most Limit of them, scored by
// cumulative units so that every lookup is O(log n)). The braces make k the
// Cluster hash tag; each script touches one key, so there is no CROSSSLOT
// on a Cluster. Options.HashKeys stores a hash of k instead, for long or
// untrusted keys. Every write sets a TTL: the time until the quota is fully
// restored plus Options.ExpiryMargin (1s by default), after which the
// state would be that of a new key; idle keys therefore vanish on their
// own. A denial writes nothing (the sliding log drops entries that have
// left the window, as its reference does).
//
// # Failures
//
// Each call waits at most Options.Timeout (20ms by default; NoTimeout
// leaves the bound to the caller's context and go-redis) for Redis to
// answer, once it is sent: decisions beyond Options.MaxInFlight (the
// client's pool size) queue in the process, bounded by their context, rather
// than fail (a Store's first calls, which dial and load scripts, get at
// least 250ms). A circuit breaker opens when, over the last second or so,
// at least Options.BreakerThreshold calls failed and they were at least
// half of the calls; it then sends nothing to Redis, so a dead or slow
// Redis costs no latency, until Options.BreakerCooldown has passed and one
// probe goes through. A decision Redis does not make is made by Options.OnFailure:
// FailError returns an error matching floodgate.ErrUnavailable (and
// ErrTimeout, ErrRedis or ErrBreakerOpen), FailOpen admits, FailClosed
// denies, FailLocal decides on an in-process memstore with
// Options.LocalShare of each quota. Options.Observer is told of every
// failed decision and every breaker change. Errors that Redis answered
// (ErrReply, ErrMismatch) are returned whatever the policy.
//
// go-redis retries a command whose connection broke (Options.MaxRetries of
// the client, 3 by default); a script that ran before the connection broke
// then runs twice. For a take, that spends units nobody uses; for a refund,
// it may give back units twice. Set MaxRetries to -1 on the client to
// rule this out, at the price of failing those decisions instead.
//
// # Batching
//
// With Options.BatchSize of 2 or more, concurrent decisions are sent
// together: the store's goroutines (Options.BatchPipelines of them) each
// take the decisions queued, up to BatchSize, wait up to
// Options.BatchLinger for more, and send them as one pipeline, re-sending
// the calls that met NOSCRIPT as EVALs. Decisions of one algorithm share
// one call of the batch script (scripts.BatchSource), which makes them in
// the batch's order, atomically, at one Redis TIME: Redis spends about a
// quarter less per decision than on a call per decision. A decision that
// fails in the script (a key holding another type) fails alone. On a
// Cluster, decisions share a call only when their keys share a hash slot
// (decisions on one limiter key always do: a hot key costs its node least),
// and go-redis splits each pipeline per node. On a Ring, or a
// UniversalClient other than *redis.Client and *redis.ClusterClient, each
// decision is its own call in the pipeline. Close stops the goroutines.
package redisstore
