// Package testkit is what the tests of several floodgate packages share:
// Redis clients built as users build them, key prefixes that clean up
// after themselves, the script statistics of INFO commandstats, and a
// Store that counts its steps. Only tests import it.
package testkit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
)

// Clients returns a function making Redis clients with go-redis' default
// options, closed when the test ends: to the standalone server at
// REDIS_ADDR, to the Cluster at REDIS_CLUSTER_ADDRS when cluster is set
// (skipping the test without it), or else to a miniredis of the test's
// own. It reports whether the server is real.
func Clients(t *testing.T, cluster bool) (func() redis.UniversalClient, bool) {
	t.Helper()
	if cluster {
		addrs := os.Getenv("REDIS_CLUSTER_ADDRS")
		if addrs == "" {
			t.Skip("set REDIS_CLUSTER_ADDRS (comma-separated seed nodes) to run on a Redis Cluster")
		}
		return func() redis.UniversalClient {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ",")})
			t.Cleanup(func() { _ = c.Close() })
			return c
		}, true
	}
	addr, real := os.Getenv("REDIS_ADDR"), true
	if addr == "" {
		addr, real = miniredis.RunT(t).Addr(), false
	}
	return func() redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}, real
}

// Prefix returns a key prefix unique to this run of the test, under
// "fgtest:"+name, and deletes the keys under it when the test ends: no
// test flushes a server it did not start.
func Prefix(t testing.TB, c redis.UniversalClient, name string) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	p := "fgtest:" + name + ":" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		del := func(ctx context.Context, n *redis.Client) error {
			it := n.Scan(ctx, 0, p+"*", 1000).Iterator()
			for it.Next(ctx) {
				_ = n.Del(ctx, it.Val()).Err()
			}
			return it.Err()
		}
		if err := ForEachMaster(context.Background(), c, del); err != nil {
			t.Errorf("deleting the keys under %s: %v", p, err)
		}
	})
	return p
}

// ForEachMaster calls fn on every master of a Cluster client, or on c
// itself.
func ForEachMaster(ctx context.Context, c redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	switch v := c.(type) {
	case *redis.ClusterClient:
		return v.ForEachMaster(ctx, fn)
	case *redis.Client:
		return fn(ctx, v)
	}
	return nil
}

// ScriptStat is a server's EVALSHA and EVAL statistics.
type ScriptStat struct {
	Calls int64
	Usec  float64
}

// ScriptStats returns each master's EVALSHA and EVAL calls and time so
// far, from INFO commandstats, by address.
func ScriptStats(ctx context.Context, c redis.UniversalClient) (map[string]ScriptStat, error) {
	var mu sync.Mutex
	out := map[string]ScriptStat{}
	err := ForEachMaster(ctx, c, func(ctx context.Context, n *redis.Client) error {
		info, err := n.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		var st ScriptStat
		for line := range strings.SplitSeq(info, "\n") {
			if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
				continue
			}
			_, rest, _ := strings.Cut(line, "calls=")
			calls, rest, _ := strings.Cut(rest, ",usec=")
			usec, _, _ := strings.Cut(rest, ",")
			n, err := strconv.ParseInt(calls, 10, 64)
			if err != nil {
				return err
			}
			u, err := strconv.ParseFloat(strings.TrimSpace(usec), 64)
			if err != nil {
				return err
			}
			st.Calls += n
			st.Usec += u
		}
		mu.Lock()
		out[n.Options().Addr] = st
		mu.Unlock()
		return nil
	})
	return out, err
}

// Counting is a Store around a Store that counts the steps of its Bounds
// (Calls) and those that failed (Failed).
type Counting struct {
	floodgate.Store
	Calls, Failed atomic.Int64
}

// Bind binds alg on the inner Store and counts the Bound's steps.
func (c *Counting) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	b, err := c.Store.Bind(name, alg)
	if err != nil {
		return nil, err
	}
	return countingBound{b, c}, nil
}

type countingBound struct {
	floodgate.Bound
	c *Counting
}

func (b countingBound) Apply(ctx context.Context, key string, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	b.c.Calls.Add(1)
	res, err := b.Bound.Apply(ctx, key, req, each)
	if err != nil {
		b.c.Failed.Add(1)
	}
	return res, err
}

func (b countingBound) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	b.c.Calls.Add(1)
	d, err := b.Bound.Take(ctx, key, n)
	if err != nil {
		b.c.Failed.Add(1)
	}
	return d, err
}

// Mem returns a memstore on now, or on its own clock when now is nil.
func Mem(t testing.TB, now func() time.Time) *memstore.Store {
	t.Helper()
	var o *memstore.Options
	if now != nil {
		o = &memstore.Options{Now: now}
	}
	s, err := memstore.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
