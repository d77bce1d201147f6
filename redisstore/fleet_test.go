package redisstore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/adaptive/shed"
	"github.com/floodgate-go/floodgate/observe"
)

func TestFleetSource(t *testing.T) {
	srv := newServer(t)
	s := newStore(t, srv.client(t), nil)
	ctx := context.Background()
	a, err := s.FleetSource("api", time.Minute)
	require.NoError(t, err)
	b, err := s.FleetSource("api", time.Minute)
	require.NoError(t, err)
	other, err := s.FleetSource("batch", time.Minute)
	require.NoError(t, err)

	got, err := a.Exchange(ctx, shed.Load{InFlight: 9, Capacity: 10})
	require.NoError(t, err)
	assert.Equal(t, shed.Load{InFlight: 9, Capacity: 10}, got, "a alone")
	got, err = b.Exchange(ctx, shed.Load{InFlight: 6, Capacity: 10})
	require.NoError(t, err)
	assert.Equal(t, shed.Load{InFlight: 15, Capacity: 20}, got, "a and b")
	got, err = other.Exchange(ctx, shed.Load{InFlight: 0.5, Capacity: 4})
	require.NoError(t, err)
	assert.Equal(t, shed.Load{InFlight: 0.5, Capacity: 4}, got, "another fleet")
	// An exchange replaces what the process recorded before.
	got, err = a.Exchange(ctx, shed.Load{InFlight: 1, Capacity: 10})
	require.NoError(t, err)
	assert.Equal(t, shed.Load{InFlight: 7, Capacity: 20}, got, "a's second exchange")
	assert.Equal(t, s.prefix+"{api}:fleet", s.FleetKey("api"))
}

func TestFleetSourceExpiry(t *testing.T) {
	srv := newServer(t)
	if !srv.real() {
		// miniredis' TIME only moves with the test's clock: FastForward
		// does not move it, so expiry is checked on a real Redis.
		t.Skip("expiry on Redis's TIME: set REDIS_ADDR")
	}
	s := newStore(t, srv.client(t), nil)
	ctx := context.Background()
	dead, err := s.FleetSource("expiry", 50*time.Millisecond)
	require.NoError(t, err)
	live, err := s.FleetSource("expiry", 50*time.Millisecond)
	require.NoError(t, err)
	_, err = dead.Exchange(ctx, shed.Load{InFlight: 5, Capacity: 5})
	require.NoError(t, err)
	// The dead process never exchanges again; the live one does until
	// the dead one has dropped out (a bounded wait, not a timing bar).
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := live.Exchange(ctx, shed.Load{InFlight: 1, Capacity: 10})
		require.NoError(t, err)
		if got == (shed.Load{InFlight: 1, Capacity: 10}) {
			return
		}
		require.Equal(t, shed.Load{InFlight: 6, Capacity: 15}, got, "both, before the expiry")
		require.True(t, time.Now().Before(deadline), "the dead process never dropped out")
		time.Sleep(20 * time.Millisecond)
	}
}

func TestFleetSourceInvalid(t *testing.T) {
	srv := newServer(t)
	s := newStore(t, srv.client(t), nil)
	for _, tc := range []struct {
		name   string
		fleet  string
		expiry time.Duration
	}{
		{"empty name", "", time.Second},
		{"brace", "a{b", time.Second},
		{"long name", string(make([]byte, 257)), time.Second},
		{"zero expiry", "a", 0},
		{"sub-millisecond expiry", "a", time.Microsecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := s.FleetSource(tc.fleet, tc.expiry)
			assert.Nil(t, f)
			assert.ErrorIs(t, err, ErrInvalidOptions)
		})
	}
}

// fleetCalls are the scripts of the Store's two fleets, FleetSource's
// exchange and LeaseFleet's Demand, for the tests they share: each makes
// one call on s and returns its error.
var fleetCalls = []struct {
	name string
	call func(t *testing.T, s *Store) error
}{
	{"FleetSource", func(t *testing.T, s *Store) error {
		f, err := s.FleetSource("obs", time.Second)
		require.NoError(t, err)
		_, err = f.Exchange(context.Background(), shed.Load{InFlight: 1, Capacity: 4})
		return err
	}},
	{"LeaseFleet", func(t *testing.T, s *Store) error {
		f, err := s.LeaseFleet(time.Second)
		require.NoError(t, err)
		_, err = f.Demand(context.Background(), "api", "k", 1)
		return err
	}},
}

