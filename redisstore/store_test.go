package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/observe"
	"github.com/floodgate-go/floodgate/redisstore/internal/scripts"
	"github.com/floodgate-go/floodgate/step"
)

func TestNewValidatesOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for name, o := range map[string]Options{
		"prefix with a brace":   {Prefix: "a{b"},
		"negative timeout":      {Timeout: -1},
		"negative margin":       {ExpiryMargin: -1},
		"unknown policy":        {OnFailure: FailLocal + 1},
		"NaN share":             {LocalShare: math.NaN()},
		"share above 1":         {LocalShare: 1.5},
		"negative share":        {LocalShare: -0.5},
		"negative threshold":    {BreakerThreshold: -1},
		"negative cooldown":     {BreakerCooldown: -1},
		"negative batch size":   {BatchSize: -1},
		"negative linger":       {BatchLinger: -1},
		"negative pipelines":    {BatchPipelines: -1},
		"negative batch option": {BatchSize: 4, BatchPipelines: -2},
		"negative in flight":    {MaxInFlight: -1},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(c, &o)
			require.ErrorIs(t, err, ErrInvalidOptions)
		})
	}
	for name, o := range map[string]*observe.Observer{
		"negative FailureInterval": {FailureInterval: -time.Second},
		"negative LatencyEvery":    {LatencyEvery: -1},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(c, &Options{Observer: o})
			require.ErrorIs(t, err, ErrInvalidOptions)
			require.ErrorIs(t, err, floodgate.ErrInvalidConfig, "observe.Observer.Validate's error")
		})
	}
	_, err := New(nil, nil)
	require.ErrorIs(t, err, ErrInvalidOptions)

	for _, tc := range []struct {
		o    *Options
		name string
	}{
		{nil, "redis"},
		{&Options{}, DefaultName},
		{&Options{Name: "sessions"}, "sessions"},
		{&Options{Name: "sessions", Observer: &observe.Observer{}}, "sessions"},
	} {
		s, err := New(c, tc.o)
		require.NoError(t, err)
		require.Equal(t, tc.name, s.name, "New(%+v)", tc.o)
		require.Nil(t, s.failTimer, "no OnFailures, no timer")
		require.NoError(t, s.Close())
	}

	s, err := New(c, nil)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close twice")
}

func TestKeys(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	s, err := New(c, nil)
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, "fg:{user:42}:search:tb", s.Key("search", "user:42", step.KindTokenBucket))
	assert.Equal(t, "fg:{user:42}:tb:10/1s:b10:sl", s.Key("tb:10/1s:b10", "user:42", step.KindSlidingLog))

	h, err := New(c, &Options{Prefix: "rl:", HashKeys: true})
	require.NoError(t, err)
	defer h.Close()
	long := strings.Repeat("x", floodgate.MaxKeyLen)
	k := h.Key("n", long, step.KindFixedWindow)
	assert.Len(t, k, len("rl:{}:n:fw")+22)
	assert.True(t, strings.HasPrefix(k, "rl:{") && strings.HasSuffix(k, "}:n:fw"), k)
	assert.Equal(t, k, h.Key("n", long, step.KindFixedWindow), "hashing is deterministic")
	assert.NotEqual(t, k, h.Key("n", long[1:], step.KindFixedWindow))
	assert.NotContains(t, h.Key("n", "a}b{c", step.KindFixedWindow)[4:26], "}", "a hashed key cannot end the hash tag")

	// The limits of a Limits: by name, kind and ordinal, apart from the
	// single algorithms' keys, on the key's hash slot.
	assert.Equal(t, "fg:{user:42}:api:L:tb0", s.LimitKey("api", "user:42", step.KindTokenBucket, 0))
	assert.Equal(t, "fg:{user:42}:api:L:sw3", s.LimitKey("api", "user:42", step.KindSlidingWindow, 3))
	assert.NotEqual(t, s.Key("api", "user:42", step.KindTokenBucket), s.LimitKey("api", "user:42", step.KindTokenBucket, 0))
	assert.Equal(t, slotOf(s.Key("api", "user:42", step.KindTokenBucket)), slotOf(s.LimitKey("api", "user:42", step.KindSlidingLog, 7)))
	assert.Equal(t, slotOf(s.Key("api", "user:42", step.KindTokenBucket)), slotOf(s.Key("other", "user:42", step.KindTokenBucket)))
	hk := h.LimitKey("n", long, step.KindFixedWindow, 1)
	assert.Equal(t, strings.TrimSuffix(k, ":n:fw")+":n:L:fw1", hk, "hashed like Key")

	// No two (name, key, kind, ordinal) share a Redis key, though names
	// and keys may hold ':' and keys '}'.
	seen := map[string]string{}
	for _, name := range []string{"a", "a:L", "a:tb", "a:L:tb0", "L", "tb", "x:y"} {
		for _, key := range []string{"k", "k}:a", "k}:a:L", "}", "k:tb"} {
			for kind := step.KindTokenBucket; kind <= step.KindSlidingLog; kind++ {
				ids := map[string]string{s.Key(name, key, kind): fmt.Sprintf("single %q %q %v", name, key, kind)}
				for ord := range 3 {
					ids[s.LimitKey(name, key, kind, ord)] = fmt.Sprintf("limit %q %q %v %d", name, key, kind, ord)
				}
				for rk, id := range ids {
					if other, dup := seen[rk]; dup {
						t.Errorf("%s and %s share the Redis key %q", id, other, rk)
					}
					seen[rk] = id
				}
			}
		}
	}

	// A Limits' bound keys: the ordinals count each kind from 0.
	b, err := s.Bind("plan", floodgate.Limits{
		floodgate.FixedWindow{Limit: 10, Window: time.Second},
		floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 5},
		floodgate.FixedWindow{Limit: 100, Window: time.Hour},
	})
	require.NoError(t, err)
	assert.Equal(t, []string{":plan:L:fw0", ":plan:L:tb0", ":plan:L:fw1"}, b.(*bound).suffixes, "the ordinals count each kind from 0")
}

