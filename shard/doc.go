// Package shard splits one global limit over several shards of a store, so
// that a key every request shares (a tenant's quota, a partner's contract,
// an endpoint's total) is decided by several Redis masters instead of one.
//
// A shard Store is a floodgate.Store around another, usually a redisstore
// over a Redis Cluster:
//
//	redis, err := redisstore.New(cluster, nil)
//	...
//	sharded, err := shard.New(redis, &shard.Options{Shards: 16})
//	...
//	lim, err := floodgate.New(sharded, floodgate.FixedWindow{Limit: 100_000, Window: time.Second},
//		&floodgate.Options{Name: "partner"})
//
// A limit on one key lives in one Cluster slot, so on one master's thread:
// one master runs every decision of that key, and adding masters does not
// help it. Sharded, the key is K keys on K slots spread evenly over the
// 16,384, so that a Cluster whose masters hold contiguous slot ranges (as
// redis-cli --cluster create splits them) spreads them over its masters,
// and a master that fails takes only its shards' part of the quota with it.
//
// # The split
//
// Bind splits the limit's quota exactly: shard i of K gets ⌊Q/K⌋ units,
// plus one on the first Q mod K shards, so the parts sum to Q. A token
// bucket splits its Rate and its Burst alike (Per is kept), a leaky bucket
// its Rate and Capacity, the windows their Limit; a floodgate.Limits
// splits each of its limits. A limit whose quota (or rate) is smaller than
// K is refused with floodgate.ErrInvalidConfig, and so is a split whose
// part is not a valid configuration. Each shard is bound on the inner
// store under InnerName(name, K), the limiter's name with ":shard" and K,
// with the key of a five-byte suffix, ':' and the limiter's key: changing
// K starts new shards, and during a rolling change the old shards and the
// new each admit up to the quota.
//
// # Exactness
//
// Each shard is decided exactly by the inner store, so what the shards
// admit together is bounded as the limit's own algorithm bounds it: at
// most Q per window for the windows (the shards' windows are the same
// epoch-aligned intervals), at most Burst + Rate·T/Per over any interval
// of length T for a token bucket. The store is in floodgate's conservative
// tier: it never admits more than the unsharded limit, and it may deny
// what the unsharded limit would admit. A decision goes to a home shard,
// chosen at random for each call, and, when the home shard denies, to up
// to Options.Probes others in turn; a decision is denied when every shard
// it asked denies. With Probes = Shards-1 every shard is asked before a
// denial, and a take of one unit is denied only when the whole quota is
// spent; with fewer probes it may be denied while unasked shards hold
// units. A take of more units than the smallest shard's quota is spread:
// it takes what each shard has now (OpTakeUpTo), from the home shard on,
// until it has n, and when all the shards together have fewer it gives
// back what it took and denies (all or nothing; the units it held for
// that moment were unavailable to others, and a give-back that fails
// leaves them taken until they expire, under-using the quota, never
// exceeding it). A spread take admits now or not at all: it does not
// reserve. Its Remaining is what the shards it asked had left (a lower
// bound, as below) and a denial's RetryAfter the soonest any of them
// would admit one unit (a lower bound of when n fit). A take of at most a
// shard's quota needs its n units on one shard, and may be denied while
// the shards together hold n but none holds n alone.
//
// A shard that denies a take of n units with RetryAfter r is skipped by
// this process's takes of at least n units with no longer a MaxDelay
// (a reservation that may wait longer is asked) for r, at most Options.MaxHint
// (250 ms; a hint, kept per key for Options.MaxKeys keys): under sustained
// saturation a decision costs one store call, and probing costs calls only
// where units may be. When every shard is hinted empty, one shard is asked
// all the same. Units given back to a shard through another process are
// seen here when the hint ends: until then this process may deny what
// that shard would admit.
//
// # Cost
//
// One store call when the first shard asked admits, at most 1 + Probes
// when it denies, and no other work than a map lookup: a key's shard keys
// are computed once (on a Redis store, about twenty slot computations; a
// search of up to 2^20 with HashKeys) and kept with its hints and ledger,
// for Options.MaxKeys keys per limiter. A key evicted to make room loses
// them: its shard keys are computed again, and the units of its earlier
// admissions are given back as another process's are (see Settlements).
// On a memstore, a
// sharded Allow on one hot key took 186–203 ns against 163–181 ns for the
// memstore alone, with 0 allocations (go test ./shard -run '^$' -bench
// ShardAllow -benchmem -count 3, 2 goroutines on the 2-core development
// machine).
//
// # Decisions
//
// The Decision of an admission is the admitting shard's, and of a denial
// that of the shard whose RetryAfter is the shortest among those asked,
// with Limit set to the whole limit's quota (for a Limits, each limit's).
// So Remaining is what that shard could still admit: a lower bound on what
// the limit could, when no other process takes units meanwhile. RetryAfter
// is the soonest any shard asked would admit the request; with Probes =
// Shards-1 and no hint standing in the way, the soonest any shard would.
// ResetAfter is the shard's.
//
// # Settlements
//
// A settlement that charges units (an OpSettle of a positive N) is charged
// to a random shard. Units given back (an OpSettle of a negative N at
// instant At, a Limiter's refund) go first to the shards that admitted
// them when this Store knows which: each key keeps a ledger of its last
// Options.Ledger (32) admissions made through Apply (Reserve, Wait, a
// Limiter's Apply, the lease layer's refills), each with its shard,
// instant and units, and a give-back takes its units from the admissions
// at or before At, newest first, giving each part back to its shard at
// its admission's instant (where a sliding window or log counted it).
// What is not back then (units admitted through another process, through
// Take, which Allow and AllowN use, or older than the ledger, and ledger
// parts their shard no longer counts, another Store having given them
// back) is given back to the shards in turn from a random one, at At,
// each taking back what it counts there, until all of it is back or
// every shard was asked. Units are interchangeable between shards: each shard enforces
// its part of the quota on what it counts, so admissions net of the units
// taken back never pass the quota, whichever shard takes them back. As on
// an unsharded limit, a give-back of units the caller was not admitted
// returns units others were. Result.Granted is the units the shards took
// back (0, not an error, when none counted any at At), at most -N.
//
// # Start-up
//
// A decision that fails (a timeout) may still have taken its unit in
// Redis, and the shard Store asks the next shard: the quota would then be
// under by that unit. So every take the shard Store asks of a shard asks
// floodgate.Request.UndoLate: a store that learns that such a take was
// made after its caller gave up gives its units back (redisstore does,
// for the takes it batches: see its package doc), and they can be
// admitted again. The first calls of a fresh go-redis client are the
// likeliest to time out (they dial, load the Cluster's slots and the
// scripts): on the 3-master Cluster of the tests, 8 default-option
// clients × 64 goroutines starting at once, with no Ping, spending a quota
// of 2,000 over 16 shards with every shard probed, admitted 1,849 to
// 2,000 in 25 runs (22 of them fewer) before UndoLate, and exactly 2,000
// in each of 50 runs with it (go test ./shard -run TestRedisColdExact).
// Ping at start-up all the same, to learn whether Redis answers. The cost:
// on redisstore a take asking UndoLate always goes through the batcher,
// so a serial caller's sharded decision took 58 µs instead of 49 µs on
// loopback and 18 allocations instead of 8 (medians of 6 runs of 2,000
// decisions each, against the code before UndoLate in turn, benchstat:
// BenchmarkShardAllowRedisSerial gives its command); under concurrency, where decisions are batched
// anyway, one hot key over 16 shards on the Cluster made 47,100–50,200
// decisions/s against 46,900–47,400 before (BenchmarkClusterHotKey in
// bench/, 3 runs each).
//
// # Under a lease
//
// The lease layer over a shard Store (lease.New(shardStore, …)) is the
// cheapest way to serve one hot global limit: each pool refills with a
// take up to n units from a home shard, which moves on to other shards
// when the home shard grants nothing, and gives unused units back to the
// shards that granted them (the ledger above). In a simulation of 150
// pods on a virtual clock sharing a token bucket of 30,000 per second over
// 16 shards, each pod called the store 10.0 times per second with the
// lease's default options (16.7 before a refill asked for a whole batch
// on top of what its pool holds), and the pods never admitted more than
// Burst + Rate·T (go test ./shard -run TestShardedLease150Pods -v).
//
// # Placement
//
// On an inner store with a Slot method (Slotter; *redisstore.Store has
// one), each key's shard suffixes are chosen so that shard i's slot is
// shard 0's plus ⌊i·16384/K⌋, modulo 16,384: exactly, because Redis's
// CRC16 of a hash tag is an affine function of the suffix's bits, which
// the store solves for; or, when it is not (redisstore's HashKeys hashes
// the key first), within ±1% of 16384/K by a search of at most 2^20
// suffixes per key. Stores in between (observe.Store, say) hide the
// method: put the shard Store directly over the redisstore.
package shard
