// Package scripts holds the Lua twins of floodgate's reference transitions:
// one script per algorithm, which redisstore runs on Redis as one atomic
// step per decision. Each script makes the same admission decision and
// writes the same new state as the algorithm's reference transition in
// package step; redisstore checks every reply against it, and the store
// conformance harness (package floodgatetest) holds them together.
//
// # Files
//
// The algorithms' files are tokenbucket.lua, leakybucket.lua,
// fixedwindow.lua, slidingwindow.lua and slidinglog.lua, each starting
// with a header that gives its KEYS, ARGV, reply and time source, as
// every file does. The
// other files are parts every script shares: time.lua reads the server's
// TIME once per call; lib.lua holds the helpers (exact instants as
// (seconds, nanoseconds) pairs, since Lua numbers are doubles); args.lua
// reads a decision's ARGV into named locals. Source returns time.lua,
// lib.lua, args.lua and an algorithm's file, which is the script to run.
//
// The buckets', the fixed window's and the sliding window's scripts run a
// fast path first, bucket_fast.lua (after a line setting its `leaky`),
// fixedwindow_fast.lua and slidingwindow_fast.lua: their common case, a
// take on Redis TIME, written out as a function that needs none of
// lib.lua, whose definitions it runs before (measured with
// redis-benchmark: the token bucket's 6.3 µs per call, its general script
// 7.8). The fast paths repeat a few lines each (moving an instant, the TTL
// rounded up to a millisecond) rather than share helpers: three shared
// local functions cost 0.4-0.5 µs more per call, 5-7% (redis-benchmark -c
// 64 -P 16 and INFO commandstats, four alternating runs of each fast
// path), since a script defines its functions again on every call. What
// every fast path needs first (the test that the decision is a take on
// Redis TIME, the TIME, its bound) is written once, in Source's call of
// the fast path and batch.lua's, and in time.lua.
//
// BatchSource returns the script that makes many decisions of one
// algorithm in one call (batch.lua): the same parts, with args.lua and the
// algorithm's file as a function, one TIME for the batch, and each
// distinct argument list sent once. redisstore's batching sends it; a
// decision costs Redis 4.5–4.7 µs in a batch of 16 against 5.6–5.9 µs
// alone (redis-benchmark and INFO commandstats, the token bucket).
//
// LimitsSource returns the script of a floodgate.Limits decision
// (limits.lua), step.Limits' steps on one key per limit: every fast path,
// each as a function of its own, and limits_fast.lua, its common case;
// then lib.lua and each algorithm's file after args.lua as a function of
// its own, which limits.lua runs for each limit's step.
//
// LimitsBatchSource returns the script that makes the Limits decisions of
// a batch in one call: LimitsSource's parts with limits.lua as a function
// of its own, and limits_batch.lua, which frames each decision's keys and
// arguments as batch.lua frames one algorithm's.
//
// InflightSource returns the script of package inflight's holds
// (inflight.lua after time.lua): a key's holds as a sorted set of holder
// ids scored by expiry, and an acquire, a renewal or a release per call.
// Its arguments are InflightArgs, laid out in inflight.go, as protocol.go
// lays out the algorithms'.
//
// # Dry runs
//
// The algorithms' files change keys only through lib.lua's write, so that
// a step can run dry: its writes are recorded, not run. A check-only step
// runs dry and drops them; limits.lua runs each limit's steps dry and runs
// the records of all of them once the composite admits, so that a denial
// by one limit changes no limit's key. A fast path probes instead: with
// probe set it writes nothing and returns the write for its caller. The
// sliding log, which reads its key after its own writes, keeps a view of
// the entries a dry step trimmed but left in the key (see slidinglog.lua).
//
// # The protocol
//
// protocol.go defines what redisstore and the scripts must agree on, once:
// the position of each argument in ARGV (Args and its ARGV and LimitsARGV
// methods, which redisstore sends), the codes of the operations and of a
// check (an op's code plus CHECK_CODE, which no fast path takes), and the
// bounds the scripts' arithmetic needs (MaxUnix, MaxQuota). The Lua files never
// write these values: they name them, as ARGV[ARG_N], OP_TAKE or MAX_UNIX,
// and Source writes each value in place of its name as it builds the
// scripts, in code and comments alike. The values are literals in the
// script Redis runs, which costs nothing per call, where Lua locals
// holding them would be captured by the fast paths' functions, a closure
// upvalue each per call; and a script printed by
// scripts/internal/source reads as Redis runs it. Tests check that the
// files hold no ARGV position or bound as a number, that every name they
// use is the protocol's, and that the headers document the arguments
// args.lua reads, in ARGV's order.
//
// # Replies
//
// A reply is an array whose first two elements are the instant of the step
// (seconds and nanoseconds since the Unix epoch); each file's header gives
// the rest. The fast paths reply with the same elements as one string,
// separated by single spaces ("1795979871 51212000 0 1795979871052212000
// 1 1"): they join strings already at hand (TIME's, the states,
// ARGV[ARG_N]), which costs Redis about 0.5 µs less per call than building
// an array, and the client a parse instead of five allocations.
package scripts