// downStore returns a Store whose server is down: nothing listens on port
// 1 of the loopback, so every call fails.
func downStore(t *testing.T, opts *Options) *Store {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	s, err := New(c, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// frozenStore returns a Store on a miniredis of its own whose TIME stands
// at the returned instant until the test sets it.
func frozenStore(t *testing.T) (*miniredis.Miniredis, *Store, time.Time) {
	t.Helper()
	srv := miniredis.RunT(t)
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	srv.SetTime(now)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return srv, newStore(t, c, &Options{Prefix: "fg:"}), now
}

// TestFleetDown: a fleet's call to a server that is down fails with an
// error matching floodgate.ErrUnavailable.
func TestFleetDown(t *testing.T) {
	parallelOnMiniredis(t)
	for _, fc := range fleetCalls {
		s := downStore(t, &Options{Prefix: "fleet-down:", Timeout: 200 * time.Millisecond})
		err := fc.call(t, s)
		require.Error(t, err, fc.name)
		assert.True(t, errors.Is(err, floodgate.ErrUnavailable), "%s: error %v, want ErrUnavailable", fc.name, err)
	}
}

// TestFleetSourceExpiryBoundary runs on miniredis, whose TIME the test
// sets: a silent process still counts expiry after its last exchange and
// drops out a millisecond later, and its field is deleted.
func TestFleetSourceExpiryBoundary(t *testing.T) {
	srv, s, now := frozenStore(t)
	ctx := context.Background()
	a, err := s.FleetSource("test", 300*time.Millisecond)
	require.NoError(t, err)
	b, err := s.FleetSource("test", 300*time.Millisecond)
	require.NoError(t, err)

	_, err = a.Exchange(ctx, shed.Load{InFlight: 2.5, Capacity: 10})
	require.NoError(t, err)
	got, err := b.Exchange(ctx, shed.Load{InFlight: 4, Capacity: 10})
	require.NoError(t, err)
	assert.Equal(t, shed.Load{InFlight: 6.5, Capacity: 20}, got)

	srv.SetTime(now.Add(300 * time.Millisecond))
	got, err = a.Exchange(ctx, shed.Load{InFlight: 1, Capacity: 10})
	require.NoError(t, err)
	assert.Equal(t, shed.Load{InFlight: 5, Capacity: 20}, got, "b still counts at its expiry")
	srv.SetTime(now.Add(301 * time.Millisecond))
	got, err = a.Exchange(ctx, shed.Load{InFlight: 1, Capacity: 10})
	require.NoError(t, err)
	assert.Equal(t, shed.Load{InFlight: 1, Capacity: 10}, got, "b expired")
	keys, err := srv.HKeys("fg:{test}:fleet")
	require.NoError(t, err)
	assert.Equal(t, []string{a.id}, keys, "b's field is deleted")

	// Through a Fleet.
	f, err := shed.NewFleet(b, func() shed.Load { return shed.Load{InFlight: 9, Capacity: 10} }, &shed.FleetOptions{Manual: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	require.NoError(t, f.Sync(ctx))
	assert.Equal(t, 0.5, f.Utilization(), "(1+9)/20")
}

// TestFleetObserved checks that OnStoreCall sees a fleet's round trips
// (FleetSource's exchanges, LeaseFleet's Demands): the first, on a server
// that does not have the script yet, is EVALSHA answered NOSCRIPT and then
// EVAL; the next one EVALSHA; each names the node and carries no decision.
// On a server that is down, the call is reported as failed. It runs on a
// miniredis of its own, so that the script is missing without flushing a
// shared server's.
func TestFleetObserved(t *testing.T) {
	parallelOnMiniredis(t)
	for _, fc := range fleetCalls {
		m := miniredis.RunT(t)
		srv := &server{addr: m.Addr(), mini: m}
		var mu sync.Mutex
		var calls []observe.StoreCall
		obs := &observe.Observer{OnStoreCall: func(_ context.Context, e observe.StoreCall) {
			mu.Lock()
			calls = append(calls, e)
			mu.Unlock()
		}}
		s := newStore(t, srv.client(t), &Options{Name: "fleet", Observer: obs})
		for range 2 {
			require.NoError(t, fc.call(t, s), fc.name)
		}
		mu.Lock()
		got := append([]observe.StoreCall(nil), calls...)
		calls = nil
		mu.Unlock()
		require.Len(t, got, 3, "%s: EVALSHA (NOSCRIPT), EVAL, EVALSHA: %+v", fc.name, got)
		for i, e := range got {
			assert.Equal(t, "fleet", e.Name, "%s: call %d", fc.name, i)
			assert.Equal(t, srv.addr, e.Node, "%s: call %d", fc.name, i)
			assert.Zero(t, e.Decisions, "%s: call %d carries no decision", fc.name, i)
			assert.Equal(t, observe.CallOK, e.Outcome, "%s: call %d: %v", fc.name, i, e.Err)
			assert.Positive(t, e.Latency, "%s: call %d", fc.name, i)
		}

		ds := downStore(t, &Options{Name: "down", Observer: obs, Timeout: 200 * time.Millisecond})
		require.Error(t, fc.call(t, ds), fc.name)
		mu.Lock()
		require.Len(t, calls, 1, fc.name)
		assert.Equal(t, observe.CallError, calls[0].Outcome, "%s: %+v", fc.name, calls[0])
		assert.Equal(t, "127.0.0.1:1", calls[0].Node, fc.name)
		mu.Unlock()
	}
}
