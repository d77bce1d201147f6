package redisstore

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/step"
)

// TestBatchScript sends one hand-made batch through the batcher and checks
// that every decision in it gets the outcome it gets alone, made in the
// batch's order: one key several times, every algorithm, takes up to n,
// give-backs and charges, checks (which leave the decisions after them in
// the call writing), a key holding another type and a corrupt state (only
// their own decisions fail), and Limits decisions (a call each, in the same
// pipeline), on Redis TIME and on the client's clock. On a Cluster the
// batch splits by hash slot, and the decisions on one key still share a
// call.
func TestBatchScript(t *testing.T) {
	clients := map[string]redis.UniversalClient{"standalone": newServer(t).client(t)}
	if addrs := os.Getenv("REDIS_CLUSTER_ADDRS"); addrs != "" {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ","), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		clients["cluster"] = c
	}
	tb := floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: 3}
	lb := floodgate.LeakyBucket{Rate: 1, Per: time.Hour, Capacity: 2}
	fw := floodgate.FixedWindow{Limit: 4, Window: time.Hour}
	sw := floodgate.SlidingWindow{Limit: 2, Window: time.Hour}
	sl := floodgate.SlidingLog{Limit: 2, Window: time.Hour}
	take := func(n int64) floodgate.Request { return floodgate.Request{Op: floodgate.OpTake, N: n} }
	upTo := func(n int64) floodgate.Request { return floodgate.Request{Op: floodgate.OpTakeUpTo, N: n} }
	start := time.Now() // the client's clock, when the test uses it
	refund := func(n int64) floodgate.Request {
		return floodgate.Request{Op: floodgate.OpSettle, N: -n, At: start}
	}
	check := func(r floodgate.Request) floodgate.Request {
		r.Check = true
		return r
	}
	ls := floodgate.Limits{floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: 2}, sl}
	steps := []batchStep{
		{"a", tb, take(1)}, {"b", fw, take(3)}, {"a", tb, check(take(2))}, {"a", tb, take(1)},
		{"wrongtype", tb, take(1)},
		{"a", tb, take(2)}, // one token left: denied
		{"a", tb, upTo(5)}, // grants the last one
		{"b", fw, take(2)}, // one unit left: denied
		{"a", tb, refund(2)},
		{"corrupt", tb, take(1)},
		{"a", tb, take(2)}, // the refunded tokens
		{"c", lb, take(1)}, {"c", lb, take(1)}, {"c", lb, take(1)},
		{"d", sw, take(1)}, {"d", sw, upTo(3)}, {"d", sw, take(1)},
		{"e", sl, take(1)}, {"e", sl, check(take(1))}, {"e", sl, take(1)}, {"e", sl, take(1)}, {"e", sl, refund(1)}, {"e", sl, take(1)},
		{"l", ls, take(1)}, {"l", ls, check(take(1))}, {"l", ls, take(1)}, {"l", ls, take(1)}, // denied
		// Limits in one batch call: a reservation (each limit takes again
		// at the later instant, its TTLs shifted), then decisions after it
		// in the same call, which must not inherit the shift.
		{"m", ls, take(2)}, {"m", ls, floodgate.Request{Op: floodgate.OpTake, N: 1, MaxDelay: 3 * time.Hour}},
		{"n", ls, upTo(3)}, {"n", ls, refund(1)}, {"n", ls, take(1)},
		{"b", fw, upTo(9)},
	}
	for _, clock := range []string{"redis", "client"} {
		for name, c := range clients {
			t.Run(clock+"/"+name, func(t *testing.T) {
				testBatchScript(t, c, name == "cluster", clock == "client", start, steps)
			})
		}
	}
}

