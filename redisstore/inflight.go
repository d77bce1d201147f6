package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/redisstore/internal/scripts"
)

// The Store is also an inflight.Store: package inflight's holds, a sorted
// set per limiter name and key (see "In flight" in the package doc).
var _ inflight.Store = (*Store)(nil)

// progInflight is the script of package inflight's calls
// (scripts.InflightSource). It has no batch script: batched, each call is
// a script call of its own in a batch's pipeline.
const progInflight = progLimits + 1

// holdIDs names the holds of one Store: a random id, which tells its holds
// from those of every other Store (another process, another client), and
// a count. A hold's member in its key's sorted set is the id, a colon and
// the hold's number in base 36, at most 24 bytes.
type holdIDs struct {
	once   sync.Once
	prefix string
	n      atomic.Uint64
}

// next returns the number of a new hold, from 1 (0 is the zero Hold), and
// its member.
func (s *Store) nextHold() (uint64, string) {
	id := s.holds.n.Add(1)
	return id, s.holder(id)
}

// holder returns the member of the hold numbered id.
func (s *Store) holder(id uint64) string {
	s.holds.once.Do(func() {
		// 96 random bits: among a million stores ever sharing a key, the
		// odds that two draw the same id are below 1 in 10^16.
		var b [12]byte
		_, _ = rand.Read(b[:])
		s.holds.prefix = base64.RawURLEncoding.EncodeToString(b[:]) + ":"
	})
	return s.holds.prefix + strconv.FormatUint(id, 36)
}

// InflightKey returns the Redis key holding the in-flight holds of key
// under the limiter name name (inflight.Limiter.Name), a sorted set, for
// operators and tests: Prefix + "{" + key + "}:" + name + ":if", such as
// "fg:{user:42}:exports:if" for a limiter named "exports", or
// "fg:{user:42}:inflight:20:if" for one of limit 20 without a name; the
// key is hashed under Options.HashKeys, as Key names the algorithms'. The
// hash tag puts every name's holds of one key on the key's Cluster slot,
// beside its rate limits. A name holds no brace (floodgate.CheckName), so
// the last '}' ends the user key, and the suffix ":if" is no algorithm's
// (whose keys end in a kind's code, see Key and LimitKey): no two (name,
// key) share a Redis key, nor share one with a rate limit.
func (s *Store) InflightKey(name, key string) string {
	return s.prefix + "{" + s.hashed(key) + "}:" + name + ":if"
}

// goneKey returns the key of the cancelled holder ids beside the holds at
// rkey (an InflightKey): rkey + ":gone", in the same hash slot. A removal
// of a failed Acquire's hold that finds no hold marks its holder id there
// for the hold's TTL, so that the Acquire's script, still queued in Redis
// (behind a stall, on a connection the client gave up), adds nothing when
// it runs. No InflightKey and no algorithm's key ends in ":gone".
func goneKey(rkey string) string { return rkey + ":gone" }

// checkInflight checks the name and key of an in-flight call.
func checkInflight(name, key string) error {
	if err := floodgate.CheckKey(key); err != nil {
		return err
	}
	if err := floodgate.CheckName(name); err != nil {
		return fmt.Errorf("redisstore: in-flight limiter name: %w", err)
	}
	return nil
}

// openHold is the Ref of a hold that FailOpen granted: Redis has no
// record of it, and its Release frees nothing.
type openHold struct{}

