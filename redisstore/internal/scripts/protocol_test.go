package scripts

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/step"
)

// TestArgs sends Args.ARGV to args.lua and checks that the script reads
// each argument under its name, for the three lengths of ARGV.
func TestArgs(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	// The script returns what args.lua read, the instant as a decimal.
	script := redis.NewScript(expand(timeLua) + expand(lib) + expand(argsLua) +
		"\nreturn {op, int(n), int(maxd), int(margin), int(quota), int(period), int(tau), fmt(ts, tns), admitted or '', tostring(dry)}")
	for name, a := range map[string]Args{
		"take on Redis TIME": {Op: floodgate.OpTake, N: 2, MaxDelay: 3, MarginMs: 4, Quota: 5, Period: 6, Tau: 7},
		"client clock":       {Op: floodgate.OpTakeUpTo, N: 12, MaxDelay: 13, MarginMs: 14, Quota: 15, Period: 16, Tau: 17, Now: "1700000000000000018"},
		"refund":             {Op: floodgate.OpSettle, N: -22, MaxDelay: 23, MarginMs: 24, Quota: 25, Period: 26, Tau: 27, Now: "1700000000000000028", At: "1700000000000000029"},
		"charge on TIME":     {Op: floodgate.OpSettle, N: 32, MaxDelay: 33, MarginMs: 34, Quota: 35, Period: 36, Tau: 37, At: "1700000000000000039"},
		"check":              {Op: floodgate.OpTake, Check: true, N: 42, MaxDelay: 43, MarginMs: 44, Quota: 45, Period: 46, Tau: 47},
		"check of a refund":  {Op: floodgate.OpSettle, Check: true, N: -52, MaxDelay: 53, MarginMs: 54, Quota: 55, Period: 56, Tau: 57, At: "1700000000000000059"},
	} {
		t.Run(name, func(t *testing.T) {
			argv := a.ARGV()
			want := map[bool]int{true: 7, false: 8}[a.Now == ""]
			if a.At != "" {
				want = 9
			}
			require.Len(t, argv, want, "ARGV sends the optional arguments only when set")
			v, err := script.Run(ctx, c, []string{"k"}, argv...).Result()
			require.NoError(t, err)
			got, ok := v.([]any)
			require.True(t, ok, "%T", v)
			require.Len(t, got, 10)
			fields := []int64{int64(a.Op), a.N, a.MaxDelay, a.MarginMs, a.Quota, a.Period, a.Tau}
			for i, f := range fields {
				require.Equal(t, strconv.FormatInt(f, 10), got[i], "argument %d", i)
			}
			if a.Now != "" {
				require.Equal(t, a.Now, got[7], "the instant")
			}
			require.Equal(t, a.At, got[8], "the settlement's instant")
			require.Equal(t, strconv.FormatBool(a.Check), got[9], "dry, for a check")
		})
	}
}

// TestLimitsARGV sends Args.LimitsARGV to the arguments limits.lua gives
// each limit's step, and checks that args.lua reads each of them under its
// name, each limit's numbers in place of the decision's, the step a check.
func TestLimitsARGV(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	// limits.lua's take, reduced to the arguments it gives a limit's step,
	// which args.lua then reads.
	src := expand(limits)
	i := strings.Index(src, "  delay = 0\n")
	require.Positive(t, i)
	j := strings.LastIndex(src[:i], "local function take(")
	require.Positive(t, j)
	take := src[j:i] + "  return argv\nend\n"
	script := redis.NewScript(expand(timeLua) + expand(lib) + expand("local units, instant, at = ARGV[ARG_N], ARGV[ARG_NOW], ARGV[ARG_AT]\n"+
		take+`local out = {}
for i = 1, #KEYS do
  local f = function(KEYS, ARGV)
`+expand(argsLua)+`
    return {op, int(n), int(maxd), int(margin), int(quota), int(period), int(tau), fmt(ts, tns), admitted or '', tostring(dry), key}
  end
  out[i] = f({KEYS[i]}, take(i, OP_TAKE_UP_TO, units, ARGV[ARG_MAXDELAY], instant))
end
return out`))
	a := Args{Op: floodgate.OpTakeUpTo, N: 2, MaxDelay: 3, MarginMs: 4, Now: "1700000000000000005", At: "1700000000000000006"}
	ls := []Limit{{Kind: step.KindFixedWindow, Quota: 7, Period: 8, Tau: 9}, {Kind: step.KindSlidingLog, Quota: 10, Period: 11, Tau: 12}}
	argv := a.LimitsARGV(ls)
	require.Len(t, argv, int(numArgs)+limitArgs*len(ls))
	v, err := script.Run(ctx, c, []string{"k1", "k2"}, argv...).Result()
	require.NoError(t, err)
	got, ok := v.([]any)
	require.True(t, ok, "%T", v)
	require.Len(t, got, 2)
	for i, l := range ls {
		want := []any{"1", "2", "3", "4", strconv.FormatInt(l.Quota, 10), strconv.FormatInt(l.Period, 10), strconv.FormatInt(l.Tau, 10), a.Now, a.At, "true", "k" + strconv.Itoa(i+1)}
		require.Equal(t, want, got[i], "limit %d", i)
		require.Equal(t, int64(l.Kind), argv[int(numArgs)+limitArgs*i+limitKind], "limit %d's kind", i)
	}
}