// TestApplyRejectsBadInput checks the errors Apply returns before calling
// Redis; the store points at a closed port, so any call would fail.
func TestApplyRejectsBadInput(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	s, err := New(c, nil)
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	tb := floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 5}
	take := floodgate.Request{Op: floodgate.OpTake, N: 1}
	for name, tc := range map[string]struct {
		key  string
		alg  floodgate.Algorithm
		req  floodgate.Request
		want error
	}{
		"empty key":        {"", tb, take, floodgate.ErrEmptyKey},
		"long key":         {strings.Repeat("k", floodgate.MaxKeyLen+1), tb, take, floodgate.ErrKeyTooLong},
		"nil algorithm":    {"k", nil, take, floodgate.ErrInvalidConfig},
		"nil pointer":      {"k", (*floodgate.TokenBucket)(nil), take, floodgate.ErrInvalidConfig},
		"invalid config":   {"k", floodgate.TokenBucket{Rate: 0, Per: time.Second, Burst: 1}, take, floodgate.ErrInvalidConfig},
		"huge quota":       {"k", floodgate.FixedWindow{Limit: 1 << 53, Window: time.Second}, take, floodgate.ErrInvalidConfig},
		"zero n":           {"k", tb, floodgate.Request{Op: floodgate.OpTake}, floodgate.ErrInvalidN},
		"n above quota":    {"k", tb, floodgate.Request{Op: floodgate.OpTake, N: 6}, floodgate.ErrExceedsLimit},
		"negative delay":   {"k", tb, floodgate.Request{Op: floodgate.OpTake, N: 1, MaxDelay: -1}, floodgate.ErrInvalidDelay},
		"unknown op":       {"k", tb, floodgate.Request{Op: 9, N: 1}, floodgate.ErrInvalidConfig},
		"window not in µs": {"k", floodgate.SlidingLog{Limit: 1, Window: time.Microsecond + 1}, take, floodgate.ErrInvalidConfig},
		"empty Limits":     {"k", floodgate.Limits{}, take, floodgate.ErrInvalidConfig},
		"nested Limits":    {"k", floodgate.Limits{tb, floodgate.Limits{tb}}, take, floodgate.ErrInvalidConfig},
		"Limits huge":      {"k", floodgate.Limits{tb, floodgate.FixedWindow{Limit: 1 << 53, Window: time.Second}}, take, floodgate.ErrInvalidConfig},
		"Limits above":     {"k", floodgate.Limits{floodgate.FixedWindow{Limit: 100, Window: time.Second}, tb}, floodgate.Request{Op: floodgate.OpTake, N: 6}, floodgate.ErrExceedsLimit},
		"Limits zero n":    {"k", floodgate.Limits{tb}, floodgate.Request{Op: floodgate.OpSettle, At: t0}, floodgate.ErrInvalidN},
		"Limits empty key": {"", floodgate.Limits{tb}, take, floodgate.ErrEmptyKey},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := applyOnce(ctx, s, tc.key, tc.alg, tc.req)
			require.ErrorIs(t, err, tc.want)
			require.NotErrorIs(t, err, floodgate.ErrUnavailable)
		})
	}
	for _, at := range []time.Time{time.Unix(-1, 0), time.Unix(scripts.MaxUnix, 0), {}} {
		s, err := New(c, &Options{Now: func() time.Time { return at }})
		require.NoError(t, err)
		_, err = applyOnce(ctx, s, "k", tb, take)
		require.ErrorIs(t, err, floodgate.ErrInvalidConfig, "clock at %v", at)
		require.NoError(t, s.Close())
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = applyOnce(canceled, s, "k", tb, take)
	require.ErrorIs(t, err, context.Canceled)
}

