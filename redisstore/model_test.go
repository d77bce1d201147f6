package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/step"
)

// model runs the reference transitions of one algorithm on a state of its own,
// and knows how that state is stored in Redis.
type model struct {
	alg floodgate.Algorithm
	tat int64 // token and leaky bucket
	fw  step.FixedWindowState
	sw  step.SlidingWindowState
	sl  step.SlidingLogState
}

// step runs req on the model's state as a store keeps it: a check keeps
// nothing (step.SlidingLog, which changes its state in place, changes
// nothing for a check).
func (m *model) step(now time.Time, req floodgate.Request) (floodgate.Result, error) {
	var (
		res floodgate.Result
		err error
	)
	next := *m
	switch a := m.alg.(type) {
	case floodgate.TokenBucket:
		next.tat, res, err = step.TokenBucket(a, m.tat, now, req)
	case floodgate.LeakyBucket:
		next.tat, res, err = step.LeakyBucket(a, m.tat, now, req)
	case floodgate.FixedWindow:
		next.fw, res, err = step.FixedWindow(a, m.fw, now, req)
	case floodgate.SlidingWindow:
		next.sw, res, err = step.SlidingWindow(a, m.sw, now, req)
	case floodgate.SlidingLog:
		res, err = step.SlidingLog(a, &m.sl, now, req)
		next.sl = m.sl
	}
	if !req.Check {
		*m = next
	}
	return res, err
}

// horizon returns the time from now until the model's state is equivalent
// to a missing key (<= 0 when it already is): the TTL the script must set,
// before its margin.
func (m *model) horizon(now time.Time) int64 {
	t := now.UnixNano()
	w := int64(m.alg.Policy().Window)
	switch m.alg.(type) {
	case floodgate.TokenBucket, floodgate.LeakyBucket:
		return m.tat - t
	case floodgate.FixedWindow:
		if m.fw.Count > 0 {
			return m.fw.Start + w - t
		}
		return m.fw.Start - t
	case floodgate.SlidingWindow:
		switch {
		case m.sw.Curr > 0:
			return m.sw.Start + 2*w - t
		case m.sw.Prev > 0:
			return m.sw.Start + w - t
		}
		return m.sw.Start - t
	default:
		if last, ok := m.sl.Last(); ok {
			return last + w - t
		}
		return -1
	}
}

// stored returns the model's state in the script's format: a string, or
// for the sliding log its entries "at:n" oldest first.
func (m *model) stored() any {
	switch m.alg.(type) {
	case floodgate.TokenBucket, floodgate.LeakyBucket:
		return strconv.FormatInt(m.tat, 10)
	case floodgate.FixedWindow:
		return fmt.Sprintf("%d:%d", m.fw.Start, m.fw.Count)
	case floodgate.SlidingWindow:
		return fmt.Sprintf("%d:%d:%d", m.sw.Start, m.sw.Prev, m.sw.Curr)
	default:
		entries := []string{}
		for i := range m.sl.Len() {
			e := m.sl.Entry(i)
			entries = append(entries, fmt.Sprintf("%d:%d", e.At, e.N))
		}
		return entries
	}
}

// readStored reads a key's state from Redis in the format of
// model.stored, and reports whether the key exists.
func readStored(t tb, c redis.UniversalClient, key string, kind step.Kind) (any, bool) {
	t.Helper()
	ctx := context.Background()
	if kind != step.KindSlidingLog {
		v, err := c.Get(ctx, key).Result()
		if err == redis.Nil {
			return nil, false
		}
		require.NoError(t, err)
		return v, true
	}
	zs, err := c.ZRangeWithScores(ctx, key, 0, -1).Result()
	require.NoError(t, err)
	if len(zs) == 0 {
		return nil, false
	}
	require.Equal(t, "b", zs[0].Member, "the base is first")
	entries := []string{}
	prev := zs[0].Score
	for _, z := range zs[1:] {
		require.Greater(t, z.Score, prev, "scores grow strictly")
		entries = append(entries, fmt.Sprintf("%v:%d", z.Member, int64(z.Score-prev)))
		prev = z.Score
	}
	return entries, true
}

// checkStored checks that the key holds the model's state with a TTL of
// the model's horizon plus the margin, or is missing because the state is
// equivalent to a missing key. virtual says whether TTLs run on the test's
// clock (miniredis); wrote whether the step wrote the key. The TTL is not
// checked when TTLs run on the wall clock and the key was written earlier.
func checkStored(t tb, c redis.UniversalClient, key string, m *model, now time.Time, margin time.Duration, virtual, wrote bool) {
	t.Helper()
	got, ok := readStored(t, c, key, kindOf(m.alg))
	h := m.horizon(now)
	if !ok {
		require.LessOrEqualf(t, h, int64(0), "key %s is missing, but the reference state %v still matters for %v", key, m.stored(), time.Duration(h))
		return
	}
	require.Equal(t, m.stored(), got, "stored state of %s", key)
	if !virtual && !wrote {
		return
	}
	pttl, err := c.PTTL(context.Background(), key).Result()
	require.NoError(t, err)
	require.Greater(t, pttl, time.Duration(0), "key %s has no TTL", key)
	bound := time.Duration(max(h, 0)).Round(time.Millisecond) + time.Millisecond + margin
	require.LessOrEqualf(t, pttl, bound, "TTL of %s is %v; the state is restored in %v (+ margin %v)", key, pttl, time.Duration(h), margin)
	// The key must also live until its state stops mattering. Checked
	// right after a write: TTLs do not run back when the clock does, and on
	// Redis the wall clock ran a little since the write.
	if !wrote {
		return
	}
	slack := time.Duration(0)
	if !virtual {
		slack = time.Second
	}
	require.GreaterOrEqualf(t, pttl, time.Duration(h)+margin-slack, "TTL of %s is %v; the state matters for %v (+ margin %v)", key, pttl, time.Duration(h), margin)
}

// tb is what the checks need of a *testing.T or a *rapid.T.
type tb interface {
	require.TestingT
	Helper()
}

// rawKey returns what Redis holds at key (its value, or its sorted set with
// scores) and its TTL, to compare a key before and after a step that must
// not change it. The TTL is -2ns for a missing key.
func rawKey(t tb, c redis.UniversalClient, key string) (string, time.Duration) {
	t.Helper()
	ctx := context.Background()
	typ, err := c.Type(ctx, key).Result()
	require.NoError(t, err)
	var v string
	switch typ {
	case "string":
		v, err = c.Get(ctx, key).Result()
		require.NoError(t, err)
	case "zset":
		zs, err := c.ZRangeWithScores(ctx, key, 0, -1).Result()
		require.NoError(t, err)
		v = fmt.Sprint(zs)
	case "none":
	default:
		t.Errorf("%s holds a %s", key, typ)
	}
	pttl, err := c.PTTL(ctx, key).Result()
	require.NoError(t, err)
	return typ + ":" + v, pttl
}

// unchanged checks that key holds what rawKey read before, and that its
// TTL did not grow.
func unchanged(t tb, c redis.UniversalClient, key, before string, ttl time.Duration, format string, args ...any) {
	t.Helper()
	after, attl := rawKey(t, c, key)
	require.Equalf(t, before, after, "%s changed: "+format, append([]any{key}, args...)...)
	require.LessOrEqualf(t, attl, ttl, "the TTL of %s grew: "+format, append([]any{key}, args...)...)
}
