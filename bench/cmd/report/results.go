package main

import (
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// report is one run of the runner.
type report struct {
	opts     options
	benchDir string
	repoDir  string
	started  time.Time
	elapsed  time.Duration
	machine  machine

	components []componentStatus
	buildTags  []string
	commands   []string
	rounds     int
	raw        []byte
	fromFile   string
	// recordedElapsed is the duration of the run -from renders.
	recordedElapsed time.Duration
	parsed          *parsed

	quickstartCSV, quickstartErr string
	adaptiveCSV, adaptiveErr     string
	charts                       []chartFile
	bars                         []barResult
}

// scenario describes a benchmark for the tables.
type scenario struct {
	id, title, what string
}

var scenarios = []scenario{
	{"InProcessOneKeyAllowed", "In-process, one key, serial, every call admitted",
		"One key, one goroutine. Quota 10⁹ per hour with a burst of 10⁹ (windows: 10⁹ per hour): no run makes 10⁹ calls, so every call is admitted and nothing needs to refill."},
	{"InProcessOneKeyDenied", "In-process, one key, serial, every call denied",
		"One key, one goroutine. Quota 1 per hour, spent by a warm-up call: every timed call is denied."},
	{"InProcess100kKeysParallel", "In-process, 100,000 keys, RunParallel",
		"100,000 keys, each decided once before the timer starts, then GOMAXPROCS goroutines walking them from different offsets. Quota 10 per second with a burst of 10⁶ (windows: 10⁶ per 100,000 s): every call is admitted, and no key's quota is ever fully restored during the run, so no store may forget a key it tracks."},
	{"InProcess100kKeysReclaimed", "In-process, 100,000 keys restored between their calls, RunParallel",
		"The 100,000 keys of the scenario above under a quota of 100 units per 100 µs: every key is fully restored between two of its calls, so a store that forgets restored keys (memstore reclaims them after a grace of 1 s) must not pay for inserting them again."},
	{"RedisSerial", "Redis, one decision at a time (latency)",
		"One key, one goroutine, the round trip to Redis included. Quota 10⁹ per hour (every call admitted). `baseline-ping` is a PING on the same client: the floor of any decision, not a limiter."},
	{"Redis64Goroutines", "Redis, 64 goroutines (throughput)",
		"64 goroutines (RunParallel with SetParallelism) over 1,000 keys, one client with a pool of 64 connections. ns/op is wall time divided by decisions, so decisions per second = 10⁹ / ns/op."},
	{"RedisFanIn512", "Redis, 512 goroutines on a default-options client (fan-in)",
		"512 goroutines (RunParallel with SetParallelism) over 1,000 keys, through a client built with go-redis' default options (a pool of 10 connections per CPU), the store's defaults. timeouts/op is the share of decisions that failed with redisstore.ErrTimeout."},
	{"RedisLimits64Goroutines", "Redis, a Limits of two at 64 goroutines",
		"The throughput scenario's 64 goroutines and 1,000 keys deciding a `floodgate.Limits` of two limits (a token bucket and a fixed window, neither binding: one script call on two Redis keys), against the token bucket alone. No peer decides several limits as one."},
	{"RedisInflightContention", "Redis, in-flight limit under contention",
		"8 stores (each with its own client, as 8 processes) × 64 goroutines acquiring one key of package inflight's limit 8 (defaults), each holder keeping its slot 50ms and each denied caller retrying at once. ns/op is wall time per admission; held/8 is the mean number of slots the holders held, sampled every 5ms (8: no slot idle while callers wait). No peer has a distributed in-flight limiter."},
	{"Lease64GoroutinesOneKey", "Lease vs plain Redis, 64 goroutines, one hot key",
		"The lease layer (defaults) in front of floodgate's Redis token bucket, against the plain Redis store, 64 goroutines on one key."},
	{"Lease64Goroutines1000Keys", "Lease vs plain Redis, 64 goroutines, 1,000 keys",
		"The same over the 1,000 keys of the throughput scenario: each key is leased separately."},
	{"AdaptiveSerial", "Adaptive concurrency: Acquire + Success, serial",
		"One Acquire followed by Success at a time; the limit (default initial 20) is never reached."},
	{"AdaptiveParallel", "Adaptive concurrency: Acquire + Success, GOMAXPROCS goroutines",
		"The same from GOMAXPROCS goroutines sharing one limiter."},
	{"MemoryPerKey", "Memory per tracked key, in-process",
		"Live heap after one decision on each of 1,000,000 keys `user:0` to `user:999999` (100,000 with -short), minus the heap before, after a GC; quota 100 per hour. The caller's key strings are not counted; a library's own copies are (memstore copies each key: 16 B for most of these). floodgate's figures are held to bounds by `go test -run '^TestMemoryPerKey$' -v .`."},
	{"RedisMemoryPerKey", "Memory per key in Redis",
		"Sum of `MEMORY USAGE key SAMPLES 0` over every Redis key a library wrote for 10,000 limiter keys (1,000 with -short) of about 20 bytes, one decision each, quota 100 per hour, divided by the number of limiter keys."},
	{"ClusterHotKey", "Redis Cluster, one hot key, unsharded and sharded",
		"64 goroutines make 30,000 decisions on one key (a token bucket that admits them all) through one default-options ClusterClient on the 3-master Cluster, with the store's defaults: unsharded, split by package shard over 4 and 16 shards (`shard.New(store, &shard.Options{Shards: K})`), and over 16 shards behind the lease layer (`lease.New(sharded, nil)`, whose handful of refills make its share meaningless). From `INFO commandstats` (EVALSHA and EVAL usec, before and after): the busiest master's share of the script time, and the script time per decision summed over the masters. On one host the masters share its cores, so decisions/s measures the host, not a fleet of machines. No peer shards a key."},
	{"Accuracy", "Accuracy under concurrency",
		"4 independent limiter instances (each with its own client, as 4 processes would have) sharing one Redis; each round, 1,000 goroutines released at once (250 per instance) ask for one unit of one fresh key with a quota of 100 per hour. Anything above 100 is over-admission."},
}

// libraryNotes says what each library is and how it is configured.
var libraryNotes = []struct{ lib, note string }{
	{"floodgate", "floodgate's token bucket: GCRA in one 64-bit word updated by compare-and-swap in memstore (`memstore.New(nil)`); on Redis, redisstore's token bucket script on one key with the server's clock, with the store's defaults (`redisstore.New(c, nil)`: batching on, a 50ms timeout per decision; the peers have no timeout of their own)."},
	{"floodgate-fixedwindow", "floodgate's fixed window (epoch-aligned), for a like-for-like comparison with ulule and sethvargo."},
	{"floodgate-slidingwindow", "floodgate's sliding window counter, for a like-for-like comparison with httprate."},
	{"floodgate-leakybucket", "floodgate's leaky bucket (a shaper): called with Reserve and the whole window as maximum delay, so admitted requests are queued departures."},
	{"floodgate-slidinglog", "floodgate's exact sliding log."},
	{"floodgate-unbatched", "floodgate's Redis token bucket with batching off (`BatchSize: 1`): each decision a call of its own."},
	{"floodgate-limits2", "a `floodgate.Limits` of floodgate's token bucket and fixed window on Redis, decided as one (one script call on two keys)."},
	{"floodgate-lease", "the lease layer (`lease.New(store, nil)`) over floodgate's Redis token bucket on the store's defaults: units leased in batches, served locally."},
	{"floodgate-vegas", "adaptive.Limiter with the Vegas limit (defaults)."},
	{"floodgate-gradient2", "adaptive.Limiter with Gradient2 in a Windowed limit (defaults)."},
	{"floodgate-aimd", "adaptive.Limiter with the AIMD limit (defaults)."},
	{"xtimerate", "golang.org/x/time/rate: one token-bucket `*rate.Limiter` (a mutex, float tokens) per key, keyed through a `sync.Map` (Load, then LoadOrStore) as users key it; it never forgets a key."},
	{"sethvargo", "github.com/sethvargo/go-limiter memorystore (defaults): called a token bucket, but it hands out Tokens per Interval and refills them all at once at each tick anchored at the key's creation, in effect a per-key fixed window; map behind an RWMutex plus a lock per bucket; a sweeper every 6 h; reads the clock through a linkname to runtime time.now. Code reading of v0.7.1: a refill adds elapsed ticks × Interval/Tokens tokens (capped at Tokens), which is less than Tokens when Tokens exceeds √(Interval in ns), e.g. one token per tick at 10⁹ per second; the quotas here never need a refill, so it does not bite."},
	{"ulule", "github.com/ulule/limiter/v3: fixed window counter. Memory store (defaults): a sync.Map-based cache with a cleaner goroutine; it builds `prefix:key` per call. Redis store: INCRBY and PEXPIRE in one Lua script (EVALSHA)."},
	{"httprate", "github.com/go-chi/httprate: sliding window counter over two windows, in maps behind one limiter-wide mutex; it keeps a 64-bit xxh3 hash of each key, not the key (colliding keys would share a counter), hence its small memory per key. Its decision is `OnLimit(w, r, key)`, which also writes response headers; the headers are turned off (`WithResponseHeaders(ResponseHeaders{})`) and one request and recorder are reused, so it is compared on the decision."},
	{"uber", "go.uber.org/ratelimit: pacing (virtual scheduling, atomic CAS) whose only call, Take, sleeps until the next slot: it cannot deny and has no burst (a slack of 10) and no keys (a `sync.Map` of limiters here). It paces at one slot per nanosecond, where Take never sleeps, and runs only in the scenarios where every call is admitted."},
	{"redis_rate", "github.com/go-redis/redis_rate/v10: GCRA in one Lua script on one key, Redis TIME, run by go-redis' Script (EVALSHA, EVAL on NOSCRIPT); a `*Result` per call."},
	{"baseline-ping", "not a limiter: a Redis PING on the same client, the round-trip floor of any Redis-backed decision."},
	{"baseline-chan-semaphore", "not a peer: a static limit of 20 on a buffered channel, the floor an in-flight limiter can reach. No adaptive concurrency library is available from the module proxy here (github.com/platinummonkey/go-concurrency-limits is not served), so the adaptive scenarios have no peer."},
}

// peersLeftOut are the peers the issue names that this bench cannot run.
var peersLeftOut = []string{
	"github.com/mennanov/limiters and github.com/platinummonkey/go-concurrency-limits: not served by the module proxy here, left out.",
	"The Redis stores of sethvargo (github.com/sethvargo/go-redisstore, on redigo) and httprate (github.com/go-chi/httprate-redis) are separate modules that the module proxy here does not serve either: the Redis scenarios compare redis_rate and ulule.",
}

type status int

const (
	notMeasured status = iota
	pass
	fail
)

// String names the status. The words are not go test's PASS and FAIL, so
// that tools reading CI logs for test results do not take a missed speed
// bar for a failed test.
func (s status) String() string {
	switch s {
	case pass:
		return "met"
	case fail:
		return "missed"
	}
	return "not measured"
}

// barResult is one of the bars, judged on this run.
type barResult struct {
	title       string
	status      status
	details     []string
	correctness bool
}

// evaluateBars judges the bars on the medians of this run.
func (r *report) evaluateBars() {
	p := r.parsed
	for _, s := range []struct{ id, title string }{
		{"InProcessOneKeyAllowed", "in-process, one key, admitted"},
		{"InProcessOneKeyDenied", "in-process, one key, denied"},
		{"InProcess100kKeysParallel", "in-process, 100,000 keys, parallel"},
		{"InProcess100kKeysReclaimed", "in-process, 100,000 keys restored between their calls, parallel"},
	} {
		b := barResult{title: "floodgate's token bucket is faster than every in-process peer, with 0 allocs/op: " + s.title}
		fg, ok := p.get(s.id, "floodgate", "ns/op")
		if !ok {
			b.details = append(b.details, "floodgate not measured")
			r.bars = append(r.bars, b)
			continue
		}
		fgNs, _, _, _ := fg.median("ns/op")
		fgAllocs, _, _, _ := fg.median("allocs/op")
		b.status = pass
		if fgAllocs != 0 {
			b.status = fail
		}
		b.details = append(b.details, fmt.Sprintf("floodgate %s ns/op, %s allocs/op", fmtNum(fgNs), fmtNum(fgAllocs)))
		for _, lib := range p.libraries(s.id) {
			if strings.HasPrefix(lib, "floodgate") {
				continue
			}
			res, ok := p.get(s.id, lib, "ns/op")
			if !ok {
				b.details = append(b.details, fmt.Sprintf("%s: %s", lib, skipReason(p, s.id, lib)))
				continue
			}
			ns, _, _, _ := res.median("ns/op")
			verdict := "floodgate faster"
			if fgNs >= ns {
				verdict = "floodgate NOT faster"
				b.status = fail
			}
			b.details = append(b.details, fmt.Sprintf("%s %s ns/op (%.2fx floodgate's): %s", lib, fmtNum(ns), ns/fgNs, verdict))
		}
		r.bars = append(r.bars, b)
	}

	r.oneKeyBar()
	r.redisBars()
	r.hotKeyBar()

	b := barResult{title: "no floodgate limiter over-admits in the accuracy scenario (quota 100)", correctness: true}
	measured := false
	b.status = pass
	for _, lib := range p.libraries("Accuracy") {
		res, ok := p.get("Accuracy", lib, "admitted")
		if !ok {
			b.details = append(b.details, fmt.Sprintf("%s: %s", lib, skipReason(p, "Accuracy", lib)))
			continue
		}
		most, _ := res.max("admitted")
		errs, _ := res.max("errors")
		line := fmt.Sprintf("%s: at most %.0f admitted, %.0f errors", lib, most, errs)
		if strings.HasPrefix(lib, "floodgate") {
			measured = true
			if most > 100 {
				b.status = fail
				line += " — OVER-ADMITS"
			}
		} else if most > 100 {
			line += " (over-admits)"
		}
		b.details = append(b.details, line)
	}
	if !measured {
		b.status = notMeasured
	}
	r.bars = append(r.bars, b)
}

// skipReason returns why scenario/lib has no numbers.
func skipReason(p *parsed, scenario, lib string) string {
	name := scenario + "/" + lib
	if why, ok := p.failed[name]; ok {
		return "FAILED: " + why
	}
	if why, ok := p.skipped[name]; ok {
		return why
	}
	if why, ok := p.skipped[scenario]; ok {
		return why
	}
	return "not run"
}

// resultsMarkdown renders RESULTS.md.
func (r *report) resultsMarkdown() string {
	var b strings.Builder
	p := r.parsed
	mode := fmt.Sprintf("full: %s, -benchtime %s", plural(r.rounds, "round"), r.opts.benchtime)
	if r.opts.short {
		mode = fmt.Sprintf("-short: %s, -benchtime %s, fewer keys in the memory scenarios (a smoke test, not numbers to quote)", plural(r.rounds, "round"), r.opts.benchtime)
	}
	if r.fromFile != "" {
		mode += "; this page rendered again from " + filepath.Base(r.fromFile)
	}
	fmt.Fprintf(&b, "# floodgate against its peers: benchmark results\n\n")
	fmt.Fprintf(&b, "Written by `bench/cmd/report` on %s; do not edit by hand, re-run it:\n\n", r.started.Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "```sh\neval \"$(bash .ci/redis.sh start)\"   # from the repository root: a loopback Redis, REDIS_ADDR\ncd bench && go run ./cmd/report      # full mode (-short: under two minutes)\n```\n\n")
	fmt.Fprintf(&b, "## Machine\n\n| | |\n|---|---|\n")
	fmt.Fprintf(&b, "| Go | %s |\n", r.machine.GoVersion)
	cpu := orDash(r.machine.CPU)
	if p.cpu != "" && p.cpu != r.machine.CPU {
		cpu += " (go test: " + p.cpu + ")"
	}
	fmt.Fprintf(&b, "| CPU | %s, %d logical CPUs, GOMAXPROCS %d |\n", cpu, r.machine.CPUs, r.machine.Maxprocs)
	fmt.Fprintf(&b, "| Memory | %s |\n", orDash(r.machine.Memory))
	fmt.Fprintf(&b, "| OS | %s |\n", r.machine.Kernel)
	fmt.Fprintf(&b, "| Redis | %s |\n", r.machine.Redis)
	fmt.Fprintf(&b, "| floodgate | commit %s |\n", orDash(r.machine.Commit))
	fmt.Fprintf(&b, "| Load average (1, 5, 15 min) | %s at the start, %s at the end |\n", r.machine.LoadStart, r.machine.LoadEnd)
	fmt.Fprintf(&b, "| Mode | %s; %v in all |\n\n", mode, r.elapsed.Round(time.Second))
	fmt.Fprintf(&b, "Numbers are medians over the rounds; ± is the median absolute deviation from the median, relative to it, and “fastest” the best round, which a busy machine disturbs least. Each round runs every scenario once, so a change in the machine's load spreads over all libraries. A two-core machine shared with other work is noisy: compare libraries within one run, not across runs.\n\n")

	fmt.Fprintf(&b, "## Commands\n\n```sh\ncd bench\n")
	for _, c := range r.commands {
		fmt.Fprintf(&b, "%s\n", c)
	}
	fmt.Fprintf(&b, "(cd .. && go run ./examples/quickstart -csv bench/data/quickstart.csv)\n(cd .. && go run ./examples/adaptive -out bench/data/adaptive.csv)\n```\n\n")
	fmt.Fprintf(&b, "By hand, the same comparisons: `cd bench && go test -run '^$' -bench . -benchmem -count 6` (with `REDIS_ADDR` set for the Redis ones; `-benchtime 1x` for the memory and accuracy scenarios). The raw output of this run is [`bench.txt`](bench.txt), readable by benchstat.\n\n")

	fmt.Fprintf(&b, "## Components\n\n| component | version | status |\n|---|---|---|\n")
	versions := moduleVersions(r.benchDir)
	for _, c := range r.components {
		st := "built"
		if !c.built {
			st = "**skipped: " + c.reason + "**"
			if c.detail != "" {
				st += " — `" + strings.ReplaceAll(strings.ReplaceAll(firstLines(c.detail, 2), "\n", " "), "`", "'") + "`"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", c.name, orDash(versions[c.name]), st)
	}
	if len(r.components) == 0 {
		fmt.Fprintf(&b, "| (not probed: rendered from a saved output) | | |\n")
	}
	fmt.Fprintf(&b, "\n")
	for _, l := range peersLeftOut {
		fmt.Fprintf(&b, "- %s\n", l)
	}
	fmt.Fprintf(&b, "\n")

	fmt.Fprintf(&b, "## The issue's bars, on this run\n\n")
	for _, bar := range r.bars {
		fmt.Fprintf(&b, "- **%s** — %s\n", bar.status, bar.title)
		for _, d := range bar.details {
			fmt.Fprintf(&b, "  - %s\n", d)
		}
	}
	fmt.Fprintf(&b, "\n")

	if len(r.charts) > 0 {
		fmt.Fprintf(&b, "## Charts\n\n")
		for _, c := range r.charts {
			rel, _ := filepath.Rel(r.opts.out, c.path)
			fmt.Fprintf(&b, "### %s\n\n![%s](%s)\n\n", c.title, c.title, filepath.ToSlash(rel))
		}
	}
	if r.quickstartErr != "" {
		fmt.Fprintf(&b, "Quickstart chart: %s\n\n", r.quickstartErr)
	}
	if r.adaptiveErr != "" {
		fmt.Fprintf(&b, "Adaptive chart: %s\n\n", r.adaptiveErr)
	}

	fmt.Fprintf(&b, "## Scenarios\n\n")
	for _, s := range scenarios {
		libs := p.libraries(s.id)
		if len(libs) == 0 {
			if why, ok := p.skipped[s.id]; ok {
				fmt.Fprintf(&b, "### %s\n\n%s\n\n%s\n\n", s.title, s.what, why)
			}
			continue
		}
		fmt.Fprintf(&b, "### %s\n\n`Benchmark%s`. %s\n\n", s.title, s.id, s.what)
		b.WriteString(r.scenarioTable(s.id, libs))
		b.WriteString("\n")
	}

	fmt.Fprintf(&b, "## The libraries and their semantics\n\n")
	for _, n := range libraryNotes {
		fmt.Fprintf(&b, "- **%s** — %s\n", n.lib, n.note)
	}
	fmt.Fprintf(&b, "\nEvery library is configured with the same quota in each scenario; the Redis libraries share one client configuration (a pool of 64 connections, context deadlines honoured) and one server. Keys carry a per-run prefix and are deleted afterwards; nothing is flushed.\n")
	if len(p.notes) > 0 {
		fmt.Fprintf(&b, "\n## Runner notes\n\n")
		for _, n := range p.notes {
			fmt.Fprintf(&b, "- `%s`\n", n)
		}
	}
	return b.String()
}

// scenarioTable renders one scenario's libraries.
func (r *report) scenarioTable(id string, libs []string) string {
	p := r.parsed
	var b strings.Builder
	switch id {
	case "MemoryPerKey", "RedisMemoryPerKey":
		fmt.Fprintf(&b, "| library | bytes per key | ± | Redis keys per key |\n|---|---:|---:|---:|\n")
		for _, lib := range libs {
			res, ok := p.get(id, lib, "B/key")
			if !ok {
				fmt.Fprintf(&b, "| %s | %s | | |\n", lib, skipReason(p, id, lib))
				continue
			}
			med, spread, _, _ := res.median("B/key")
			rk := ""
			if v, _, _, ok := res.median("rkeys/key"); ok {
				rk = fmtNum(v)
			}
			fmt.Fprintf(&b, "| %s | %.0f | %s | %s |\n", lib, med, pct(spread), rk)
		}
	case "ClusterHotKey":
		fmt.Fprintf(&b, "| library | busiest master's share of script time | (most, any round) | script µs per decision | decisions/s |\n|---|---:|---:|---:|---:|\n")
		for _, lib := range libs {
			res, ok := p.get(id, lib, "busiest-%")
			if !ok {
				fmt.Fprintf(&b, "| %s | %s | | | |\n", lib, skipReason(p, id, lib))
				continue
			}
			share, _, _, _ := res.median("busiest-%")
			most, _ := res.max("busiest-%")
			us, _, _, _ := res.median("script-µs/op")
			rate, _, _, _ := res.median("decisions/s")
			fmt.Fprintf(&b, "| %s | %.1f%% | %.1f%% | %.2f | %s |\n", lib, share, most, us, fmtNum(rate))
		}
	case "Accuracy":
		fmt.Fprintf(&b, "| library | admitted (median) | admitted (most, any round) | errors (most) | within the quota |\n|---|---:|---:|---:|---|\n")
		for _, lib := range libs {
			res, ok := p.get(id, lib, "admitted")
			if !ok {
				fmt.Fprintf(&b, "| %s | %s | | | |\n", lib, skipReason(p, id, lib))
				continue
			}
			med, _, _, _ := res.median("admitted")
			most, _ := res.max("admitted")
			errs, _ := res.max("errors")
			ok2 := "yes"
			if most > 100 {
				ok2 = "**no: over-admits**"
			} else if most < 100 {
				ok2 = fmt.Sprintf("yes (under by %.0f)", 100-most)
			}
			fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.0f | %s |\n", lib, med, most, errs, ok2)
		}
	default:
		rate := strings.Contains(id, "64Goroutines")
		fmt.Fprintf(&b, "| library | ns/op | ± | fastest | B/op | allocs/op | vs floodgate |")
		if rate {
			fmt.Fprintf(&b, " decisions/s |")
		}
		fmt.Fprintf(&b, "\n|---|---:|---:|---:|---:|---:|---:|")
		if rate {
			fmt.Fprintf(&b, "---:|")
		}
		fmt.Fprintf(&b, "\n")
		ref := 0.0
		if res, ok := p.get(id, libs[0], "ns/op"); ok {
			ref, _, _, _ = res.median("ns/op")
		}
		for _, lib := range libs {
			res, ok := p.get(id, lib, "ns/op")
			if !ok {
				fmt.Fprintf(&b, "| %s | %s | | | | | |", lib, skipReason(p, id, lib))
				if rate {
					fmt.Fprintf(&b, " |")
				}
				fmt.Fprintf(&b, "\n")
				continue
			}
			ns, spread, _, _ := res.median("ns/op")
			bop, _, _, _ := res.median("B/op")
			allocs, _, _, _ := res.median("allocs/op")
			vs := ""
			if ref > 0 {
				vs = fmt.Sprintf("%.2fx", ns/ref)
				if ns/ref < 0.1 {
					vs = fmt.Sprintf("%.4fx", ns/ref)
				}
			}
			fastest, _ := res.min("ns/op")
			name := lib
			if f, ok := res.max("failed/op"); ok {
				name += fmt.Sprintf(" (up to %.2g%% of calls failed in a round)", f*100)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |", name, fmtNum(ns), pct(spread), fmtNum(fastest), fmtNum(bop), fmtNum(allocs), vs)
			if rate {
				fmt.Fprintf(&b, " %s |", fmtRate(1e9/ns))
			}
			fmt.Fprintf(&b, "\n")
		}
	}
	return b.String()
}

// readmeSection renders the section proposed for the README: the headline
// tables and the charts, with the command that reproduces them.
func (r *report) readmeSection() string {
	p := r.parsed
	var b strings.Builder
	fmt.Fprintf(&b, "## Performance\n\n")
	fmt.Fprintf(&b, "floodgate against the Go rate limiters you would otherwise use, in one `go test -bench` run of the [`bench/`](bench) module (its own module, so the peers never enter floodgate's dependency graph). Medians of %s on %s, %d CPUs, %s, Redis on loopback; the machine was shared, so read the ratios rather than the absolute numbers. All numbers, the semantics of each library and the commands: [`bench/RESULTS.md`](bench/RESULTS.md).\n\n",
		plural(r.rounds, "round"), orDash(r.machine.CPU), r.machine.CPUs, r.machine.GoVersion)

	fmt.Fprintf(&b, "### In-process: ns per decision (allocs)\n\n| library | one key, admitted | one key, denied | 100,000 keys, parallel | 100,000 keys restored between calls |\n|---|---:|---:|---:|---:|\n")
	ids := []string{"InProcessOneKeyAllowed", "InProcessOneKeyDenied", "InProcess100kKeysParallel", "InProcess100kKeysReclaimed"}
	for _, lib := range unionLibraries(p, ids) {
		fmt.Fprintf(&b, "| %s |", lib)
		for _, id := range ids {
			if res, ok := p.get(id, lib, "ns/op"); ok {
				ns, _, _, _ := res.median("ns/op")
				allocs, _, _, _ := res.median("allocs/op")
				fmt.Fprintf(&b, " %s (%s) |", fmtNum(ns), fmtNum(allocs))
			} else {
				fmt.Fprintf(&b, " – |")
			}
		}
		fmt.Fprintf(&b, "\n")
	}
	fmt.Fprintf(&b, "\n")

	rids := []string{"RedisSerial", "Redis64Goroutines"}
	if libs := unionLibraries(p, rids); len(libs) > 0 && anyMeasured(p, rids, libs) {
		fmt.Fprintf(&b, "### Redis (baseline-ping is a PING, the floor, not a limiter)\n\n| library | latency, one at a time (allocs) | throughput, 64 goroutines (allocs) | 512 goroutines, default-options client |\n|---|---:|---:|---:|\n")
		for _, lib := range libs {
			fmt.Fprintf(&b, "| %s |", lib)
			if res, ok := p.get("RedisSerial", lib, "ns/op"); ok {
				ns, _, _, _ := res.median("ns/op")
				allocs, _, _, _ := res.median("allocs/op")
				fmt.Fprintf(&b, " %.1f µs (%s) |", ns/1e3, fmtNum(allocs))
			} else {
				fmt.Fprintf(&b, " – |")
			}
			if res, ok := p.get("Redis64Goroutines", lib, "ns/op"); ok {
				ns, _, _, _ := res.median("ns/op")
				allocs, _, _, _ := res.median("allocs/op")
				fmt.Fprintf(&b, " %s (%s) |", fmtRate(1e9/ns), fmtNum(allocs))
			} else {
				fmt.Fprintf(&b, " – |")
			}
			if res, ok := p.get("RedisFanIn512", lib, "ns/op"); ok {
				ns, _, _, _ := res.median("ns/op")
				worst, _ := res.max("timeouts/op")
				fmt.Fprintf(&b, " %s, %.2f%% timeouts at most |", fmtRate(1e9/ns), 100*worst)
			} else {
				fmt.Fprintf(&b, " – |")
			}
			fmt.Fprintf(&b, "\n")
		}
		fmt.Fprintf(&b, "\n")
		if one, ok := p.get("RedisLimits64Goroutines", "floodgate", "ns/op"); ok {
			if two, ok := p.get("RedisLimits64Goroutines", "floodgate-limits2", "ns/op"); ok {
				oneNs, _, _, _ := one.median("ns/op")
				twoNs, _, _, _ := two.median("ns/op")
				allocs, _, _, _ := two.median("allocs/op")
				fmt.Fprintf(&b, "A `Limits` of two limits on Redis at 64 goroutines: %s (%s allocs per decision), against %s for one limit (%.2fx).\n\n", fmtRate(1e9/twoNs), fmtNum(allocs), fmtRate(1e9/oneNs), oneNs/twoNs)
			}
		}
		if res, ok := p.get("RedisInflightContention", "floodgate", "held/8"); ok {
			held, _, _, _ := res.median("held/8")
			fmt.Fprintf(&b, "package inflight on Redis, 8 stores × 64 goroutines on one key of limit 8, holds of 50 ms: the holders held %.2f of the 8 slots on average.\n\n", held)
		}
	} else {
		fmt.Fprintf(&b, "### Redis\n\nNot measured in this run (REDIS_ADDR not set).\n\n")
	}
	lids := []string{"Lease64GoroutinesOneKey", "Lease64Goroutines1000Keys"}
	if libs := unionLibraries(p, lids); anyMeasured(p, lids, libs) {
		fmt.Fprintf(&b, "### Lease layer against plain Redis, 64 goroutines: decisions per second\n\n| library | one hot key | 1,000 keys |\n|---|---:|---:|\n")
		for _, lib := range libs {
			fmt.Fprintf(&b, "| %s |", lib)
			for _, id := range lids {
				if res, ok := p.get(id, lib, "ns/op"); ok {
					ns, _, _, _ := res.median("ns/op")
					fmt.Fprintf(&b, " %s |", fmtRate(1e9/ns))
				} else {
					fmt.Fprintf(&b, " – |")
				}
			}
			fmt.Fprintf(&b, "\n")
		}
		fmt.Fprintf(&b, "\n")
	}
	mids := []string{"MemoryPerKey", "RedisMemoryPerKey"}
	if libs := unionLibraries(p, mids); anyMeasured(p, mids, libs) {
		fmt.Fprintf(&b, "### Memory per key, bytes\n\n| library | in-process heap | Redis MEMORY USAGE |\n|---|---:|---:|\n")
		for _, lib := range libs {
			fmt.Fprintf(&b, "| %s |", lib)
			for _, id := range mids {
				if res, ok := p.get(id, lib, "B/key"); ok {
					v, _, _, _ := res.median("B/key")
					fmt.Fprintf(&b, " %.0f |", v)
				} else {
					fmt.Fprintf(&b, " – |")
				}
			}
			fmt.Fprintf(&b, "\n")
		}
		fmt.Fprintf(&b, "\nIn-process: `cd bench && go test -run '^$' -bench '^BenchmarkMemoryPerKey$' -benchtime 1x .`\n(xtimerate is x/time/rate limiters in a `sync.Map`, as users key them;\nhttprate keeps a 64-bit hash of each key, not the key). Redis:\n`BenchmarkRedisMemoryPerKey` with `REDIS_ADDR` set.\n\n")
	}
	if libs := p.libraries("Accuracy"); anyMeasured(p, []string{"Accuracy"}, libs) {
		fmt.Fprintf(&b, "### Accuracy: 4 instances on one Redis, 1,000 concurrent requests, quota 100\n\n| library | most admitted in a round |\n|---|---:|\n")
		for _, lib := range libs {
			if res, ok := p.get("Accuracy", lib, "admitted"); ok {
				most, _ := res.max("admitted")
				fmt.Fprintf(&b, "| %s | %.0f |\n", lib, most)
			}
		}
		fmt.Fprintf(&b, "\n")
	}
	for _, c := range r.charts {
		rel, _ := filepath.Rel(filepath.Dir(r.benchDir), c.path)
		if r.opts.out != r.benchDir {
			rel = filepath.ToSlash(filepath.Join("bench", "charts", filepath.Base(c.path)))
		}
		fmt.Fprintf(&b, "![%s](%s)\n\n", c.title, filepath.ToSlash(rel))
	}
	fmt.Fprintf(&b, "Reproduce (from the repository root; the Redis scenarios skip without `REDIS_ADDR`):\n\n```sh\neval \"$(bash .ci/redis.sh start)\"\n(cd bench && go run ./cmd/report)          # about %s; -short: under two minutes\n```\n", estimateFull(r))
	return b.String()
}

// estimateFull is how long a full run takes, from this run.
func estimateFull(r *report) string {
	if r.opts.short || r.elapsed == 0 {
		return "15 minutes"
	}
	return plural(int(r.elapsed.Round(time.Minute)/time.Minute), "minute")
}

// plural returns "1 round" or "6 rounds".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func unionLibraries(p *parsed, ids []string) []string {
	seen := map[string]bool{}
	var libs []string
	for _, id := range ids {
		for _, l := range p.libraries(id) {
			if !seen[l] {
				seen[l] = true
				libs = append(libs, l)
			}
		}
	}
	return libs
}

func anyMeasured(p *parsed, ids, libs []string) bool {
	for _, id := range ids {
		for _, l := range libs {
			if _, ok := p.get(id, l, "ns/op"); ok {
				return true
			}
			if _, ok := p.get(id, l, "admitted"); ok {
				return true
			}
			if _, ok := p.get(id, l, "B/key"); ok {
				return true
			}
		}
	}
	return false
}

// printSummary prints the bars and the skips.
func (r *report) printSummary(w io.Writer) {
	fmt.Fprintf(w, "\n== bars\n")
	for _, b := range r.bars {
		fmt.Fprintf(w, "%-12s %s\n", b.status, b.title)
		for _, d := range b.details {
			fmt.Fprintf(w, "             %s\n", d)
		}
	}
	byReason := map[string][]string{}
	for name, why := range r.parsed.skipped {
		if strings.Contains(name, "/") {
			byReason[why] = append(byReason[why], name)
		}
	}
	reasons := make([]string, 0, len(byReason))
	for why := range byReason {
		reasons = append(reasons, why)
	}
	sort.Strings(reasons)
	if len(reasons) > 0 {
		fmt.Fprintf(w, "\n== skipped\n")
	}
	for _, why := range reasons {
		names := byReason[why]
		sort.Strings(names)
		fmt.Fprintf(w, "%s (%d): %s\n", why, len(names), strings.Join(names, ", "))
	}
	for name, why := range r.parsed.failed {
		fmt.Fprintf(w, "FAILED %s: %s\n", name, why)
	}
}

// moduleVersions maps component names to the versions in the bench
// module's build list.
func moduleVersions(benchDir string) map[string]string {
	out := map[string]string{}
	mods := map[string]string{
		"golang.org/x/time/rate":             "golang.org/x/time",
		"github.com/sethvargo/go-limiter":    "github.com/sethvargo/go-limiter",
		"github.com/ulule/limiter/v3":        "github.com/ulule/limiter/v3",
		"github.com/go-redis/redis_rate/v10": "github.com/go-redis/redis_rate/v10",
		"go.uber.org/ratelimit":              "go.uber.org/ratelimit",
		"github.com/go-chi/httprate":         "github.com/go-chi/httprate",
	}
	for name, mod := range mods {
		if v, err := goCmd(benchDir, "list", "-m", "-f", "{{.Version}}", mod); err == nil {
			out[name] = strings.TrimSpace(string(v))
		}
	}
	for _, c := range components {
		if c.floodgate {
			out[c.name] = "this checkout"
		}
	}
	if v, err := goCmd(benchDir, "list", "-m", "-f", "{{.Version}}", "github.com/redis/go-redis/v9"); err == nil {
		out["go-redis"] = strings.TrimSpace(string(v))
	}
	return out
}

func pct(f float64) string { return fmt.Sprintf("%.0f%%", f*100) }

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

// redisBars judges issue 24's bars on floodgate's Redis store, as users
// get it (redisstore.New(c, nil)): at least twice redis_rate's decisions
// per second at 64 goroutines, serial latency within 5% of the unbatched
// store's and at most redis_rate's, at most 8 allocations per decision,
// a Limits of two at least 0.8x one limit's decisions per second with at
// most 12 allocations, and at most one decision in a thousand timed out
// under fan-in.
func (r *report) redisBars() {
	p := r.parsed
	med := func(id, lib, unit string) (float64, bool) {
		res, ok := p.get(id, lib, unit)
		if !ok {
			return 0, false
		}
		v, _, _, ok := res.median(unit)
		return v, ok
	}
	judge := func(title string, ok bool, details ...string) {
		b := barResult{title: title, details: details}
		switch {
		case details == nil:
			b.details = []string{"not measured"}
		case ok:
			b.status = pass
		default:
			b.status = fail
		}
		r.bars = append(r.bars, b)
	}

	if fg, ok1 := med("Redis64Goroutines", "floodgate", "ns/op"); ok1 {
		if rr, ok2 := med("Redis64Goroutines", "redis_rate", "ns/op"); ok2 {
			judge("floodgate's default Redis store makes at least 2x redis_rate's decisions/s at 64 goroutines", rr >= 2*fg,
				fmt.Sprintf("floodgate %s ns/op, redis_rate %s ns/op: %.2fx redis_rate's decisions/s", fmtNum(fg), fmtNum(rr), rr/fg))
		} else {
			judge("floodgate's default Redis store makes at least 2x redis_rate's decisions/s at 64 goroutines", false)
		}
	} else {
		judge("floodgate's default Redis store makes at least 2x redis_rate's decisions/s at 64 goroutines", false)
	}

	title := "floodgate's default Redis store, serial: within 5% of the unbatched store's latency and at most redis_rate's"
	fg, ok1 := med("RedisSerial", "floodgate", "ns/op")
	ub, ok2 := med("RedisSerial", "floodgate-unbatched", "ns/op")
	rr, ok3 := med("RedisSerial", "redis_rate", "ns/op")
	if ok1 && ok2 && ok3 {
		judge(title, fg <= 1.05*ub && fg <= rr,
			fmt.Sprintf("floodgate %s ns/op: %.3fx floodgate-unbatched's %s, %.3fx redis_rate's %s", fmtNum(fg), fg/ub, fmtNum(ub), fg/rr, fmtNum(rr)))
	} else {
		judge(title, false)
	}

	var lines []string
	okAll := true
	for _, id := range []string{"RedisSerial", "Redis64Goroutines"} {
		if a, ok := med(id, "floodgate", "allocs/op"); ok {
			lines = append(lines, fmt.Sprintf("%s: %s allocs/op", id, fmtNum(a)))
			okAll = okAll && a <= 8
		}
	}
	judge("floodgate's default Redis store: at most 8 allocations per decision", okAll && lines != nil, lines...)

	title = "a Limits of two on Redis: at least 0.8x one limit's decisions/s at 64 goroutines, at most 12 allocations"
	one, ok1 := med("RedisLimits64Goroutines", "floodgate", "ns/op")
	two, ok2 := med("RedisLimits64Goroutines", "floodgate-limits2", "ns/op")
	allocs, ok3 := med("RedisLimits64Goroutines", "floodgate-limits2", "allocs/op")
	if ok1 && ok2 && ok3 {
		judge(title, one/two >= 0.8 && allocs <= 12,
			fmt.Sprintf("Limits of two %s ns/op, one limit %s ns/op: %.2fx one limit's decisions/s; %s allocs/op", fmtNum(two), fmtNum(one), one/two, fmtNum(allocs)))
	} else {
		judge(title, false)
	}

	title = "512 goroutines on a default-options client: at most 0.1% of decisions time out"
	if res, ok := p.get("RedisFanIn512", "floodgate", "ns/op"); ok {
		worst, _ := res.max("timeouts/op")
		judge(title, worst <= 0.001, fmt.Sprintf("at most %.4f%% timed out in a round", 100*worst))
	} else {
		judge(title, false)
	}
}

// hotKeyBar judges issue 25's bar on one hot key on the Cluster: split
// over 16 shards, the busiest master's share of the script time is at
// most 45% in every round (100% unsharded).
func (r *report) hotKeyBar() {
	const id = "ClusterHotKey"
	b := barResult{title: "one hot key on the 3-master Cluster: the busiest master's share of script time at most 45% at K = 16 (every round)"}
	res, ok := r.parsed.get(id, "floodgate-shard16", "busiest-%")
	if !ok {
		b.details = []string{"not measured (REDIS_CLUSTER_ADDRS unset?)"}
		r.bars = append(r.bars, b)
		return
	}
	most, _ := res.max("busiest-%")
	b.status = pass
	if most > 45 {
		b.status = fail
	}
	line := fmt.Sprintf("K = 16: at most %.1f%% in a round", most)
	if un, ok := r.parsed.get(id, "floodgate", "busiest-%"); ok {
		least, _ := un.min("busiest-%")
		line += fmt.Sprintf("; unsharded: at least %.1f%%", least)
	}
	b.details = []string{line}
	r.bars = append(r.bars, b)
}

// oneKeyBar judges issue 24's bar on memstore's one-key decision: at most
// 0.8x the time of the fastest peer that can deny, and at most 0.9x uber's
// pacer (which cannot), in the same run.
func (r *report) oneKeyBar() {
	const id = "InProcessOneKeyAllowed"
	p := r.parsed
	b := barResult{title: "memstore, one key admitted: at most 0.8x the fastest peer that can deny, at most 0.9x uber's"}
	fg, ok := p.get(id, "floodgate", "ns/op")
	if !ok {
		b.details = []string{"floodgate not measured"}
		r.bars = append(r.bars, b)
		return
	}
	fgNs, _, _, _ := fg.median("ns/op")
	best, bestLib := 0.0, ""
	uber := 0.0
	for _, lib := range p.libraries(id) {
		if strings.HasPrefix(lib, "floodgate") {
			continue
		}
		res, ok := p.get(id, lib, "ns/op")
		if !ok {
			continue
		}
		ns, _, _, _ := res.median("ns/op")
		if lib == "uber" {
			uber = ns
			continue
		}
		if bestLib == "" || ns < best {
			best, bestLib = ns, lib
		}
	}
	if bestLib == "" || uber == 0 {
		b.details = []string{"peers not measured"}
		r.bars = append(r.bars, b)
		return
	}
	b.status = pass
	if fgNs > 0.8*best || fgNs > 0.9*uber {
		b.status = fail
	}
	b.details = append(b.details, fmt.Sprintf("floodgate %s ns/op: %.2fx %s's %s, %.2fx uber's %s", fmtNum(fgNs), fgNs/best, bestLib, fmtNum(best), fgNs/uber, fmtNum(uber)))
	r.bars = append(r.bars, b)
}