import (
	_ "embed"
	"fmt"
	"strings"

	"github.com/floodgate-go/floodgate/step"
)

var (
	//go:embed time.lua
	timeLua string
	//go:embed lib.lua
	lib string
	//go:embed args.lua
	argsLua string
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
	//go:embed calendarwindow.lua
	calendarWindow string
	//go:embed slidingwindow_fast.lua
	slidingWindowFast string
	//go:embed slidingwindow.lua
	slidingWindow string
	//go:embed slidinglog.lua
	slidingLog string
	//go:embed subwindow.lua
	subWindows string
	//go:embed subwindow_fast.lua
	subWindowsFast string
	//go:embed batch.lua
	batch string
	//go:embed limits.lua
	limits string
	//go:embed limits_fast.lua
	limitsFast string
	//go:embed limits_batch.lua
	limitsBatch string
)

// fastPaths are the fast paths, each defining fast(key, ARGV, t), indexed
// by step.Kind; the sliding log has none.
var fastPaths = [...]string{
	step.KindTokenBucket:   "local leaky = false\n" + bucketFast,
	step.KindLeakyBucket:   "local leaky = true\n" + bucketFast,
	step.KindFixedWindow:   fixedWindowFast,
	step.KindSlidingWindow: slidingWindowFast,
	step.KindSlidingLog:    "",
	step.KindSubWindows:    subWindowsFast,
	KindCalendar:           "",
}

// bodies are the algorithms' files, indexed by step.Kind.
var bodies = [...]string{
	step.KindTokenBucket:   tokenBucket,
	step.KindLeakyBucket:   leakyBucket,
	step.KindFixedWindow:   fixedWindow,
	step.KindSlidingWindow: slidingWindow,
	step.KindSlidingLog:    slidingLog,
	step.KindSubWindows:    subWindows,
	KindCalendar:           calendarWindow,
}

// callFast is a single decision's call of its fast path, between the fast
// path and lib.lua: a take on Redis TIME before MAX_UNIX that the fast
// path decides returns its reply there. batch.lua makes the same test for
// each decision of a batch.
const callFast = `if ARGV[ARG_OP] == OP_TAKE and (ARGV[ARG_NOW] or '') == '' and serverTime then
  local reply = fast(KEYS[1], ARGV, serverTime)
  if reply then
    return reply
  end
end
`

// sources and batchSources are the complete scripts, indexed by
// step.Kind.
var sources, batchSources = build()

// limitsSource is the script of a Limits decision, and limitsBatchSource
// that of a batch of them.
var limitsSource, limitsBatchSource = buildLimits(false), buildLimits(true)

