package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/scripts"
)

// Defaults of Options.
const (
	DefaultPrefix           = "fg:"
	DefaultTimeout          = 20 * time.Millisecond
	DefaultExpiryMargin     = time.Second
	DefaultBreakerThreshold = 10
	DefaultBreakerCooldown  = time.Second
	DefaultBatchPipelines   = 4
)

// NoTimeout, as Options.Timeout, turns the store's per-call timeout off: a
// call then ends when the caller's context ends or when go-redis' own
// timeouts (the client's ReadTimeout, WriteTimeout, PoolTimeout and
// DialTimeout) end it, as calls of a plain go-redis client do. It saves a
// context and a timer per unbatched decision (about 0.6 µs of CPU and five
// allocations, measured on two CPUs); it suits callers whose contexts
// carry their own deadlines.
const NoTimeout = time.Duration(math.MaxInt64)

// Options configures a Store. A nil *Options means the defaults; so does
// the zero value of each field.
type Options struct {
	// Prefix starts every key the store writes: a limiter key k of algorithm
	// kind "tb" lives at Prefix + "{" + k + "}:tb". The default is "fg:". It
	// must not contain '{' or '}', which would change the Cluster hash tag.
	Prefix string

	// HashKeys replaces each key by the first 128 bits of its SHA-256, in
	// base64url (22 bytes), so that long or untrusted keys cost a fixed
	// size in Redis and cannot steer the hash tag. Two keys share a state
	// only if their hashes collide: for a billion keys the odds that any two
	// collide are about 1 in 7·10^20. The default is false: keys are used
	// as they are (at most floodgate.MaxKeyLen bytes).
	HashKeys bool

	// Now is the clock of the decisions. The default (nil) is the Redis
	// server's TIME, read inside each script: one clock for every process,
	// immune to the skew of their clocks. Set it for deterministic tests;
	// its instants must lie between 1970 and 2255. WARNING: with Now,
	// every process must agree on the time, and a clock that runs slower
	// than the server's lets state expire early (the TTLs run on the
	// server's clock); Options.ExpiryMargin absorbs the difference.
	Now func() time.Time

	// Timeout bounds the time Redis takes to answer a call, from when the
	// call goes to Redis (once one of MaxInFlight slots is free, or when
	// its batch is sent) to the reply; a decision that times out fails
	// with ErrTimeout and goes to the failure policy. The default is 20ms:
	// a loopback or same-zone round trip takes well under 1ms, and the
	// rest leaves room for GC pauses and loaded hosts (at 5ms, 512
	// goroutines on a loaded 2-core machine saw a few timeouts per
	// thousand). Lower it where failing fast matters more; NoTimeout turns
	// it off.
	// The first MaxInFlight calls of a Store (the first BatchPipelines
	// batches), which dial connections and load scripts, get at least
	// 250ms, and their timeouts do not count against the breaker.
	// The wait for a slot or a batch is bounded by the caller's context
	// only: a process that sends more decisions at once than its
	// connections carry queues them instead of failing them. The bound
	// holds whatever the client's ContextTimeoutEnabled; when it is false
	// (go-redis' default, which ignores context deadlines), each unbatched
	// call runs on a goroutine of its own that outlives a timed out
	// decision until go-redis' own timeouts end it.
	Timeout time.Duration

	// MaxInFlight is the most unbatched calls sent to Redis at once; the
	// others wait for a slot (see Timeout). The default is the client's
	// PoolSize (go-redis' default: 10 per CPU), so that calls wait here
	// rather than for a connection inside go-redis, where the wait would
	// count against Timeout.
	MaxInFlight int

	// ExpiryMargin is added to the TTL of every key written, which is
	// otherwise the time until the key's quota is fully restored (rounded
	// up to a millisecond). The default is 1s. It absorbs clock differences
	// between the replicas of a failover and between a client clock (Now)
	// and the server's; it also delays the reclaiming of idle keys. It is
	// rounded up to a whole millisecond.
	ExpiryMargin time.Duration

	// OnFailure says what a decision does when Redis cannot make it. The
	// default is FailError: the error is returned. See FailurePolicy.
	OnFailure FailurePolicy

	// LocalShare is the fraction of every quota, in (0, 1], that the local
	// limiter of FailLocal enforces in this process: the burst or capacity
	// (with the rate scaled alike) or the window's limit, rounded down and
	// at least 1. Set it to 1/N when N processes share the quotas, so that
	// together they admit about the quota while Redis is down. The default
	// is 1. WARNING: with N processes and the default, up to N times the
	// quota is admitted during an outage.
	LocalShare float64

	// BreakerThreshold is the number of failed calls (errors or timeouts)
	// within the last second or so that open the circuit breaker, provided
	// they are at least half of the calls of that time. The default is 10.
	BreakerThreshold int

	// BreakerCooldown is how long the open breaker sends nothing to Redis
	// before it lets one probe through. The default is 1s.
	BreakerCooldown time.Duration

	// Observer is told of every failed decision and breaker change. The
	// default (nil) tells no one.
	Observer Observer

	// BatchSize enables batching when at least 2: concurrent decisions are
	// sent to Redis together, up to BatchSize per pipeline, which multiplies
	// throughput under concurrency at the price of a hop through the
	// store's goroutines. The default (0) sends each decision on its own.
	BatchSize int

	// BatchLinger is how long a batch waits for more decisions once it has
	// one. The default, 0, sends what is queued at once: batches form only
	// while earlier pipelines are in flight, adding no latency.
	BatchLinger time.Duration

	// BatchPipelines is the number of pipelines in flight at once when
	// batching. The default is 4.
	BatchPipelines int
}

