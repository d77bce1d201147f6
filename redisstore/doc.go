// Package redisstore is the Redis floodgate.Store: every process that
// shares a Redis (or a Redis Cluster) shares one exact quota per key.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	store, err := redisstore.New(rdb, &redisstore.Options{OnFailure: redisstore.FailLocal, LocalShare: 0.25})
//	...
//	defer store.Close()
//	limiter, err := floodgate.New(store, floodgate.TokenBucket{Rate: 100, Per: time.Second, Burst: 200}, nil)
//
// # Decisions
//
// Each decision is one Lua script run by Redis atomically (the scripts are
// under redisstore/internal/scripts): go-redis' Script.Run sends EVALSHA and, when the server
// lacks the script (a new Cluster node, a restart, SCRIPT FLUSH), EVAL, so
// no decision fails for a missing script. The script is the twin of the
// algorithm's reference transition: it reads the key's state, decides, writes the
// new state, and returns the state it read and the instant it used; Go then
// re-runs Step on them to build the Result, and fails with ErrMismatch if
// the script decided or wrote otherwise. (The sliding log, too large to
// return, returns the facts the Result needs.) Lua numbers are doubles, so
// the scripts hold instants as exact (seconds, nanoseconds) pairs and use
// single numbers only for differences, which floodgate bounds by
// [floodgate.MaxWindow] and [floodgate.MaxDelay]; quotas are limited to
// 2^52 here, and instants to floodgate.CheckTime's (before 2255). The
// positions and bounds of the scripts' arguments are defined once, in Go,
// and written into the Lua as the scripts are built.
//
// Every Op runs in the script, and so does a check-only step
// (Request.Check): the script takes the step without writing anything (as
// step's transitions, a sliding log's check drops nothing either) and
// replies what it would have done, which Go checks as any reply. A
// settlement with a positive N charges the units into the bounded debt of
// package step's transitions.
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
// The state of key k for the limiter named n lives at Prefix + "{k}:" +
// n + ":" + code (Store.Key), one Redis key per limiter, key and
// algorithm kind, such as "fg:{user:42}:search:tb" or, under a derived
// name, "fg:{user:42}:tb:100/1s:b200:tb". The codes: "tb" (the token
// bucket's theoretical arrival time, a string), "lb" (the leaky bucket's
// tail), "fw" ("start:count"), "sw" ("start:prev:curr") and "sl" (a
// sorted set with one member per admission instant, at most Limit of
// them, scored by cumulative units so that every lookup is O(log n)). The
// braces make k the Cluster hash tag, so every key of one user key lands
// on one slot whatever the limiter; each script touches one slot, so
// there is no CROSSSLOT on a Cluster. A name holds no brace
// (floodgate.CheckName): the last '}' of a Redis key ends its user key,
// and no two (name, key, kind) share a Redis key. Options.HashKeys stores
// a hash of k instead, for long or untrusted keys. Every write sets a
// TTL: the time until the quota is fully
// restored plus Options.ExpiryMargin (1s by default), after which the
// state would be that of a new key; idle keys therefore vanish on their
// own. A denial writes nothing (the sliding log drops entries that have
// left the window, as its reference does).
//
// The limits of a floodgate.Limits keep their states apart from the single
// algorithms', under the limiter's name, and the kind and the ordinal of
// each among the limits of its kind: Prefix + "{k}:" + n + ":L:" + code +
// ordinal, such as "fg:{k}:api:L:tb0" and "fg:{k}:api:L:fw1"
// (Store.LimitKey). Every Limits bound to the store under that name shares
// them, as floodgate.Limits says, and they share k's hash tag.
//
// # Several limits
//
// A Limits decision is one script call too (limits.lua), on the
// keys of all its limits, which share a Cluster slot. The script takes the
// steps of the reference, step.Limits: each limit's step runs dry, as a
// check, recording its writes; a take admitted by every limit at once runs
// them, one denied by any writes nothing, not even a TTL; a take that some
// limit admits only after a delay takes the units again in every limit at
// the instant they proceed (whose states' TTLs still count from now). Its
// reply holds every step's reply, and Go runs step.Limits on them, checking
// each against its limit's reference transition and the steps and the
// writes against step.Limits', so that a Limits decision fails with
// ErrMismatch as a single one does. The common case, a take on Redis TIME
// of limits that all have a fast path, runs the fast paths (as probes that
// write nothing) and writes once all have admitted: a Limits of a token
// bucket and a fixed window costs Redis what the two cost alone plus about
// 1.5 µs (15.3 µs a call against 6.4 and 6.8, the least of twelve
// redis-benchmark runs with INFO commandstats).
//
// Store.ApplyJoint runs the same script on the states of several
// limiters' keys (each limiter's own, as its single decisions use them):
// a take on all of them as one step, admitted only if each admits, as
// Envoy's rate limit service (package rls, Options.Joint) decides a
// request's descriptors. The keys must share a Cluster slot; on a Ring,
// or with two steps on one state, it returns ErrNotJoint. A failure of
// Redis is returned as the error it is, whatever OnFailure says.
//
// # A lease fleet
//
// Store.LeaseFleet returns a lease.Fleet: the lease Stores of a fleet that
// lease from this Redis share their demand for each key through a hash at
// Prefix + "{k}:" + n + ":dm" (Store.DemandKey(n, k), on k's Cluster slot),
// a field per process, so that each sizes its pools by its fair share
// (see package lease, "A fleet"). One script call records a process's
// demand and returns the others'.
//
// # In flight
//
// The Store is also an inflight.Store, for package inflight's limit of
// requests in flight per key (Stripe's concurrent-request limiter). The
// holds of key k under a limiter named n are a sorted set at
// Prefix + "{k}:" + n + ":if" (Store.InflightKey(n, k); the name is
// inflight.Limiter.Name, "inflight:<limit>" by default; hashed under
// Options.HashKeys, and on k's Cluster slot): one member per request
// holding a slot, a holder id (the store's random 96-bit id and
// the hold's number), scored by the instant its hold expires, in
// microseconds on the server's TIME (or Options.Now). One script
// (inflight.lua) serves the three calls, each one round trip:
// an Acquire drops the members whose expiry has passed, counts the others
// and adds one expiring a TTL from now if there are fewer than the limit;
// a Release removes its member; a renewal moves a live member's expiry to
// a TTL from now, and refuses (removing it) a member whose expiry has
// passed, whose slot another request may hold by now. Every write leaves
// the key a TTL of at least its newest hold's plus Options.ExpiryMargin,
// so a key whose holders all died vanishes. A request shorter than the
// Limiter's RenewEvery costs two round trips, its Acquire and its
// Release; the Limiter renews longer ones from one goroutine. A process
// killed holding slots frees them within the TTL, when the next Acquire
// finds them expired.
//
// The calls take the decisions' path, Store.exec: the node's breaker and
// slots, Options.Timeout, batching (each call a script call of its own in
// a pipeline). An Acquire that Redis cannot answer goes to
// Options.OnFailure: FailOpen admits with a hold Redis does not know of,
// FailClosed denies, FailLocal counts on a local inflight.LocalStore with
// Options.LocalShare of the limit (rounded down, at least 1), FailError
// returns the error. A renewal that fails returns its error (the Limiter
// tries again RenewEvery later). As for the quotas, a failover can lose
// the newest holds (asynchronous replication), which then admits more
// than the limit until those requests end.
//
// A failed call can leave a hold in the set that no caller holds: an
// Acquire that timed out or lost its connection after the command may have
// been written (Redis runs what it has read once a stall ends) adds its
// hold though its caller was told it failed, and a failed Release leaves
// its hold. Either would keep a slot taken for the hold's TTL. So the Store
// removes such holds in the background: the member of a failed Acquire (its
// holder id is known before the call is sent), by a cancel, and that of
// every failed Release, by the release script, through the path of every
// call (Options.Timeout, the node's slots) but its breaker, which a removal
// neither asks nor tells: an open breaker makes callers fail fast, while a
// removal has no caller waiting, at most 4 are sent at once, and each frees
// a slot that callers want (when removals waited for the breaker, one that
// opened again under the load after an outage held them for 1s). A
// cancel removes the hold, or, when the Acquire's script has not run yet
// (it is still queued in Redis behind a stall), marks its holder id in a
// sorted set beside the holds (InflightKey + ":gone", the same hash slot)
// for the hold's TTL, so that the script adds nothing when it runs; the
// cancels of one key due together go in one call. An Acquire never sent (an
// open breaker, no free slot, a connection that could not be dialled) or
// answered with an error reply leaves nothing to remove. Each removal has 8
// attempts: at once, then after 1/64 of the hold's TTL, doubling to at most
// 1/4 (156ms, 312ms, 625ms, 1.25s, then 2.5s thrice with the inflight
// package's default 10s), so that the last comes within the TTL (a Release,
// which does not know its hold's TTL, takes the shortest the store has
// granted); and a node's next answer after a removal failed on it (a
// decision's reply, a removal's, or its breaker's probe) makes its queued
// removals due at once. The first reply ends a removal. Releases, renewals
// and removals are sent on their own, never queued behind a batch of
// Acquires: a release frees a slot that the Acquires wait for. The work is
// bounded: 4 goroutines, started by the first removal and stopped by Close,
// and at most 4096 removals waiting; one that finds the queue full, or
// fails all its attempts, or that Close finds waiting, is dropped and
// counted (Store.AbandonedHolds), and its hold frees at its TTL. A call
// that succeeds costs one atomic load more (is a removal owed its node?).
//
// # Failures
//
// Every decision returns within Options.Timeout (50ms by default),
// batched or not, the store's first decisions included, whatever Redis
// does — killed, stalled (DEBUG SLEEP), paused (CLIENT PAUSE), stopped
// (SIGSTOP), black-holed, failing over, migrating a slot — and whatever
// options the go-redis client was built with: a client that ignores
// context deadlines (go-redis' default) is replaced by one that honours
// them (see New). The wait for a batch, or for one of a node's
// Options.MaxInFlight slots, counts against the timeout, so a stalled
// node's calls cannot hold up the decisions queued behind them.
// NoTimeout leaves the bound to the caller's context and go-redis.
//
// Each node — a Cluster's master, a Ring's shard, the server of a Client —
// has its own circuit breaker. It opens when, over the last second or so,
// at least Options.BreakerThreshold calls to the node failed and they were
// at least half of its calls; it then sends nothing to the node, so a dead
// or slow node costs no latency, until Options.BreakerCooldown has passed
// and one probe goes through: a PING from a goroutine of the store's,
// with a deadline of its own (the cooldown, or Timeout if longer), so that
// callers retrying at once on a small host cannot starve it; the decision
// that sends it fails as when the breaker is open. Other nodes'
// keys are decided on Redis as before. A decision Redis does not make is
// made by Options.OnFailure: FailError returns an error matching
// floodgate.ErrUnavailable (and ErrTimeout, ErrRedis or ErrBreakerOpen),
// FailOpen admits, FailClosed denies, FailLocal decides on an in-process
// memstore with Options.LocalShare of each quota (a configuration whose
// share is not a valid one is refused when the limiter is made). A Limits
// goes through the same: FailOpen and FailClosed report each limit's
// Decision (the each argument of Apply) and the binding one, FailLocal keeps the local
// share of every limit and refuses a Limits any of whose limits it cannot
// scale.
// Errors that Redis answered (ErrReply, ErrMismatch) are returned
// whatever the policy. Options.Observer counts the decisions Redis failed
// to make and hears of every change of a breaker (see Observer below).
//
// On a Cluster, a failing node (an error, a timeout, an open breaker)
// makes the store ask go-redis to reload its slot map, at most every
// 100ms: go-redis reloads it on its own only on MOVED and ASK replies and
// every ClusterStateReloadInterval (60s), and a dead master answers
// neither, so without this a promoted replica would not be used for up to
// a minute. With cluster-node-timeout 1s a killed master's keys are
// decided on Redis again about 3s after the kill (see docs/redis.md).
// A Cluster with cluster-require-full-coverage yes (Redis' default)
// refuses every key with CLUSTERDOWN while any master's slots are
// unserved; those decisions go to the policy without opening the breakers
// of the nodes that refused. Set it to no so that a failing master costs
// only its own keys.
//
// No script runs twice: the store marks every script call so that go-redis
// never sends it again (a script that ran before its connection broke
// would otherwise run twice, spending units nobody uses or giving a refund
// back twice). A call whose connection broke fails instead, to the policy.
// Redirections are still followed: a command answered MOVED or ASK did not
// run.
//
// Replication in Redis is asynchronous: a master that dies may not have
// sent its replica the last writes it acknowledged, and after the failover
// those units are spent on no node (a quota restored early, by at most the
// decisions of the last moments before the death). WAIT 1 after each
// decision, or min-replicas-to-write on the masters, would close most of
// that gap at the price of a replica's round trip per decision (or of
// refusing writes when no replica is in sync); floodgate does neither.
//
// # Observer
//
// Options.Observer, the observe.Observer that the rest of floodgate takes
// too, receives three kinds of events, each naming the store
// (Options.Name, "redis" by default: the store label of the metrics
// adapters) and the node as its breaker knows it: a Cluster master's
// address, a Ring shard's, the server's of a Client, "" for a client of
// another kind.
//
//   - OnStoreCall: every round trip to Redis, timed on the monotonic
//     clock. Unbatched, a call's EVALSHA, with the caller's context and
//     Decisions 1; when the server lacks the script, the EVAL that
//     follows is a second round trip, the first being answered NOSCRIPT
//     (CallOK, with that error). Batched, each pipeline, with
//     context.Background() and Decisions the decisions it carries, and
//     the pipeline that re-sends the NOSCRIPT ones as EVALs. A call a
//     Cluster redirected (MOVED, ASK, TRYAGAIN), made again through the
//     ClusterClient, is one more, to the node the redirection names (the
//     ClusterClient may make more round trips, following further
//     redirections). A Limits decision, and package inflight's
//     acquisitions, renewals and releases, are calls alike; so is a
//     FleetSource's exchange and a LeaseFleet's Demand, with Decisions
//     0. Outcome is
//     CallOK when Redis answered, an error reply about the script or the
//     data included; CallTimeout when no answer came within
//     Options.Timeout (or go-redis' own timeouts); CallError otherwise:
//     a network error, a refusal (CLUSTERDOWN, MASTERDOWN, LOADING, ...),
//     a caller whose context ended first. Err is go-redis' error. A
//     decision an open breaker refuses, or one that found no free slot in
//     time, is no round trip.
//   - OnFailures: the decisions (and in-flight acquisitions) Redis failed
//     to make, because it was unreachable or slow or its node's breaker
//     open, counted per node and Policy: "open", "closed" or "local" for
//     those the failure policy made, "error" for those whose error the
//     caller got (every one under FailError, and under any policy
//     ErrReply, ErrMismatch and a failure of FailLocal's store). Each
//     (node, Policy) has at most one event every Observer.FailureEvery
//     (1s by default), with the Count since its previous one and the
//     first error among them; Close reports what is left. The Counts add
//     up to every such decision. Counting one takes an atomic add, no
//     lock and no allocation, so an outage of half a million fail-open
//     decisions a second is a few events. A failed renewal or release is
//     no decision: OnStoreCall shows it.
//   - OnBreaker: every change of a node's breaker, From and To.
//
// The functions run on the goroutine of the event (the caller's, a
// batcher's, the timer's of OnFailures), never while the store holds a
// lock. A nil Observer, or a nil function, costs a comparison; an
// observed decision allocates nothing more than an unobserved one.
//
// # Batching
//
// Batching is on by default (Options.BatchSize 64; 1 turns it off). A
// decision goes out at once, from its caller's goroutine, as a call of
// its own with the single-decision script, when nothing is in flight for
// its node: a serial caller pays what an unbatched store costs. Decisions
// that arrive while calls are in flight are queued: each node has
// Options.BatchPipelines goroutines that take the decisions queued for
// it, up to BatchSize, wait up to Options.BatchLinger (default 0)
// for more, and send them to the node as one pipeline, re-sending the
// calls that met NOSCRIPT as EVALs. Decisions of one algorithm share one
// call of the batch script (batch.lua), which makes them in the
// batch's order, atomically, at one Redis TIME: Redis spends about a
// quarter less per decision than on a call per decision. A decision that
// fails in the script (a key holding another type) fails alone. On a
// Cluster, decisions share a call only when their keys share a hash slot
// (decisions on one limiter key always do: a hot key costs its node
// least); a call the node refuses with MOVED, ASK or TRYAGAIN (its slot
// moved or is migrating) ran nowhere, and each of its decisions is made
// again alone through the ClusterClient, which follows the redirection:
// counts stay exact through a migration. A decision waits at most three
// quarters of Options.Timeout for a batch to take it (then fails unsent,
// with ErrTimeout), and at most Options.Timeout in all; a batch ends by
// the latest deadline of its decisions. On a
// UniversalClient other than *redis.Client, *redis.ClusterClient and
// *redis.Ring, each decision is its own call in the pipeline. A Limits
// decision is always a call of its own (its script, on its keys) in the
// pipeline: it shares the round trip, not the call, and is made again alone
// after a redirection as any call is. Close stops the goroutines; a
// decision racing it returns its reply or floodgate.ErrClosed.
//
// # Takes that time out: UndoLate
//
// A decision that times out may still be made: Redis runs a call it has
// read, whenever it gets to it (after a DEBUG SLEEP, a stall, a busy
// moment of a loaded host), and a unit is then taken that its caller was
// told nothing of. A take whose Request asks floodgate.Request.UndoLate
// (package shard asks it of every shard it probes, since it asks another
// shard when one fails) always goes through the batcher, even when
// nothing is in flight, and a batch that carries one waits for its reply
// up to 500ms (or Timeout, if longer) past its decisions' deadlines, the
// callers not waiting. When the reply of such a take comes after its
// caller gave up and says it took units, the store gives them back (an
// OpSettle of -Granted at the instant they were admitted for) on a
// goroutine of its own, straight to the key's node (no breaker, slot,
// batch or failure policy: no caller waits for it), waiting up to a
// second (or Timeout, or twice BreakerCooldown, if longer) for its reply
// and sending it again while it cannot be sent (no connection);
// Store.UndoneTakes counts them. A reply later than that, a give-back that
// fails once sent (it is not sent twice: that would return units others
// were admitted), Close, an unbatched store (BatchSize 1) and the leaky
// bucket (which gives nothing back) leave the units taken: the quota
// under-used, as without UndoLate. Under FailOpen, UndoLate is ignored:
// the policy admitted the decision, and a take Redis made late rightly
// counts it. Measured by TestUndoLate (16 goroutines, a 50ms
// Timeout, DEBUG SLEEP 0.3 on a server of the test's own): without
// UndoLate Redis counted 5 to 32 units more than its callers were
// admitted in 9 runs; with it, exactly as many (4 to 15 takes undone).
package redisstore