// build returns the scripts of one decision and of a batch for each Kind,
// with the protocol's values in place of their names.
func build() (single, batched [len(bodies)]string) {
	head, helpers, args, driver := expand(timeLua)+"\n", expand(lib)+"\n", expand(argsLua)+"\n", expand(batch)
	for k, body := range bodies {
		if body == "" {
			continue
		}
		body = args + expand(body)
		fast := expand(fastPaths[k])
		if fast == "" {
			single[k] = head + helpers + body
			batched[k] = head + "local fast = nil\n\n" + helpers + "local function one(KEYS, ARGV)\n" + body + "\nend\n" + driver
			continue
		}
		single[k] = head + fast + "\n" + expand(callFast) + "\n" + helpers + body
		batched[k] = head + fast + "\n" + helpers + "local function one(KEYS, ARGV)\n" + body + "\nend\n" + driver
	}
	return single, batched
}

// callLimitsFast is a Limits decision's call of its fast path, between
// the fast path and lib.lua, as callFast is a single decision's.
const callLimitsFast = `if ARGV[ARG_OP] == OP_TAKE and ARGV[ARG_NOW] == '' and serverTime then
  local reply = limitsFast(KEYS, ARGV, serverTime)
  if reply then
    return reply
  end
end
`

// buildLimits returns the script of a Limits decision: time.lua; each
// algorithm's fast path, in its own block, as fasts[kind]; limits_fast.lua
// and its call; lib.lua; each algorithm's file after args.lua as the
// function run[kind]; and limits.lua.
//
// The batch script has the same parts but the single call of the fast
// path, with limits.lua as the function oneLimits(KEYS, ARGV), which first
// sets lib.lua's shift to 0 (a decision's delayed take sets it), and
// limits_batch.lua last.
func buildLimits(batched bool) string {
	var b strings.Builder
	b.WriteString(expand(timeLua) + "\n")
	b.WriteString("local fasts = {}\n")
	for k, fast := range fastPaths {
		if fast != "" && k != int(step.KindSubWindows) { // a Limits holds none
			fmt.Fprintf(&b, "do\n%s\nfasts['%d'] = fast\nend\n", expand(fast), k)
		}
	}
	b.WriteString(expand(limitsFast) + "\n")
	if !batched {
		b.WriteString(expand(callLimitsFast) + "\n")
	}
	b.WriteString(expand(lib) + "\n")
	b.WriteString("local run = {}\n")
	args := expand(argsLua) + "\n"
	for k, body := range bodies {
		if body != "" && k != int(step.KindSubWindows) {
			fmt.Fprintf(&b, "run['%d'] = function(KEYS, ARGV)\n%s%s\nend\n", k, args, expand(body))
		}
	}
	if batched {
		b.WriteString("local function oneLimits(KEYS, ARGV)\nshift = 0\n" + expand(limits) + "\nend\n" + expand(limitsBatch))
		return b.String()
	}
	b.WriteString(expand(limits))
	return b.String()
}

// Source returns the complete Lua script of the algorithm kind for one
// decision: time.lua, the fast path and its call (all but the sliding
// log), lib.lua, args.lua and the algorithm's file. It returns "" for a
// Kind without a script.
func Source(kind step.Kind) string {
	if int(kind) >= len(sources) {
		return ""
	}
	return sources[kind]
}

// BatchSource returns the Lua script of the algorithm kind that makes many
// decisions in one call (see batch.lua): time.lua, the fast path if any,
// lib.lua, args.lua and the algorithm's file as a function, and batch.lua.
// It returns "" for a Kind without a script.
func BatchSource(kind step.Kind) string {
	if int(kind) >= len(batchSources) {
		return ""
	}
	return batchSources[kind]
}

// LimitsSource returns the Lua script of a floodgate.Limits decision
// (limits.lua), which takes step.Limits' steps on one key per limit (KEYS)
// with the arguments of Args.LimitsARGV: time.lua, every fast path and
// limits_fast.lua with its call, lib.lua, args.lua and each algorithm's
// file as a function of its own, and limits.lua.
func LimitsSource() string { return limitsSource }

// LimitsBatchSource returns the Lua script that makes many Limits
// decisions in one call (limits_batch.lua), with the arguments that
// redisstore's limitsBatchArgs builds.
func LimitsBatchSource() string { return limitsBatchSource }