// TestPointerConfigs checks that *TokenBucket and friends work like the
// values they point to through floodgate.New, the one place that
// dereferences them, and that the store itself takes values only, as
// memstore does.
func TestPointerConfigs(t *testing.T) {
	srv := newServer(t)
	c := srv.client(t)
	clock := floodgatetest.NewClock(t0)
	s := newStore(t, c, &Options{Now: srv.clock(clock)})
	ctx := context.Background()
	for _, alg := range []floodgate.Algorithm{
		&floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 2},
		&floodgate.LeakyBucket{Rate: 1, Per: time.Second, Capacity: 2},
		&floodgate.FixedWindow{Limit: 2, Window: time.Second},
		&floodgate.SlidingWindow{Limit: 2, Window: time.Second},
		&floodgate.SlidingLog{Limit: 2, Window: time.Second},
	} {
		lim, err := floodgate.New(s, alg, testOpts)
		require.NoError(t, err, "%T", alg)
		res, err := lim.Apply(ctx, "p", floodgate.Request{Op: floodgate.OpTake, N: 1}, nil)
		require.NoError(t, err, "%T", alg)
		assert.True(t, res.Allowed, "%T", alg)
		assert.Equal(t, int64(2), res.Limit, "%T", alg)
		_, err = applyOnce(ctx, s, "p", alg, floodgate.Request{Op: floodgate.OpTake, N: 1})
		assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, "%T through Apply", alg)
	}
}

