package scripts

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate/step"
)

func TestSource(t *testing.T) {
	head, helpers, args := expand(timeLua), expand(lib), expand(argsLua)
	for _, k := range []step.Kind{step.KindTokenBucket, step.KindLeakyBucket, step.KindFixedWindow, step.KindSlidingWindow, step.KindSlidingLog, KindCalendar} {
		src := Source(k)
		require.True(t, strings.HasPrefix(src, head), "%v starts with time.lua", k)
		i := strings.Index(src, helpers)
		require.Positive(t, i, "%v holds lib.lua after time.lua", k)
		body := args + "\n" + expand(bodies[k])
		require.True(t, strings.HasSuffix(src, "\n"+body), "%v ends with args.lua and its file", k)
		between := src[len(head):i]
		fast := k != step.KindSlidingLog && k != KindCalendar
		require.Equal(t, fast, strings.Contains(between, expand(callFast)), "%v: all but the sliding log call a fast path before lib.lua", k)
		if fast {
			require.True(t, strings.HasPrefix(between, "\n"+expand(fastPaths[k])), "%v's fast path follows time.lua", k)
		} else {
			require.Equal(t, "\n", between, "%v has no fast path", k)
		}
		if k == step.KindTokenBucket || k == step.KindLeakyBucket {
			require.True(t, strings.HasPrefix(between, "\nlocal leaky = "+strconv.FormatBool(k == step.KindLeakyBucket)+"\n"+expand(bucketFast)), "%v sets leaky for bucket_fast.lua", k)
		}

		// The batch script: the same parts, the fast path defined but not
		// called, args.lua and the algorithm's file as the function one,
		// then batch.lua.
		bsrc := BatchSource(k)
		j := strings.Index(bsrc, helpers)
		require.Positive(t, j, "%v's batch script holds lib.lua after time.lua", k)
		require.True(t, strings.HasPrefix(bsrc, head), "%v's batch script starts with time.lua", k)
		require.NotContains(t, bsrc[:j], "fast(KEYS[1]", "%v's batch script calls its fast path per decision", k)
		if fast {
			require.True(t, strings.HasPrefix(src, bsrc[:j]), "%v: the fast path of both scripts", k)
		} else {
			require.Equal(t, head+"\nlocal fast = nil\n\n", bsrc[:j], "%v has no fast path", k)
		}
		require.True(t, strings.HasSuffix(bsrc, "\nlocal function one(KEYS, ARGV)\n"+body+"\nend\n"+expand(batch)), "%v: one, then batch.lua", k)
	}
	// The Limits script: time.lua, every fast path as fasts[kind], its own
	// fast path and call, lib.lua, every algorithm's file after args.lua
	// as run[kind], limits.lua.
	lsrc := LimitsSource()
	require.True(t, strings.HasPrefix(lsrc, head), "the Limits script starts with time.lua")
	i := strings.Index(lsrc, helpers)
	require.Positive(t, i, "the Limits script holds lib.lua")
	for k := step.KindTokenBucket; k <= KindCalendar; k++ {
		if k == step.KindSubWindows {
			// A Limits holds no sliding window with sub-windows.
			require.NotContains(t, lsrc, "run['"+strconv.Itoa(int(k))+"']", "%v in the Limits script", k)
			continue
		}
		if fast := fastPaths[k]; fast != "" {
			require.Contains(t, lsrc[:i], "do\n"+expand(fast)+"\nfasts['"+strconv.Itoa(int(k))+"'] = fast\nend\n", "%v's fast path before lib.lua", k)
		}
		require.Contains(t, lsrc[i:], "run['"+strconv.Itoa(int(k))+"'] = function(KEYS, ARGV)\n"+args+"\n"+expand(bodies[k])+"\nend\n", "%v's file after lib.lua", k)
	}
	require.Contains(t, lsrc[:i], expand(limitsFast)+"\n"+expand(callLimitsFast), "the Limits fast path and its call before lib.lua")
	require.True(t, strings.HasSuffix(lsrc, expand(limits)), "the Limits script ends with limits.lua")

	require.Empty(t, Source(0))
	require.Empty(t, Source(KindCalendar+1))
	require.Empty(t, BatchSource(KindCalendar+1))
}

