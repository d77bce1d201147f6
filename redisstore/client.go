package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/redisstore/internal/scripts"
)

// derive returns the client the store calls Redis through, made from the
// client given to New. go-redis bounds a call by its context's deadline
// only when the client's ContextTimeoutEnabled is set; with go-redis'
// default (false) a stalled Redis holds a call for the client's
// ReadTimeout (3s by default), whatever the context says. So when the
// given client does not honour contexts:
//
//   - a *redis.Client (a failover client too) is cloned with WithTimeout,
//     which shares its connection pool, and the clone's options set
//     ContextTimeoutEnabled. go-redis (v9.22) gives the clone none of the
//     hooks added to the client: build the client with
//     ContextTimeoutEnabled for its hooks to see the store's calls.
//   - a *redis.ClusterClient or *redis.Ring is rebuilt from the same
//     options with ContextTimeoutEnabled set: the store's own client, with
//     its own connection pools, and without the given client's hooks
//     (owned is then true, and Close closes it).
//   - any other UniversalClient is used as it is, with guard set: each
//     call then runs on a goroutine of its own, which the decision stops
//     waiting for at its deadline.
func derive(c redis.UniversalClient) (use redis.UniversalClient, owned, guard bool) {
	switch v := c.(type) {
	case *redis.Client:
		o := v.Options()
		if o.ContextTimeoutEnabled {
			return v, false, false
		}
		read, write := o.ReadTimeout, o.WriteTimeout
		clone := v.WithTimeout(read)
		opt := clone.Options() // the clone's own copy
		opt.WriteTimeout = write
		opt.ContextTimeoutEnabled = true
		return clone, false, false
	case *redis.ClusterClient:
		o := v.Options()
		if o.ContextTimeoutEnabled {
			return v, false, false
		}
		opt := *o
		opt.ContextTimeoutEnabled = true
		if opt.MaintNotificationsConfig != nil {
			mc := *opt.MaintNotificationsConfig
			opt.MaintNotificationsConfig = &mc
		}
		return redis.NewClusterClient(&opt), true, false
	case *redis.Ring:
		o := v.Options()
		if o.ContextTimeoutEnabled {
			return v, false, false
		}
		opt := *o
		opt.ContextTimeoutEnabled = true
		return redis.NewRing(&opt), true, false
	}
	return c, false, true
}

// once is a script call that go-redis must not send again: a script that
// ran before its connection broke, or whose reply came too late, would
// run twice, spending units no caller was told about (or giving back a
// refund twice). go-redis retries a command unless its NoRetry says
// otherwise, whatever MaxRetries says in some paths (a ClusterClient
// retries on its redirect budget). Redirections (MOVED, ASK) are still
// followed: a redirected command did not run.
type once struct{ *redis.Cmd }

// NoRetry tells go-redis not to send the command again.
func (once) NoRetry() bool { return true }

// processor is what run needs of a client: every go-redis client and
// pipeline has it.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// program is a script: its source and its SHA-1, as EVALSHA takes it.
type program struct {
	hash, src string
	// evalsha and eval are the first three arguments of its calls but for
	// the number of keys, boxed once: a string boxed at each call costs an
	// allocation.
	evalsha, eval [2]any
}

// prog names a script of the store: that of one of the five algorithms,
// as its step.Kind, the calendar window's (scripts.KindCalendar), or
// progLimits.
type prog uint8

// progLimits is the script of a floodgate.Limits decision
// (scripts.LimitsSource).
const progLimits = prog(scripts.KindCalendar + 1)

func newProgram(src string) program {
	sum := sha1.Sum([]byte(src))
	hash := hex.EncodeToString(sum[:])
	return program{hash: hash, src: src, evalsha: [2]any{"evalsha", hash}, eval: [2]any{"eval", src}}
}

// oneKeyCall holds the arguments of a call on one key and the key itself:
// a string stored in an interface is boxed, an allocation of its own,
// where a pointer into this struct is not (go-redis writes a *string as
// the string, and reads it as one to find a Cluster slot).
type oneKeyCall struct {
	key  string
	args [16]any
}

// evalCmd returns the EVALSHA (or, with eval, EVAL) of script id (its
// batch script, with batch) on keys (rkey when keys is nil) and args.
func evalCmd(ctx context.Context, id prog, batch, eval bool, rkey string, keys []string, args []any) *redis.Cmd {
	p := programs[id]
	if batch {
		p = batchPrograms[id]
	}
	var a []any
	if keys == nil && 4+len(args) <= len(oneKeyCall{}.args) {
		// One allocation for the arguments and the key they point to.
		c := &oneKeyCall{key: rkey}
		a = c.args[:4]
		a[2], a[3] = 1, &c.key
	} else {
		a = make([]any, 3, 3+max(len(keys), 1)+len(args))
	}
	a[0], a[1] = p.evalsha[0], p.evalsha[1]
	if eval {
		a[0], a[1] = p.eval[0], p.eval[1]
	}
	if keys == nil {
		if len(a) == 3 {
			a[2] = 1
			a = append(a, rkey)
		}
	} else {
		// Each key by its address in keys, which no caller changes
		// once the command is built: a string in an interface would
		// be boxed, an allocation per key.
		a[2] = len(keys)
		for i := range keys {
			a = append(a, &keys[i])
		}
	}
	a = append(a, args...)
	return redis.NewCmd(ctx, a...)
}

// run makes one script call on c, once: EVALSHA and, when the server
// lacks the script, EVAL. t reports each of the two as a round trip.
func run(ctx context.Context, p processor, id prog, batch bool, rkey string, keys []string, args []any, t trip) (any, error) {
	cmd := evalCmd(ctx, id, batch, false, rkey, keys, args)
	t.process(ctx, p, cmd)
	if isNoScript(cmd.Err()) {
		cmd = evalCmd(ctx, id, batch, true, rkey, keys, args)
		t.process(ctx, p, cmd)
	}
	return cmd.Result()
}

func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// isRedirect reports whether err is a Cluster's refusal to run a command
// on this node: MOVED or ASK (the slot is served elsewhere), TRYAGAIN (a
// multi-key command during the slot's migration). The command did not
// run; sent on its own through the ClusterClient, it is redirected.
func isRedirect(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "MOVED") ||
		redis.HasErrorPrefix(err, "ASK") ||
		redis.HasErrorPrefix(err, "TRYAGAIN"))
}
