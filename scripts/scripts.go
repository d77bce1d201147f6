// Package scripts holds the Lua twins of floodgate's reference transitions:
// one script per algorithm, which redisstore runs on Redis as one atomic
// step per decision. Each script makes the same admission decision and
// writes the same new state as the algorithm's reference transition in
// package step; redisstore checks every reply against it, and the store
// conformance suite holds them together.
//
// The files are tokenbucket.lua, leakybucket.lua, fixedwindow.lua,
// slidingwindow.lua and slidinglog.lua, each starting with a header that
// gives its KEYS, ARGV, reply and time source, and lib.lua, the helpers they
// share (exact instants as (seconds, nanoseconds) pairs, since Lua numbers
// are doubles). Source returns lib.lua followed by an algorithm's file,
// which is the script to run; the buckets', the fixed window's and the
// sliding window's start with bucket_fast.lua (after a line setting its
// `leaky`), fixedwindow_fast.lua and slidingwindow_fast.lua, their common
// case written out as a function called first, which needs none of
// lib.lua (measured with redis-benchmark: the token bucket's 6.3 µs per
// call, its general script 7.8). The fast paths repeat a few lines each
// (TIME, moving an instant, the TTL rounded up to a millisecond) rather
// than share helpers: three shared local functions cost 0.4-0.5 µs more
// per call, 5-7% (redis-benchmark -c 64 -P 16 and INFO commandstats, four
// alternating runs of each fast path), since a script defines its
// functions again on every call.
//
// BatchSource returns the script that makes many decisions of one
// algorithm in one call (batch.lua): the same parts, with the algorithm's
// file as a function, one TIME for the batch, and each distinct argument
// list sent once. redisstore's batching sends it; a decision costs Redis
// 4.5–4.7 µs in a batch of 16 against 5.6–5.9 µs alone (redis-benchmark and
// INFO commandstats, the token bucket).
//
// Every script takes the same arguments: one key, and
//
//	ARGV[1] the floodgate.Op (0 take, 1 take up to n, 2 refund)
//	ARGV[2] n
//	ARGV[3] the maximum delay of a take, in nanoseconds
//	ARGV[4] the TTL margin, in milliseconds
//	ARGV[5] the quota (burst, capacity or limit)
//	ARGV[6] the emission interval (buckets) or the window (windows), in ns
//	ARGV[7] tau, the time to restore the full quota (buckets), in ns, or 0
//	ARGV[8] now in decimal nanoseconds since the Unix epoch; absent or ""
//	        to use the Redis server's TIME
//	ARGV[9] the refund instant, in decimal nanoseconds (refunds only)
//
// The optional arguments come last, so that a decision on Redis TIME sends
// seven.
//
// A reply is an array whose first two elements are the instant of the step
// (seconds and nanoseconds since the Unix epoch); each file's header gives
// the rest. The fast paths reply with the same elements as one string,
// separated by single spaces ("1795979871 51212000 0 1795979871052212000
// 1 1"): they join strings already at hand (TIME's, the states, ARGV[2]),
// which costs Redis about 0.5 µs less per call than building an array,
// and the client a parse instead of five allocations.
package scripts

import (
	_ "embed"

	"github.com/floodgate-go/floodgate/step"
)

var (
	//go:embed lib.lua
	lib string
	//go:embed bucket_fast.lua
	bucketFast string
	//go:embed tokenbucket.lua
	tokenBucket string
	//go:embed leakybucket.lua
	leakyBucket string
	//go:embed fixedwindow_fast.lua
	fixedWindowFast string
	//go:embed fixedwindow.lua
	fixedWindow string
	//go:embed slidingwindow_fast.lua
	slidingWindowFast string
	//go:embed slidingwindow.lua
	slidingWindow string
	//go:embed slidinglog.lua
	slidingLog string
	//go:embed batch.lua
	batch string
)

// fastPaths are the fast paths, each defining fast(key, ARGV, t), indexed
// by step.Kind; the sliding log has none.
var fastPaths = [...]string{
	step.KindTokenBucket:   "local leaky = false\n" + bucketFast,
	step.KindLeakyBucket:   "local leaky = true\n" + bucketFast,
	step.KindFixedWindow:   fixedWindowFast,
	step.KindSlidingWindow: slidingWindowFast,
	step.KindSlidingLog:    "",
}

// bodies are the algorithms' files, indexed by step.Kind.
var bodies = [...]string{
	step.KindTokenBucket:   tokenBucket,
	step.KindLeakyBucket:   leakyBucket,
	step.KindFixedWindow:   fixedWindow,
	step.KindSlidingWindow: slidingWindow,
	step.KindSlidingLog:    slidingLog,
}

// sources and batchSources are the complete scripts, indexed by
// step.Kind.
var sources, batchSources [len(bodies)]string

func init() {
	for k, body := range bodies {
		if body == "" {
			continue
		}
		fast := fastPaths[k]
		if fast == "" {
			sources[k] = lib + "\n" + body
			batchSources[k] = "local fast = nil\n" + lib + "\nlocal function one(KEYS, ARGV)\n" + body + "\nend\n" + batch
			continue
		}
		sources[k] = fast + "\nlocal reply = fast(KEYS[1], ARGV)\nif reply then\n  return reply\nend\n" + lib + "\n" + body
		batchSources[k] = fast + "\n" + lib + "\nlocal function one(KEYS, ARGV)\n" + body + "\nend\n" + batch
	}
}

// Source returns the complete Lua script of the algorithm kind for one
// decision: lib.lua followed by the algorithm's file, after the fast path
// (and a call of it) for the buckets and the fixed window. It returns "" for
// a Kind without a script.
func Source(kind step.Kind) string {
	if int(kind) >= len(sources) {
		return ""
	}
	return sources[kind]
}

// BatchSource returns the Lua script of the algorithm kind that makes many
// decisions in one call (see batch.lua): the fast path if any, lib.lua, the
// algorithm's file as a function, and batch.lua. It returns "" for a Kind
// without a script.
func BatchSource(kind step.Kind) string {
	if int(kind) >= len(batchSources) {
		return ""
	}
	return batchSources[kind]
}