// Store is the Redis floodgate.Store. It is safe for concurrent use. Create
// one with New and Close it when done; the zero value is not usable.
//
// Each decision is one script run (EVALSHA, and EVAL when the server lacks
// the script); see the package documentation.
type Store struct {
	client   redis.UniversalClient
	prefix   string
	hashKeys bool
	now      func() time.Time
	timeout  time.Duration
	marginMs int64
	policy   FailurePolicy
	share    float64
	cooldown time.Duration
	observer Observer
	guard    bool          // the client ignores context deadlines: call on goroutines
	gate     chan struct{} // MaxInFlight slots for unbatched calls
	local    *memstore.Store
	batch    *batcher
	breaker  breaker
	wall     func() time.Time // the breaker's clock; tests replace it

	mu       sync.RWMutex // guards closed against inflight.Add
	closed   bool
	shut     atomic.Bool    // closed, read without the lock
	started  atomic.Int64   // calls sent to Redis, up to cold
	cold     int64          // the number of first calls with coldTimeout
	inflight sync.WaitGroup // guarded calls still running
}

var _ floodgate.Store = (*Store)(nil)

// coldTimeout is the least timeout of a Store's first calls (as many as
// MaxInFlight, or as many batches as BatchPipelines): they dial the
// connections and load the scripts, several round trips each.
const coldTimeout = 250 * time.Millisecond

// maxUnix bounds the instants of decisions, in seconds since the Unix
// epoch (in 2255): the scripts compute window starts from the instant in
// microseconds, exact below 2^53.
const maxUnix = 9_000_000_000

// programs are the scripts, and batchPrograms those making a batch of
// decisions of one algorithm (scripts.BatchSource), indexed by
// floodgate.Kind. A *redis.Script is safe for concurrent use and immutable
// once made.
var (
	programs      = scriptsOf(scripts.Source)
	batchPrograms = scriptsOf(scripts.BatchSource)
)

func scriptsOf(source func(floodgate.Kind) string) (p [floodgate.KindSlidingLog + 1]*redis.Script) {
	for k := floodgate.KindTokenBucket; k <= floodgate.KindSlidingLog; k++ {
		p[k] = redis.NewScript(source(k))
	}
	return p
}