// harness runs lib.lua's helpers on the instants given, as a script.
const harness = `
local op = ARGV[1]
local s, ns = parse(ARGV[2])
if op == 'roundtrip' then return fmt(s, ns) end
if op == 'add' then return fmt(add(s, ns, tonumber(ARGV[3]))) end
if op == 'sub' then
  local bs, bns = parse(ARGV[3])
  return int(sub(s, ns, bs, bns))
end
if op == 'wstart' then
  local ws, wns = wstart(s, ns, tonumber(ARGV[3]))
  if not ws then return '' end
  return fmt(ws, wns)
end
if op == 'fdiv' then
  local q, r = fdiv(tonumber(ARGV[2]), tonumber(ARGV[3]))
  return {int(q), int(r)}
end
`

// client returns a client of the Redis at REDIS_ADDR, else of a miniredis.
func client(t *testing.T) *redis.Client {
	t.Helper()
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = miniredis.RunT(t).Addr()
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestInstantArithmetic checks lib.lua's exact instant arithmetic, which
// holds int64 nanoseconds as (seconds, nanoseconds) pairs because Lua
// numbers are doubles, against Go's int64 arithmetic.
func TestInstantArithmetic(t *testing.T) {
	c := client(t)
	script := redis.NewScript(expand(timeLua) + expand(lib) + harness)
	ctx := context.Background()
	run := func(args ...any) any {
		t.Helper()
		v, err := script.Run(ctx, c, nil, args...).Result()
		require.NoError(t, err, "%v", args)
		return v
	}
	r := rand.New(rand.NewPCG(1, 2))
	instants := []int64{0, 1, 999_999_999, 1_000_000_000, 1_000_000_001, -1, -999_999_999, -1_000_000_000,
		-1_000_000_001, math.MaxInt64, math.MinInt64, math.MinInt64 + 1, 1_741_964_966_535_897_932, 1 << 53, 1<<53 + 1}
	for range 200 {
		instants = append(instants, r.Int64(), -r.Int64(), 1_700_000_000_000_000_000+r.Int64N(1<<50))
	}
	for _, x := range instants {
		s := strconv.FormatInt(x, 10)
		require.Equal(t, s, run("roundtrip", s), "parse/fmt")
	}
	for range 500 {
		x := 1_700_000_000_000_000_000 + r.Int64N(1<<55) - 1<<54
		d := r.Int64N(1<<54) - 1<<53
		if r.IntN(4) == 0 {
			d = r.Int64N(2_000_000_000) - 1_000_000_000
		}
		require.Equal(t, strconv.FormatInt(x+d, 10), run("add", strconv.FormatInt(x, 10), d), "%d + %d", x, d)
		y := x + d
		require.Equal(t, strconv.FormatInt(y-x, 10), run("sub", strconv.FormatInt(y, 10), strconv.FormatInt(x, 10)), "%d - %d", y, x)
		wu := r.Int64N(1<<52/1000) + 1
		if r.IntN(2) == 0 {
			wu = r.Int64N(1_000_000) + 1
		}
		w := wu * 1000
		want := x - ((x%w)+w)%w
		require.Equal(t, strconv.FormatInt(want, 10), run("wstart", strconv.FormatInt(x, 10), wu), "window start of %d in %d", x, w)
	}
	// fdiv is exact for |a| + b <= 2^53, all its callers need.
	for _, tc := range [][2]int64{{7, 2}, {-7, 2}, {1<<53 - 1, 3}, {-(1<<53 - 4), 3}, {1 << 52, 1<<52 - 1}, {0, 5}, {-5, 5}} {
		q, m := tc[0]/tc[1], tc[0]%tc[1]
		if m < 0 {
			q, m = q-1, m+tc[1]
		}
		require.Equal(t, []any{strconv.FormatInt(q, 10), strconv.FormatInt(m, 10)}, run("fdiv", tc[0], tc[1]), "fdiv(%d, %d)", tc[0], tc[1])
	}
}