// TestMismatchIsAnError runs scripts that disagree with the reference
// (a decision flipped, a state written wrong, a malformed reply) and checks
// that Apply fails with ErrMismatch or ErrReply instead of trusting either
// side, and that the failure policy does not hide it.
func TestMismatchIsAnError(t *testing.T) {
	srv := newServer(t)
	c := srv.client(t)
	tb := floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 5}
	sl := floodgate.SlidingLog{Limit: 5, Window: time.Second}
	fw := floodgate.FixedWindow{Limit: 5, Window: time.Second}
	// The spending leaves room for the step checked.
	sw := floodgate.SlidingWindow{Limit: 10, Window: time.Hour}
	// The spending admits one unit into each leaky bucket.
	lb1 := floodgate.LeakyBucket{Rate: 1, Per: time.Second, Capacity: 1}
	lb5 := floodgate.LeakyBucket{Rate: 1, Per: time.Second, Capacity: 5}
	// The spending empties the bucket: a take waits for it, or is denied.
	ls := floodgate.Limits{tb, floodgate.FixedWindow{Limit: 10, Window: time.Hour}}
	for name, tc := range map[string]struct {
		alg      floodgate.Algorithm
		maxDelay time.Duration // of the step checked, once the quota is spent
		from     string        // script text replaced
		to       string
		want     error
		server   bool // on Redis TIME, where the token bucket's fast path runs
	}{
		"decision flipped":    {tb, time.Second, "if (b - tau) + d <= maxd then", "if (b - tau) + d > maxd then", ErrMismatch, false},
		"state off by 1ns":    {tb, time.Second, "new = fmt(add(bs, bns, d))", "new = fmt(add(bs, bns, d + 1))", ErrMismatch, false},
		"granted wrong":       {tb, time.Second, "allowed, granted = 1, n\n    delay", "allowed, granted = 1, n + 1\n    delay", ErrMismatch, false},
		"short reply":         {tb, time.Second, "return {ts, tns, old, new, allowed, granted}", "return {ts, tns, old}", ErrReply, false},
		"not an array":        {tb, time.Second, "return {ts, tns, old, new, allowed, granted}", "return 7", ErrReply, false},
		"state not decimal":   {tb, time.Second, "return {ts, tns, old, new, allowed, granted}", "return {ts, tns, 'x', new, allowed, granted}", ErrReply, false},
		"new state garbage":   {tb, time.Second, "return {ts, tns, old, new, allowed, granted}", "return {ts, tns, old, new .. 'x', allowed, granted}", ErrMismatch, false},
		"instant too large":   {tb, time.Second, "return {ts, tns, old, new, allowed, granted}", "return {ts, 1000000000, old, new, allowed, granted}", ErrReply, false},
		"script error":        {tb, time.Second, "\nlocal key = KEYS[1]\n", "\nerror('floodgate: boom')\n", ErrReply, false},
		"fast flipped":        {tb, time.Second, "admit, later = (b - tau) + d <= maxd", "admit, later = (b - tau) + d > maxd", ErrMismatch, true},
		"fast granted":        {tb, time.Second, "flags = ' 1 ' .. units", "flags = ' 1 ' .. units + 1", ErrMismatch, true},
		"fast denied flags":   {tb, 0, "local flags, new, px = ' 0 0'", "local flags, new, px = ' 1 0'", ErrMismatch, true},
		"fast instant":        {tb, time.Second, "return t[1] .. ' '", "return (t[1] - 1) .. ' '", ErrMismatch, true},
		"fast short reply":    {tb, time.Second, ".. ' ' .. new .. flags", ".. ' ' .. new", ErrReply, true},
		"fast double space":   {tb, time.Second, "t[1] .. ' ' .. t[2]", "t[1] .. '  ' .. t[2]", ErrReply, true},
		"fast long reply":     {tb, time.Second, ".. ' ' .. new .. flags", ".. ' ' .. new .. flags .. ' 0'", ErrReply, true},
		"fw fast granted":     {fw, time.Second, "flags = ' 1 ' .. units", "flags = ' 1 2'", ErrMismatch, true},
		"fast state off":      {tb, time.Second, "string.format('%d%09d', bs + (x - r) / 1e9, r)", "string.format('%d%09d', bs + (x - r) / 1e9, r + 1)", ErrMismatch, true},
		"lb fast overfills":   {lb1, 10 * time.Second, "admit, later = b + d <= tau and", "admit, later = b <= tau and", ErrMismatch, true},
		"lb fast late":        {lb5, time.Second / 2, "and b <= maxd", "and b <= maxd + 1e10", ErrMismatch, true},
		"fw fast flipped":     {fw, time.Second, "if math.max(xo, 0) <= maxd then", "if math.max(xo, 0) > maxd then", ErrMismatch, true},
		"fw fast state off":   {fw, time.Second, "new = string.format('%d%09d:%d', xs, xns, xc)", "new = string.format('%d%09d:%d', xs, xns, xc + 1)", ErrMismatch, true},
		"sw fast flipped":     {sw, 0, "if co <= 0 and n <= (limit - cc)", "if co <= 0 and n > (limit - cc)", ErrMismatch, true},
		"sw fast state off":   {sw, 0, "string.format('%d%09d:%d:%d', cs, cns, cp, cc + n)", "string.format('%d%09d:%d:%d', cs, cns, cp, cc + n + 1)", ErrMismatch, true},
		"log admits late":     {sl, time.Second - 1, "if ao <= maxd then", "if ao <= maxd + 1 then", ErrMismatch, false},
		"limits skip again":   {ls, time.Second, "if all and longest > 0 then", "if all and longest < 0 then", ErrMismatch, false},
		"limits write denial": {ls, 0, "if admitted and not check then", "if true then", ErrMismatch, false},
		"limits step order":   {ls, time.Second, "  reply[#reply + 1] = i\n  reply[#reply + 1] = r", "  reply[#reply + 1] = #KEYS + 1 - i\n  reply[#reply + 1] = r", ErrMismatch, false},
		"limits again at now": {ls, time.Second, "local t = fmt(add(ts, tns, longest))", "local t = fmt(ts, tns)", ErrReply, false},
		"limits fast order":   {ls, 0, "    parts[#parts + 1] = i\n", "    parts[#parts + 1] = #KEYS + 1 - i\n", ErrMismatch, true},
		"limits fast written": {ls, 0, "  local wrote = ' 0 '", "  local wrote = ' 1 '", ErrMismatch, true},
		"limits fast short":   {ls, 0, "    parts[#parts + 1] = r\n", "    parts[#parts + 1] = string.sub(r, 1, #r - 2)\n", ErrMismatch, true},
		"limits fast extra":   {ls, 0, "table.concat(parts, ' ')", "table.concat(parts, ' ') .. ' 3'", ErrMismatch, true},
		"limits fast cut":     {ls, 0, "table.concat(parts, ' ')", "table.concat(parts, ' ', 1, #parts - 1)", ErrReply, true},
		"limits fast spaces":  {ls, 0, "table.concat(parts, ' ')", "table.concat(parts, '  ')", ErrReply, true},
		"log total wrong":     {sl, time.Second - 1, "return {ts, tns, allowed, granted, fmt(fs, fns), at, before, C - B, last or ''}", "return {ts, tns, allowed, granted, fmt(fs, fns), at, before, C - B + 1, last or ''}", ErrMismatch, false},
	} {
		t.Run(name, func(t *testing.T) {
			a, err := resolve(tc.alg)
			require.NoError(t, err)
			kind := a.prog()
			src := programs[kind].src
			require.Contains(t, src, tc.from)
			saved := programs[kind]
			programs[kind] = newProgram(strings.Replace(src, tc.from, tc.to, 1))
			defer func() { programs[kind] = saved }()

			// Spend the quota, then reserve with exactly the delay needed
			// (or 1ns less), where the mutants go wrong.
			ctx := context.Background()
			clock := floodgatetest.NewClock(t0)
			rec := &recorder{}
			opts := &Options{
				Now:       srv.clock(clock),
				OnFailure: FailOpen,
				Observer:  rec.observer(),
			}
			if tc.server {
				// Redis TIME: miniredis' stands still at t0, a real
				// Redis's moves by far less than the unit's second.
				opts.Now = nil
				if srv.mini != nil {
					srv.mini.SetTime(t0)
				}
			}
			s := newStore(t, c, opts)
			programs[kind] = saved
			for range 5 {
				_, err := applyOnce(ctx, s, "k", tc.alg, floodgate.Request{Op: floodgate.OpTake, N: 1})
				require.NoError(t, err)
			}
			programs[kind] = newProgram(strings.Replace(src, tc.from, tc.to, 1))
			_, err = applyOnce(ctx, s, "k", tc.alg, floodgate.Request{Op: floodgate.OpTake, N: 1, MaxDelay: tc.maxDelay})
			require.ErrorIs(t, err, tc.want)
			require.ErrorIs(t, err, floodgate.ErrUnavailable)
			fs := rec.takeFailures(s)
			require.Len(t, fs, 1)
			assert.Equal(t, observe.Failures{Name: DefaultName, Node: s.single.addr, Policy: "error", Count: 1, Err: err}, fs[0], "Redis answered, and FailOpen does not absorb it")
			assert.Equal(t, BreakerClosed, s.BreakerState("k"), "Redis answered: not a breaker failure")
		})
	}
}

