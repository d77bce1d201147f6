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
// decisions run (SCRIPT LOAD), so that the first decisions pay neither for
// dialling nor for a NOSCRIPT round trip. It returns nil when every node
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
	check := func(ctx context.Context, c *redis.Client) error {
		if err := c.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("PING %s: %w", c.Options().Addr, err)
		}
		pipe := c.Pipeline()
		for _, p := range append(programs[:], batchPrograms[:]...) {
			if p.src != "" {
				pipe.ScriptLoad(ctx, p.src)
			}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("SCRIPT LOAD on %s: %w", c.Options().Addr, err)
		}
		return nil
	}
	var err error
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, check)
	case *redis.Ring:
		err = c.ForEachShard(ctx, check)
	case *redis.Client:
		err = check(ctx, c)
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