// Acquire takes one of limit slots of key under name in one script call,
// on the server's clock (or Options.Now): it drops the holds of (name,
// key) whose expiry has passed, counts the others and adds one expiring
// ttl from now if there are fewer than limit. See inflight.Store; the
// holds are at InflightKey(name, key). When Redis cannot answer, the
// failure policy decides, as for a rate decision: FailOpen admits (with a
// hold Redis does not know of), FailClosed denies, FailLocal asks the
// local store with the LocalShare of limit (rounded down, at least 1),
// FailError returns the error. A call that may have run in Redis though
// it failed (it timed out, or its connection broke, after the command may
// have been written) leaves its hold to the store to remove in the
// background (see "In flight" in the package doc).
func (s *Store) Acquire(ctx context.Context, name, key string, limit int64, ttl time.Duration) (inflight.Result, error) {
	if err := checkInflight(name, key); err != nil {
		return inflight.Result{}, err
	}
	if limit < 1 || limit > scripts.MaxQuota {
		return inflight.Result{}, fmt.Errorf("%w: redisstore: in-flight limit must be between 1 and %d, got %d", floodgate.ErrInvalidConfig, int64(scripts.MaxQuota), limit)
	}
	if err := checkTTL(ttl); err != nil {
		return inflight.Result{}, err
	}
	id, member := s.nextHold()
	args, err := s.inflightArgs(scripts.InflightArgs{Op: scripts.InflightAcquire, Holder: member, Limit: limit}, ttl)
	if err != nil {
		return inflight.Result{}, err
	}
	s.cleaner.noteTTL(ttl)
	rkey := s.InflightKey(name, key)
	reply, o, n, err := s.callInflight(ctx, false, rkey, []string{rkey, goneKey(rkey)}, args)
	if err == nil {
		var ok bool
		var n int64
		if ok, n, err = decodeInflight(reply); err == nil {
			if !ok {
				return inflight.Result{InFlight: n}, nil
			}
			return inflight.Result{Allowed: true, InFlight: n, Hold: inflight.Hold{ID: id, Expires: true}}, nil
		}
	} else if mayHaveRun(n, err, o == ignored && ctx.Err() != nil) {
		// The script may have added member though the caller is told
		// it failed (or is given the failure policy's hold): remove it
		// in the background, or its slot stays taken until ttl.
		s.addCleanup(cleanup{rkey: rkey, member: member, due: time.Now(), ttl: ttl, acquire: true, n: n})
	}
	switch o {
	case failed, timedOut, refused, busy:
		return s.fallbackAcquire(ctx, n, name, key, limit, ttl, err)
	case ignored:
		return inflight.Result{}, err
	}
	s.failures(n, false, err)
	return inflight.Result{}, err
}

// checkTTL checks the TTL of an Acquire or a Renew: the scripts count in
// microseconds and Redis expires keys in milliseconds.
func checkTTL(ttl time.Duration) error {
	if ttl < inflight.MinTTL || ttl > floodgate.MaxWindow {
		return fmt.Errorf("%w: redisstore: in-flight TTL must be between %v and %v, got %v", floodgate.ErrInvalidConfig, inflight.MinTTL, floodgate.MaxWindow, ttl)
	}
	return nil
}

// inflightArgs completes a's TTL, margin and clock.
func (s *Store) inflightArgs(a scripts.InflightArgs, ttl time.Duration) ([]any, error) {
	a.TTL = int64((ttl + time.Microsecond - 1) / time.Microsecond)
	a.MarginMs = s.marginMs
	if s.now != nil {
		t := s.now()
		if err := floodgate.CheckTime(t); err != nil {
			return nil, err
		}
		a.Now = strconv.FormatInt(t.UnixMicro(), 10)
	}
	return a.ARGV(), nil
}

// fallbackAcquire makes the Acquire Redis failed to make on node n (nil:
// no node was found), as the failure policy says, and counts it for
// OnFailures. cause matches floodgate.ErrUnavailable. FailLocal's holds
// are those of (name, key) in the local store, apart from other names' as
// in Redis.
func (s *Store) fallbackAcquire(ctx context.Context, n *node, name, key string, limit int64, ttl time.Duration, cause error) (inflight.Result, error) {
	var res inflight.Result
	switch s.policy {
	case FailError:
		s.failures(n, true, cause)
		return res, cause
	case FailOpen:
		res = inflight.Result{Allowed: true, InFlight: 1, Hold: inflight.Hold{Ref: openHold{}}}
	case FailClosed:
		res = inflight.Result{InFlight: limit}
	case FailLocal:
		share := max(int64(math.Floor(float64(limit)*s.share)), 1)
		var err error
		if res, err = s.localHolds.Acquire(ctx, name, key, share, ttl); err != nil {
			err = unavailable(ErrRedis, errors.Join(cause, err))
			s.failures(n, false, err)
			return inflight.Result{}, err
		}
	}
	s.failures(n, true, cause)
	return res, nil
}