// New returns a Store that keeps its state in client, which may be any
// go-redis client: a Client, a ClusterClient (every key of one limiter key
// shares a hash slot), a Ring or a failover client. A nil opts means the
// defaults. The Store does not close client.
func New(client redis.UniversalClient, opts *Options) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidOptions)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	switch {
	case strings.ContainsAny(o.Prefix, "{}"):
		return nil, fmt.Errorf("%w: Prefix %q contains a brace", ErrInvalidOptions, o.Prefix)
	case o.Timeout < 0:
		return nil, fmt.Errorf("%w: negative Timeout %v", ErrInvalidOptions, o.Timeout)
	case o.ExpiryMargin < 0:
		return nil, fmt.Errorf("%w: negative ExpiryMargin %v", ErrInvalidOptions, o.ExpiryMargin)
	case o.OnFailure > FailLocal:
		return nil, fmt.Errorf("%w: unknown OnFailure %d", ErrInvalidOptions, o.OnFailure)
	case math.IsNaN(o.LocalShare) || o.LocalShare < 0 || o.LocalShare > 1:
		return nil, fmt.Errorf("%w: LocalShare must be in (0, 1], got %v", ErrInvalidOptions, o.LocalShare)
	case o.BreakerThreshold < 0:
		return nil, fmt.Errorf("%w: negative BreakerThreshold %d", ErrInvalidOptions, o.BreakerThreshold)
	case o.BreakerCooldown < 0:
		return nil, fmt.Errorf("%w: negative BreakerCooldown %v", ErrInvalidOptions, o.BreakerCooldown)
	case o.BatchSize < 0 || o.BatchLinger < 0 || o.BatchPipelines < 0:
		return nil, fmt.Errorf("%w: negative batch option", ErrInvalidOptions)
	case o.MaxInFlight < 0:
		return nil, fmt.Errorf("%w: negative MaxInFlight %d", ErrInvalidOptions, o.MaxInFlight)
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.ExpiryMargin == 0 {
		o.ExpiryMargin = DefaultExpiryMargin
	}
	if o.LocalShare == 0 {
		o.LocalShare = 1
	}
	if o.BreakerThreshold == 0 {
		o.BreakerThreshold = DefaultBreakerThreshold
	}
	if o.BreakerCooldown == 0 {
		o.BreakerCooldown = DefaultBreakerCooldown
	}
	if o.BatchPipelines == 0 {
		o.BatchPipelines = DefaultBatchPipelines
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = poolSize(client)
	}
	s := &Store{
		client:   client,
		prefix:   o.Prefix,
		hashKeys: o.HashKeys,
		now:      o.Now,
		timeout:  o.Timeout,
		marginMs: int64((o.ExpiryMargin + time.Millisecond - 1) / time.Millisecond),
		policy:   o.OnFailure,
		share:    o.LocalShare,
		cooldown: o.BreakerCooldown,
		observer: o.Observer,
		guard:    !honoursContext(client),
		gate:     make(chan struct{}, o.MaxInFlight),
		cold:     int64(o.MaxInFlight),
		breaker:  breaker{threshold: o.BreakerThreshold, cooldown: o.BreakerCooldown},
		wall:     time.Now,
	}
	if o.OnFailure == FailLocal {
		local, err := memstore.New(&memstore.Options{Now: o.Now})
		if err != nil {
			return nil, fmt.Errorf("%w: local store: %w", ErrInvalidOptions, err)
		}
		s.local = local
	}
	if o.BatchSize >= 2 {
		s.batch = newBatcher(client, o.BatchSize, o.BatchLinger, o.BatchPipelines, o.Timeout)
	}
	return s, nil
}

// honoursContext reports whether the client bounds its calls by their
// context's deadline.
func honoursContext(c redis.UniversalClient) bool {
	switch v := c.(type) {
	case *redis.Client:
		return v.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return v.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return v.Options().ContextTimeoutEnabled
	}
	return false
}

// poolSize returns the size of the client's connection pool (per node),
// or go-redis' default when the client does not tell.
func poolSize(c redis.UniversalClient) int {
	n := 0
	switch v := c.(type) {
	case *redis.Client:
		n = v.Options().PoolSize
	case *redis.ClusterClient:
		n = v.Options().PoolSize
	case *redis.Ring:
		n = v.Options().PoolSize
	}
	if n <= 0 {
		n = 10 * runtime.GOMAXPROCS(0)
	}
	return n
}

// Close stops the store's goroutines (the batching pipelines) and waits for
// the calls still running on them; decisions after Close fail with
// ErrClosed. It does not close the Redis client. Close is safe to call more
// than once and always returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	was := s.closed
	s.closed = true
	s.shut.Store(true)
	s.mu.Unlock()
	if was {
		return nil
	}
	if s.batch != nil {
		s.batch.stop()
	}
	s.inflight.Wait()
	return nil
}