func TestErrorsAreTyped(t *testing.T) {
	err := unavailable(ErrTimeout, context.DeadlineExceeded)
	assert.ErrorIs(t, err, floodgate.ErrUnavailable)
	assert.ErrorIs(t, err, ErrTimeout)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.False(t, errors.Is(err, ErrRedis))
}

// TestLimiter runs the store behind floodgate.New, which binds it, and
// checks Close.
func TestLimiter(t *testing.T) {
	srv := newServer(t)
	c := srv.client(t)
	s := newStore(t, c, nil)
	_, err := s.Bind(testName, floodgate.FixedWindow{Limit: 0, Window: time.Second})
	require.ErrorIs(t, err, floodgate.ErrInvalidConfig)

	lim, err := floodgate.New(s, floodgate.SlidingLog{Limit: 3, Window: time.Hour}, testOpts)
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 4 {
		d, err := lim.Allow(ctx, "user")
		require.NoError(t, err)
		require.Equal(t, i < 3, d.Allowed, "Allow #%d", i)
	}
	_, err = lim.Allow(ctx, "")
	require.ErrorIs(t, err, floodgate.ErrEmptyKey)

	require.NoError(t, s.Close())
	_, err = lim.Allow(ctx, "user")
	require.ErrorIs(t, err, floodgate.ErrClosed)
	require.ErrorIs(t, err, floodgate.ErrUnavailable)
	_, err = applyOnce(ctx, s, "user", floodgate.SlidingLog{Limit: 3, Window: time.Hour}, floodgate.Request{Op: floodgate.OpTake, N: 1})
	require.ErrorIs(t, err, floodgate.ErrClosed)
}
