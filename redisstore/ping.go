package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
)

// Ping checks, within ctx, that the store can reach every node it will
// decide on (every master of a Cluster, every shard of a Ring, the server
// of any other client): it sends each PING, then loads the scripts the
// decisions run (SCRIPT EXISTS, then SCRIPT LOAD of those the server
// lacks), so that the first decisions pay neither for dialling nor for a
// NOSCRIPT round trip. It returns nil when every node
// answered, and otherwise an error matching floodgate.ErrUnavailable and
// ErrRedis that wraps the first node's failure (or ErrClosed after Close).
//
// New makes no call to Redis: a store built while Redis is unreachable
// works (its decisions fail under the failure policy until Redis is
// back). Call Ping at start-up to find out, and to decide whether a
// process starts without Redis:
//
//	store, err := redisstore.New(rdb, opts)
//	...
//	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
//	defer cancel()
//	if err := store.Ping(ctx); err != nil {
//		log.Printf("rate limits: %v; deciding by the failure policy until Redis answers", err)
//	}
//
// Ping counts toward no breaker and reports to no Observer.
func (s *Store) Ping(ctx context.Context) error {
	if s.shut.Load() {
		return unavailable(floodgate.ErrClosed, nil)
	}
	if !s.guard {
		return s.ping(ctx)
	}
	// The client would not stop at ctx's deadline: wait for it on a
	// goroutine of its own, as guarded decisions do.
	done := make(chan error, 1)
	go func() { done <- s.ping(context.WithoutCancel(ctx)) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return unavailable(ErrRedis, fmt.Errorf("%w: %w", ErrTimeout, ctx.Err()))
	}
}

// ping is Ping on a client that honours ctx.
func (s *Store) ping(ctx context.Context) error {
	var err error
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, prepare)
	case *redis.Ring:
		err = c.ForEachShard(ctx, prepare)
	case *redis.Client:
		err = prepare(ctx, c)
	default:
		// A client of another type: one PING through it.
		if perr := s.client.Ping(ctx).Err(); perr != nil {
			err = fmt.Errorf("PING: %w", perr)
		}
	}
	if err == nil {
		return nil
	}
	// For Ping, Redis not answering before ctx ended is the answer: a
	// timeout, whether go-redis saw it as ctx's or as its socket's.
	var ne net.Error
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		err = fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return unavailable(ErrRedis, err)
}

// prepare readies one server for decisions: a PING, which dials a
// connection, then SCRIPT EXISTS of the scripts the decisions run and
// SCRIPT LOAD of those the server lacks. (Loading all 17 sends 432 KB of
// Lua, 1.5–2.3 ms of a real Redis' time when they are loaded already, on
// every Ping of every process.)
func prepare(ctx context.Context, c *redis.Client) error {
	if err := c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("PING %s: %w", c.Options().Addr, err)
	}
	var all []*program
	var hashes []string
	for _, ps := range []*[progInflight + 1]program{&programs, &batchPrograms} {
		for i := range ps {
			if ps[i].src != "" {
				all = append(all, &ps[i])
				hashes = append(hashes, ps[i].hash)
			}
		}
	}
	have, err := c.ScriptExists(ctx, hashes...).Result()
	if err != nil {
		return fmt.Errorf("SCRIPT EXISTS on %s: %w", c.Options().Addr, err)
	}
	pipe := c.Pipeline()
	for i, p := range all {
		if i >= len(have) || !have[i] {
			pipe.ScriptLoad(ctx, p.src)
		}
	}
	if pipe.Len() == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("SCRIPT LOAD on %s: %w", c.Options().Addr, err)
	}
	return nil
}