// Renew moves the expiry of h, a hold of key under name, to ttl from now,
// in one script call; see inflight.Store. A hold whose expiry has passed
// is not renewed (another request may hold its slot by now): Renew
// removes it and reports false. A failure of Redis is an error (the
// Limiter tries again later), never the failure policy's: the hold lives
// until its expiry meanwhile.
func (s *Store) Renew(ctx context.Context, name, key string, h inflight.Hold, ttl time.Duration) (bool, error) {
	if err := checkInflight(name, key); err != nil {
		return false, err
	}
	if err := checkTTL(ttl); err != nil {
		return false, err
	}
	if h.Ref != nil || h.ID == 0 {
		return s.otherHold(h, func() (bool, error) { return s.localHolds.Renew(ctx, name, key, h, ttl) })
	}
	args, err := s.inflightArgs(scripts.InflightArgs{Op: scripts.InflightRenew, Holder: s.holder(h.ID)}, ttl)
	if err != nil {
		return false, err
	}
	reply, _, _, err := s.callInflight(ctx, true, s.InflightKey(name, key), nil, args)
	if err != nil {
		return false, err
	}
	ok, _, err := decodeInflight(reply)
	return ok, err
}

// Release removes h, a hold of key under name, in one script call; see
// inflight.Store. It runs on a context that keeps ctx's values but not its
// end, bounded by Options.Timeout as every call is. A failure is returned,
// never the failure policy's, and the store releases the hold again in
// the background, a few times within the shortest TTL it has granted; if
// those fail too, the hold expires at its TTL (see "In flight" in the
// package doc).
func (s *Store) Release(ctx context.Context, name, key string, h inflight.Hold) error {
	if err := checkInflight(name, key); err != nil {
		return err
	}
	if h.Ref != nil || h.ID == 0 {
		_, err := s.otherHold(h, func() (bool, error) { return true, s.localHolds.Release(ctx, name, key, h) })
		return err
	}
	member := s.holder(h.ID)
	args := scripts.InflightArgs{Op: scripts.InflightRelease, Holder: member}.ARGV()
	rkey := s.InflightKey(name, key)
	reply, _, n, err := s.callInflight(context.WithoutCancel(ctx), true, rkey, nil, args)
	if err == nil {
		_, _, err = decodeInflight(reply)
	} else if !errors.Is(err, ErrReply) && !errors.Is(err, floodgate.ErrClosed) {
		// The hold may still be there: release it again in the
		// background. A release that was never sent (an open breaker,
		// no free slot) or that a node refused (CLUSTERDOWN, LOADING) is
		// retried too: unlike an Acquire's, its hold is certainly in the
		// set. One whose script failed (ErrReply) would fail again.
		ttl := s.cleaner.releaseTTL()
		s.addCleanup(cleanup{rkey: rkey, member: member, due: time.Now(), ttl: ttl, n: n})
	}
	return err
}

// otherHold handles a hold Redis has no record of: the zero Hold (no
// hold), FailOpen's (held until released, which frees nothing) and
// FailLocal's, which local, a call of the local store, serves.
func (s *Store) otherHold(h inflight.Hold, local func() (bool, error)) (bool, error) {
	switch h.Ref.(type) {
	case nil:
		return false, nil
	case openHold:
		return true, nil
	}
	if s.local == nil {
		return false, fmt.Errorf("%w: redisstore got a %T", inflight.ErrInvalidHold, h.Ref)
	}
	return local()
}

// decodeInflight reads inflight.lua's reply: {ok, in flight}.
func decodeInflight(reply any) (ok bool, n int64, err error) {
	r, ok2 := reply.([]any)
	if !ok2 || len(r) != 2 {
		return false, 0, badReply("in-flight reply %v", reply)
	}
	flag, ok1 := r[0].(int64)
	n, ok2 = r[1].(int64)
	if !ok1 || !ok2 || (flag != 0 && flag != 1) || n < 0 {
		return false, 0, badReply("in-flight reply %v", reply)
	}
	return flag == 1, n, nil
}

// callInflight sends inflight.lua with args on rkey through the path every
// decision takes (Store.exec), after the checks of a decision: ctx has
// not ended, the store is not closed.
func (s *Store) callInflight(ctx context.Context, alone bool, rkey string, keys []string, args []any) (any, outcome, *node, error) {
	if err := ctx.Err(); err != nil {
		return nil, ignored, nil, err
	}
	if s.shut.Load() {
		return nil, ignored, nil, unavailable(floodgate.ErrClosed, nil)
	}
	return s.exec(ctx, progInflight, alone, rkey, keys, args, nil)
}
