package redisstore

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/lease"
	"github.com/floodgate-go/floodgate/step"
)

var _ lease.Fleet = (*LeaseFleet)(nil)

// TestLeaseFleet: the LeaseFleets of one Store's Redis see each other's
// demands for a key, not their own, nor those for other keys or limiters.
func TestLeaseFleet(t *testing.T) {
	srv := newServer(t)
	s := newStore(t, srv.client(t), nil)
	ctx := context.Background()
	a, err := s.LeaseFleet(time.Minute)
	require.NoError(t, err)
	b, err := s.LeaseFleet(time.Minute)
	require.NoError(t, err)
	c, err := s.LeaseFleet(time.Minute)
	require.NoError(t, err)

	got, err := a.Demand(ctx, "api", "user:1", 12.5)
	require.NoError(t, err)
	assert.Empty(t, got, "a alone")
	got, err = b.Demand(ctx, "api", "user:1", 0)
	require.NoError(t, err)
	assert.Equal(t, []float64{12.5}, got)
	got, err = c.Demand(ctx, "api", "user:1", 1e9)
	require.NoError(t, err)
	slices.Sort(got)
	assert.Equal(t, []float64{0, 12.5}, got)
	got, err = a.Demand(ctx, "api", "user:1", 3)
	require.NoError(t, err)
	slices.Sort(got)
	assert.Equal(t, []float64{0, 1e9}, got, "a's record replaced, not added")
	got, err = b.Demand(ctx, "api", "user:2", 1)
	require.NoError(t, err)
	assert.Empty(t, got, "another key")
	got, err = b.Demand(ctx, "batch", "user:1", 1)
	require.NoError(t, err)
	assert.Empty(t, got, "another limiter")

	assert.Equal(t, s.prefix+"{user:1}:api:dm", s.DemandKey("api", "user:1"))
	// On a Cluster the demands live on the key's slot.
	assert.Equal(t, redis.NewClusterClient(&redis.ClusterOptions{}).ClusterKeySlot(ctx, s.Key("api", "user:1", step.KindFixedWindow)).Val(),
		redis.NewClusterClient(&redis.ClusterOptions{}).ClusterKeySlot(ctx, s.DemandKey("api", "user:1")).Val())
}

func TestLeaseFleetInvalid(t *testing.T) {
	srv := newServer(t)
	client := srv.client(t)
	s := newStore(t, client, nil)
	ctx := context.Background()
	for _, d := range []time.Duration{0, time.Microsecond, -time.Second} {
		f, err := s.LeaseFleet(d)
		assert.Nil(t, f)
		assert.ErrorIs(t, err, ErrInvalidOptions, "%v", d)
	}
	f, err := s.LeaseFleet(time.Minute)
	require.NoError(t, err)
	for _, d := range []float64{-1, math.NaN(), math.Inf(1), math.Inf(-1)} {
		_, err := f.Demand(ctx, "api", "k", d)
		assert.ErrorIs(t, err, ErrInvalidOptions, "%v", d)
	}
	_, err = f.Demand(ctx, "a{b", "k", 1)
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
	_, err = f.Demand(ctx, "api", "", 1)
	assert.ErrorIs(t, err, floodgate.ErrEmptyKey)

	// A field another program wrote is a reply error, not a demand.
	now, err := client.Time(ctx).Result()
	require.NoError(t, err)
	at := " " + strconv.FormatInt(now.UnixMilli(), 10)
	for _, v := range []string{"-5", "NaN", "inf", "0x"} {
		require.NoError(t, client.HSet(ctx, s.DemandKey("api", "bad"), "other", v+at).Err())
		_, err = f.Demand(ctx, "api", "bad", 1)
		assert.ErrorIs(t, err, ErrReply, "%q", v)
	}
}

// TestLeaseFleetExpiry runs on miniredis, whose TIME the test sets: a
// silent process still counts at its expiry and drops out a millisecond
// later, and its field is deleted.
func TestLeaseFleetExpiry(t *testing.T) {
	srv, s, now := frozenStore(t)
	ctx := context.Background()
	a, err := s.LeaseFleet(300 * time.Millisecond)
	require.NoError(t, err)
	b, err := s.LeaseFleet(300 * time.Millisecond)
	require.NoError(t, err)
	_, err = a.Demand(ctx, "api", "k", 2)
	require.NoError(t, err)
	srv.SetTime(now.Add(300 * time.Millisecond))
	got, err := b.Demand(ctx, "api", "k", 4)
	require.NoError(t, err)
	assert.Equal(t, []float64{2}, got, "a still counts at its expiry")
	srv.SetTime(now.Add(301 * time.Millisecond))
	got, err = b.Demand(ctx, "api", "k", 4)
	require.NoError(t, err)
	assert.Empty(t, got, "a dropped out")
	fields, err := srv.HKeys(s.DemandKey("api", "k"))
	require.NoError(t, err)
	assert.Equal(t, []string{b.id}, fields)
}

// TestLeaseFleetStall: with the server stopped (SIGSTOP), a Demand ends
// within the Store's Timeout (given generous slack on a shared machine)
// with an error matching floodgate.ErrUnavailable, and works again once the
// server resumes.
func TestLeaseFleetStall(t *testing.T) {
	p := startRedisProc(t)
	c := redis.NewClient(&redis.Options{Addr: p.addr()}) // default options
	t.Cleanup(func() { _ = c.Close() })
	s := newStore(t, c, &Options{Prefix: "fg:", Timeout: 50 * time.Millisecond})
	a, err := s.LeaseFleet(time.Minute)
	require.NoError(t, err)
	b, err := s.LeaseFleet(time.Minute)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = a.Demand(ctx, "api", "k", 3)
	require.NoError(t, err)

	p.stop()
	start := time.Now()
	_, err = b.Demand(ctx, "api", "k", 4)
	took := time.Since(start)
	p.cont()
	require.Error(t, err)
	assert.True(t, errors.Is(err, floodgate.ErrUnavailable), "error %v, want ErrUnavailable", err)
	assert.Less(t, took, 2*time.Second, "a Demand against a stopped server is bounded by the Store's Timeout (50ms)")
	t.Logf("a Demand against a stopped server returned after %v", took)

	// The server answers again; the connection the timed-out call used
	// may be closed by the client, so allow a few attempts.
	var got []float64
	for range 50 {
		if got, err = b.Demand(ctx, "api", "k", 4); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, err)
	assert.Equal(t, []float64{3}, got)
}