func testBatchScript(t *testing.T, c redis.UniversalClient, cluster, clientClock bool, start time.Time, steps []batchStep) {
	ctx := context.Background()
	var opts Options
	now := ""
	if clientClock {
		opts.Now = func() time.Time { return start }
		now = strconv.FormatInt(start.UnixNano(), 10)
	}
	alone := newStore(t, c, &opts)
	opts.BatchSize = 64
	batched := newStore(t, c, &opts)
	for _, s := range []*Store{batched, alone} {
		require.NoError(t, c.LPush(ctx, s.Key(testName, "wrongtype", step.KindTokenBucket), "x").Err())
		require.NoError(t, c.Set(ctx, s.Key(testName, "corrupt", step.KindTokenBucket), "garbage", time.Minute).Err())
	}
	batch := make([]*pending, len(steps))
	algos := make([]algo, len(steps))
	for i, st := range steps {
		a, err := resolve(st.alg)
		require.NoError(t, err)
		algos[i] = a
		batch[i] = &pending{ctx: ctx, prog: a.prog(), args: a.args(now, time.Now(), st.req, batched.marginMs), done: make(chan struct{}, 1)}
		if ls, ok := st.alg.(floodgate.Limits); ok {
			batch[i].keys = limitKeys(batched, st.key, ls)
			batch[i].key[0] = batch[i].keys[0]
		} else {
			batch[i].key[0] = batched.Key(testName, st.key, a.kind)
		}
	}
	// Every algorithm shares a call on one server; on a Cluster,
	// each key's decisions do. Each node's batcher takes the decisions
	// on its keys.
	byNode := map[*batcher][]*pending{}
	var order []*batcher
	for _, p := range batch {
		n, err := batched.nodeFor(ctx, p.key[0])
		require.NoError(t, err)
		if _, ok := byNode[n.batch]; !ok {
			order = append(order, n.batch)
		}
		byNode[n.batch] = append(byNode[n.batch], p)
	}
	calls, largest := 0, 0
	for _, b := range order {
		for _, g := range b.groups(byNode[b], time.Now()) {
			calls++
			largest = max(largest, len(g.members))
		}
	}
	if !cluster {
		require.Equal(t, []int{6, 9}, []int{calls, largest}, "a call per algorithm and one for the 9 Limits decisions, 9 token bucket decisions")
	} else {
		require.GreaterOrEqual(t, largest, 6, "the decisions on key a")
	}
	for _, b := range order {
		b.exec(byNode[b])
	}
	for i, st := range steps {
		p := batch[i]
		<-p.done
		var got floodgate.Result
		_, err := classify(ctx, p.err)
		if err == nil {
			got, err = algos[i].decode(p.reply, st.req, nil)
		}
		want, wantErr := applyOnce(ctx, alone, st.key, st.alg, st.req)
		if wantErr != nil {
			require.ErrorIs(t, err, ErrReply, "step %d (%s): alone %v", i, st.key, wantErr)
			require.ErrorIs(t, wantErr, ErrReply)
			continue
		}
		require.NoError(t, err, "step %d (%s)", i, st.key)
		require.WithinDuration(t, time.Now(), got.At, time.Minute, "step %d: the server's TIME", i)
		require.Equal(t, []any{want.Allowed, want.Granted, want.Remaining}, []any{got.Allowed, got.Granted, got.Remaining}, "step %d (%s %v %+v)", i, st.key, st.alg, st.req)
		if clientClock {
			require.Equal(t, want, got, "step %d: the same instant, the same Result", i)
		}
	}
	// The TTLs the batch wrote are the ones deciding alone writes: a
	// Limits reservation's shift of its TTLs stays with its decision.
	for _, st := range steps {
		ls, ok := st.alg.(floodgate.Limits)
		if !ok {
			continue
		}
		bk, ak := limitKeys(batched, st.key, ls), limitKeys(alone, st.key, ls)
		for j := range bk {
			bt, err := c.PTTL(ctx, bk[j]).Result()
			require.NoError(t, err)
			at, err := c.PTTL(ctx, ak[j]).Result()
			require.NoError(t, err)
			require.InDelta(t, float64(at), float64(bt), float64(time.Minute), "the TTL of %s's limit %d, batched and alone", st.key, j)
		}
	}
}

type batchStep struct {
	key string
	alg floodgate.Algorithm
	req floodgate.Request
}

// TestBatchReplyOfWrongForm runs a batch script that answers with too few
// replies, or with no array: every decision of the batch fails with
// ErrReply, as an answer of Redis (not a failure for the breaker or the
// failure policy).
func TestBatchReplyOfWrongForm(t *testing.T) {
	srv := newServer(t)
	s := newStore(t, srv.client(t), &Options{BatchSize: 8})
	alg := floodgate.TokenBucket{Rate: 1, Per: time.Hour, Burst: 5}
	a, err := resolve(alg)
	require.NoError(t, err)
	saved := batchPrograms[a.prog()]
	defer func() { batchPrograms[a.prog()] = saved }()
	ctx := context.Background()
	for _, reply := range []string{"return {'1 2 0 3 1 1'}", "return 'x'"} {
		batchPrograms[a.prog()] = newProgram(reply)
		batch := make([]*pending, 2)
		for i := range batch {
			batch[i] = &pending{ctx: ctx, prog: a.prog(), key: [1]string{s.Key(testName, "k", a.kind)}, args: a.args("", time.Now(), floodgate.Request{Op: floodgate.OpTake, N: 1}, s.marginMs), done: make(chan struct{}, 1)}
		}
		s.single.batch.exec(batch)
		for _, p := range batch {
			<-p.done
			o, err := classify(ctx, p.err)
			require.ErrorIs(t, err, ErrReply, "%s", reply)
			require.ErrorIs(t, err, floodgate.ErrUnavailable)
			require.Equal(t, succeeded, o, "%s: Redis answered", reply)
		}
	}
}