// luaFiles returns the package's Lua files by name.
func luaFiles(t *testing.T) map[string]string {
	t.Helper()
	names, err := filepath.Glob("*.lua")
	require.NoError(t, err)
	files := make(map[string]string, len(names))
	for _, n := range names {
		b, err := os.ReadFile(n)
		require.NoError(t, err)
		files[n] = string(b)
	}
	require.Len(t, files, 19)
	return files
}

// split returns the header of a Lua file, its leading comment lines, and
// the code of the rest, without comments.
func split(src string) (header, code string) {
	lines := strings.Split(src, "\n")
	i := 0
	for i < len(lines) && strings.HasPrefix(lines[i], "--") {
		i++
	}
	var b strings.Builder
	for _, l := range lines[i:] {
		if c, _, _ := strings.Cut(l, "--"); strings.TrimSpace(c) != "" {
			b.WriteString(c + "\n")
		}
	}
	return strings.Join(lines[:i], "\n"), b.String()
}

var argRef = regexp.MustCompile(`(?i:argv)\[(ARG_[A-Z]+)\]`)

// refs returns the argument names that s reads (ARGV[ARG_N]), in order.
func refs(s string) []string {
	var out []string
	for _, m := range argRef.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestProtocolNames checks that the Lua files write none of the protocol's
// values, only their names, which Source replaces: the bounds never, and
// ARGV only by name, in code and comments (but batch.lua's code, which
// reads its own framing of the argument lists).
func TestProtocolNames(t *testing.T) {
	used := map[string]bool{}
	for file, src := range luaFiles(t) {
		for _, w := range name.FindAllString(src, -1) {
			require.Contains(t, names, w, "%s: %s is not a name of the protocol", file, w)
			used[w] = true
		}
		if file == "batch.lua" || file == "limits_batch.lua" {
			// Its code reads its own ARGV, the framing of the lists, by
			// position.
			src, _ = split(src)
		}
		require.NotRegexp(t, `ARGV\[[^A]`, src, "%s reads or documents ARGV by position, not by name", file)
		for _, v := range []string{strconv.FormatInt(MaxUnix, 10), "9e9", strconv.FormatInt(MaxQuota, 10), "2^52"} {
			require.NotContains(t, src, v, "%s writes a bound of the protocol", file)
		}
	}
	for n := range names {
		require.True(t, used[n], "no script uses %s", n)
	}
	for k := step.KindTokenBucket; k <= KindCalendar; k++ {
		for _, src := range []string{Source(k), BatchSource(k)} {
			require.NotRegexp(t, name, src, "%v: a name left in the script", k)
		}
	}
	require.NotRegexp(t, name, LimitsSource(), "a name left in the Limits script")
}

// TestHeaders checks that every Lua file starts with the header STYLE.md
// asks for (KEYS, ARGV, reply, time source), and that the headers document
// the arguments the code reads: args.lua all of them in ARGV's order, each
// algorithm's file what its quota, period, tau and refund instant are, and
// each fast path those it reads.
func TestHeaders(t *testing.T) {
	all := argNames[:]
	perAlgorithm := []string{argNames[argQuota], argNames[argPeriod], argNames[argTau], argNames[argAt]}
	// items returns the arguments a header lists, one a line.
	item := regexp.MustCompile(`(?m)^--\s+ARGV\[(ARG_[A-Z]+)\]\s`)
	items := func(header string) []string {
		var out []string
		for _, m := range item.FindAllStringSubmatch(header, -1) {
			out = append(out, m[1])
		}
		return out
	}
	for file, src := range luaFiles(t) {
		header, code := split(src)
		for _, part := range []string{"KEYS", "ARGV", "Reply:", "Time:"} {
			require.Contains(t, header, part, "%s's header", file)
		}
		switch {
		case file == "args.lua":
			require.Equal(t, all, items(header), "args.lua documents every argument, in ARGV's order")
			require.Equal(t, all, refs(code), "args.lua reads every argument once, in ARGV's order")
		case strings.HasSuffix(file, "_fast.lua"):
			documented := refs(header)
			for _, r := range refs(code) {
				require.Contains(t, documented, r, "%s reads an argument its header does not name", file)
			}
		case slices.Contains([]string{"tokenbucket.lua", "leakybucket.lua", "fixedwindow.lua", "slidingwindow.lua", "slidinglog.lua", "subwindow.lua"}, file):
			require.Equal(t, perAlgorithm, items(header), "%s says what each argument that differs by algorithm is", file)
			require.Empty(t, refs(code), "%s reads ARGV; args.lua does", file)
		}
	}
}
