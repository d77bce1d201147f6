package redisstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestApplyJoint: a joint step of a 3-a-minute limit on one key and a
// 10-a-minute one on another (envoyproxy/ratelimit #427's group and
// route) admits while both admit and, once the first denies, leaves the
// second's count as it was; the states are the limiters' own, so their
// single decisions see the joint ones. Two steps on one state, or keys
// on two Cluster slots, are ErrNotJoint.
func TestApplyJoint(t *testing.T) {
	parallelOnMiniredis(t)
	srv := newServer(t)
	c := srv.client(t)
	for _, batched := range []bool{false, true} {
		opts := &Options{}
		if !batched {
			opts.BatchSize = 1
		}
		testApplyJoint(t, newStore(t, c, opts))
	}
}

func testApplyJoint(t *testing.T, s *Store) {
	ctx := context.Background()
	route := floodgate.FixedWindow{Limit: 3, Window: 60e9}
	group := floodgate.FixedWindow{Limit: 10, Window: 60e9}
	lr, err := floodgate.New(s, route, &floodgate.Options{Name: "route"})
	require.NoError(t, err)
	lg, err := floodgate.New(s, group, &floodgate.Options{Name: "group"})
	require.NoError(t, err)
	steps := []JointStep{{Name: "route", Alg: route, Key: "special"}, {Name: "group", Alg: group, Key: "api"}}
	var allowed []bool
	each := make([]floodgate.Decision, 2)
	for range 5 {
		res, err := s.ApplyJoint(ctx, steps, floodgate.Request{Op: floodgate.OpTake, N: 1}, each)
		require.NoError(t, err)
		allowed = append(allowed, res.Allowed)
		if !res.Allowed {
			require.Equal(t, 0, res.Binding, "the route binds")
			require.False(t, each[0].Allowed)
			require.True(t, each[1].Allowed, "the group alone would admit")
		}
	}
	require.Equal(t, []bool{true, true, true, false, false}, allowed)
	d, err := lg.Allow(ctx, "api")
	require.NoError(t, err)
	require.Equal(t, int64(6), d.Remaining, "the group counted the 3 admitted and this one, not the 2 denied")
	d, err = lr.Allow(ctx, "special")
	require.NoError(t, err)
	require.False(t, d.Allowed, "the route's own limiter sees the joint takes")

	_, err = s.ApplyJoint(ctx, []JointStep{steps[0], steps[0]}, floodgate.Request{Op: floodgate.OpTake, N: 1}, nil)
	require.ErrorIs(t, err, ErrNotJoint)
	_, err = s.ApplyJoint(ctx, nil, floodgate.Request{Op: floodgate.OpTake, N: 1}, nil)
	require.ErrorIs(t, err, ErrNotJoint)
	_, err = s.ApplyJoint(ctx, steps, floodgate.Request{Op: floodgate.OpTake, N: 4}, nil)
	require.ErrorIs(t, err, floodgate.ErrExceedsLimit)
}

// TestApplyJointCluster: on the Cluster, keys of one hash tag are one
// joint step; keys on two slots are ErrNotJoint.
func TestApplyJointCluster(t *testing.T) {
	addrs := clusterAddrs(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = c.Close() })
	s := newStore(t, c, nil)
	ctx := context.Background()
	fw := floodgate.FixedWindow{Limit: 2, Window: 60e9}
	same := []JointStep{{Name: "a", Alg: fw, Key: "{t}x"}, {Name: "b", Alg: fw, Key: "{t}y"}}
	for i := range 3 {
		res, err := s.ApplyJoint(ctx, same, floodgate.Request{Op: floodgate.OpTake, N: 1}, nil)
		require.NoError(t, err)
		require.Equal(t, i < 2, res.Allowed)
	}
	var other string
	for _, k := range []string{"x", "y", "z", "w", "v"} {
		if s.Slot(k) != s.Slot("{t}x") {
			other = k
			break
		}
	}
	_, err := s.ApplyJoint(ctx, []JointStep{same[0], {Name: "b", Alg: fw, Key: other}}, floodgate.Request{Op: floodgate.OpTake, N: 1}, nil)
	require.ErrorIs(t, err, ErrNotJoint)
}

// TestApplyJointConcurrent: 16 goroutines take jointly on a key limited
// to 50 and one limited to 2,000, while 8 more take singly on the second:
// the first admits exactly 50 joint steps, and the second counts exactly
// the joint steps admitted and its own single takes admitted.
func TestApplyJointConcurrent(t *testing.T) {
	parallelOnMiniredis(t)
	loadTest(t)
	srv := newServer(t)
	s := newStore(t, srv.client(t), nil)
	ctx := context.Background()
	small := floodgate.FixedWindow{Limit: 50, Window: 60e9}
	big := floodgate.FixedWindow{Limit: 2000, Window: 60e9}
	lb, err := floodgate.New(s, big, &floodgate.Options{Name: "big"})
	require.NoError(t, err)
	steps := []JointStep{{Name: "small", Alg: small, Key: "k"}, {Name: "big", Alg: big, Key: "k"}}
	var joint, single atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 20 {
				res, err := s.ApplyJoint(ctx, steps, floodgate.Request{Op: floodgate.OpTake, N: 1}, nil)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					joint.Add(1)
				}
			}
		})
	}
	for range 8 {
		wg.Go(func() {
			for range 50 {
				d, err := lb.Allow(ctx, "k")
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Error(err)
					return
				}
				if d.Allowed {
					single.Add(1)
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(50), joint.Load())
	d, err := lb.Apply(ctx, "k", floodgate.Request{Op: floodgate.OpTake, N: 1, Check: true}, nil)
	require.NoError(t, err)
	require.Equal(t, 2000-joint.Load()-single.Load()-1, d.Remaining, "a check reports what would remain after its one unit")
}
