package scripts

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

func TestInflightSource(t *testing.T) {
	src := InflightSource()
	require.True(t, strings.HasPrefix(src, expand(timeLua)), "starts with time.lua")
	require.True(t, strings.HasSuffix(src, "\n"+expand(inflightLua)), "ends with inflight.lua")
	require.NotRegexp(t, name, src, "a name left in the script")
}

// TestInflightScript runs inflight.lua's operations on the client's clock:
// the replies, the scores (expiry in microseconds), the key's TTL, a
// renewal that must not bring a dead hold back, and the dead holds an
// acquire drops before it counts.
func TestInflightScript(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	var b [6]byte
	_, _ = rand.Read(b[:])
	key := "fgtest:scripts:{" + hex.EncodeToString(b[:]) + "}:inflighttest:if"
	t.Cleanup(func() { _ = c.Del(context.Background(), key).Err() })
	script := redis.NewScript(InflightSource())
	const t0 = 1_796_000_000_000_000 // µs
	at := func(us int64) string { return strconv.FormatInt(t0+us, 10) }
	run := func(a InflightArgs) []any {
		t.Helper()
		v, err := script.Run(ctx, c, []string{key}, a.ARGV()...).Result()
		require.NoError(t, err, "%+v", a)
		got, ok := v.([]any)
		require.True(t, ok, "%T", v)
		return got
	}
	acquire := func(holder string, limit int64, now int64) []any {
		return run(InflightArgs{Op: InflightAcquire, Holder: holder, Limit: limit, TTL: 1_000_000, MarginMs: 500, Now: at(now)})
	}
	renew := func(holder string, now int64) []any {
		return run(InflightArgs{Op: InflightRenew, Holder: holder, TTL: 1_000_000, MarginMs: 500, Now: at(now)})
	}
	release := func(holder string) []any { return run(InflightArgs{Op: InflightRelease, Holder: holder}) }

	require.Equal(t, []any{int64(1), int64(1)}, acquire("a", 2, 0))
	require.Equal(t, []any{int64(1), int64(2)}, acquire("b", 2, 10))
	require.Equal(t, []any{int64(0), int64(2)}, acquire("c", 2, 20), "at the limit")
	require.Equal(t, float64(t0+1_000_000), c.ZScore(ctx, key, "a").Val(), "a's expiry")
	pttl := c.PTTL(ctx, key).Val().Milliseconds()
	require.True(t, pttl > 1000 && pttl <= 1500, "PTTL %dms, want the TTL plus the margin", pttl)

	require.Equal(t, []any{int64(1), int64(2)}, renew("a", 900_000))
	require.Equal(t, float64(t0+1_900_000), c.ZScore(ctx, key, "a").Val(), "a's renewed expiry")
	// b expired at 1_000_010: its renewal fails and drops it, and nothing
	// brings it back.
	require.Equal(t, []any{int64(0), int64(1)}, renew("b", 1_000_010))
	require.Equal(t, []any{int64(0), int64(1)}, renew("b", 1_000_011))
	require.Equal(t, []any{int64(1), int64(2)}, acquire("c", 2, 1_000_020))
	require.Equal(t, []any{int64(1), int64(1)}, release("a"))
	require.Equal(t, []any{int64(0), int64(1)}, release("a"), "a second release")
	require.Equal(t, []any{int64(0), int64(1)}, renew("a", 1_000_030), "a released hold")
	// An acquire drops the dead (c expires at 2_000_020) before it counts.
	require.Equal(t, []any{int64(1), int64(1)}, acquire("d", 1, 2_000_020))
	require.Equal(t, []string{"d"}, c.ZRange(ctx, key, 0, -1).Val())

	// A holder id in use is an error, not a second hold.
	_, err := script.Run(ctx, c, []string{key}, InflightArgs{Op: InflightAcquire, Holder: "d", Limit: 5, TTL: 1_000_000, Now: at(2_000_030)}.ARGV()...).Result()
	require.ErrorContains(t, err, "floodgate: holder id d already holds a slot")

	// On Redis TIME.
	require.Equal(t, []any{int64(1), int64(0)}, release("d"))
	v, err := script.Run(ctx, c, []string{key}, InflightArgs{Op: InflightAcquire, Holder: "e", Limit: 1, TTL: 60_000_000}.ARGV()...).Result()
	require.NoError(t, err)
	require.Equal(t, []any{int64(1), int64(1)}, v)
	v, err = script.Run(ctx, c, []string{key}, InflightArgs{Op: InflightRenew, Holder: "e", TTL: 60_000_000}.ARGV()...).Result()
	require.NoError(t, err)
	require.Equal(t, []any{int64(1), int64(1)}, v)
	require.Positive(t, c.PTTL(ctx, key).Val())
}
