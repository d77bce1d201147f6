package shed_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/floodgate-go/floodgate/adaptive/shed"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRedisFleetRecipe holds the package doc's Redis recipe (redisFleet in
// example_test.go) to its FleetSource contract: each process's last load
// counts once, and a process not heard from within the expiry drops out.
func TestRedisFleetRecipe(t *testing.T) {
	srv := miniredis.RunT(t)
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	srv.SetTime(now)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	src := func(id string) *redisFleet {
		return &redisFleet{rdb: rdb, key: "fleet:{test}", id: id, expiry: 300 * time.Millisecond}
	}
	ctx := context.Background()
	a, b := src("a"), src("b")

	got, err := a.Exchange(ctx, shed.Load{InFlight: 2.5, Capacity: 10})
	require.NoError(t, err)
	assert.Equal(t, shed.Load{InFlight: 2.5, Capacity: 10}, got)
	got, err = b.Exchange(ctx, shed.Load{InFlight: 4, Capacity: 10})
	require.NoError(t, err)
	assert.Equal(t, shed.Load{InFlight: 6.5, Capacity: 20}, got)
	got, err = a.Exchange(ctx, shed.Load{InFlight: 1, Capacity: 10})
	require.NoError(t, err)
	assert.Equal(t, shed.Load{InFlight: 5, Capacity: 20}, got, "a's new load replaces its old one")

	// b goes silent: 300ms later it still counts, then it drops out.
	srv.SetTime(now.Add(300 * time.Millisecond))
	got, err = a.Exchange(ctx, shed.Load{InFlight: 1, Capacity: 10})
	require.NoError(t, err)
	assert.Equal(t, shed.Load{InFlight: 5, Capacity: 20}, got)
	srv.SetTime(now.Add(301 * time.Millisecond))
	got, err = a.Exchange(ctx, shed.Load{InFlight: 1, Capacity: 10})
	require.NoError(t, err)
	assert.Equal(t, shed.Load{InFlight: 1, Capacity: 10}, got, "b expired")
	keys, err := srv.HKeys("fleet:{test}")
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, keys)

	// Through a Fleet.
	f, err := shed.NewFleet(b, func() shed.Load { return shed.Load{InFlight: 9, Capacity: 10} }, &shed.FleetOptions{Manual: true})
	require.NoError(t, err)
	require.NoError(t, f.Sync(ctx))
	assert.Equal(t, 0.5, f.Utilization(), "(1+9)/20")
}