// BreakerState returns the state of the circuit breaker.
func (s *Store) BreakerState() BreakerState { return s.breaker.current() }

// Key returns the Redis key holding the state of key for the algorithm
// kind, for operators and tests.
func (s *Store) Key(key string, kind floodgate.Kind) string {
	if s.hashKeys {
		sum := sha256.Sum256([]byte(key))
		key = base64.RawURLEncoding.EncodeToString(sum[:16])
	}
	return s.prefix + "{" + key + "}:" + kind.String()
}

// Apply executes one step; see floodgate.Store. It makes one round trip to
// Redis (two when the server lacks the script). When Redis fails, the
// failure policy (Options.OnFailure) decides.
func (s *Store) Apply(ctx context.Context, key string, alg floodgate.Algorithm, req floodgate.Request) (floodgate.Result, error) {
	a, err := resolve(alg)
	if err != nil {
		if kerr := floodgate.CheckKey(key); kerr != nil {
			return floodgate.Result{}, kerr
		}
		return floodgate.Result{}, err
	}
	return s.apply(ctx, key, a, nil, req)
}

// Bind implements floodgate.Binder: it validates alg once, so that the
// decisions of a limiter made with floodgate.New skip it. The Bound is safe
// for concurrent use and valid until the Store is closed.
func (s *Store) Bind(alg floodgate.Algorithm) (floodgate.Bound, error) {
	a, err := resolve(alg)
	if err != nil {
		return nil, err
	}
	return &bound{s: s, a: a, args: new(argsCache)}, nil
}

var _ floodgate.Binder = (*Store)(nil)

// bound is a Store bound to one algorithm.
type bound struct {
	s    *Store
	a    algo
	args *argsCache
}

func (b *bound) Apply(ctx context.Context, key string, req floodgate.Request) (floodgate.Result, error) {
	return b.s.apply(ctx, key, b.a, b.args, req)
}

// apply executes one step of a resolved algorithm; args caches its
// arguments, or is nil.
func (s *Store) apply(ctx context.Context, key string, a algo, args *argsCache, req floodgate.Request) (floodgate.Result, error) {
	if err := floodgate.CheckKey(key); err != nil {
		return floodgate.Result{}, err
	}
	if err := checkRequest(req, a.quota); err != nil {
		return floodgate.Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return floodgate.Result{}, err
	}
	if s.shut.Load() {
		return floodgate.Result{}, unavailable(ErrClosed, nil)
	}
	now := ""
	if s.now != nil {
		t := s.now()
		if t.Unix() < 0 || t.Unix() >= maxUnix {
			// As the reference Steps do; the scripts' window arithmetic
			// is exact up to 2255.
			return floodgate.Result{}, fmt.Errorf("%w: the clock (Options.Now) reads %v, outside 1970 to 2255", floodgate.ErrInvalidConfig, t)
		}
		now = strconv.FormatInt(t.UnixNano(), 10)
	}

	// One reading of the clock serves the breaker before and after the
	// call: its tallies count calls per second.
	wall := s.wall()
	ok, probe, c := s.breaker.allow(wall)
	s.report(c)
	if !ok {
		return s.fallback(ctx, key, a, req, unavailable(ErrBreakerOpen, nil))
	}
	reply, err, cold := s.call(ctx, a.kind, s.Key(key, a.kind), args.args(a, now, req, s.marginMs))
	o, err := classify(ctx, err)
	if o == timedOut && cold {
		// The first calls dial connections and load the scripts: their
		// timeouts say little of Redis. Errors (a refused connection)
		// still count.
		s.report(s.breaker.done(wall, probe, ignored))
	} else {
		s.report(s.breaker.done(wall, probe, o))
	}
	if err == nil {
		res, derr := a.decode(reply, req)
		if derr == nil {
			return res, nil
		}
		err = derr
	}
	switch o {
	case ignored:
		return floodgate.Result{}, err
	case failed, timedOut:
		return s.fallback(ctx, key, a, req, err)
	}
	s.observe(Event{Kind: EventError, Key: key, Err: err})
	return floodgate.Result{}, err
}
