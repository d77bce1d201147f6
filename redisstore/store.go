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
	"github.com/floodgate-go/floodgate/inflight"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/observe"
	"github.com/floodgate-go/floodgate/redisstore/internal/scripts"
	"github.com/floodgate-go/floodgate/step"
)

// Defaults of Options.
const (
	DefaultName             = "redis"
	DefaultPrefix           = "fg:"
	DefaultTimeout          = 50 * time.Millisecond
	DefaultExpiryMargin     = time.Second
	DefaultBreakerThreshold = 10
	DefaultBreakerCooldown  = time.Second
	DefaultBatchPipelines   = 4
	DefaultBatchSize        = 64
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
	// its instants must lie from 1970 to before 2255 (floodgate.CheckTime).
	// WARNING: with Now, every process must agree on the time, and a clock
	// that runs slower than the server's lets state expire early (the TTLs
	// run on the server's clock); Options.ExpiryMargin absorbs the
	// difference.
	Now func() time.Time

	// CalendarClock is the client's clock around which the store gives a
	// floodgate.CalendarWindow's script the window boundaries (the script
	// picks the window holding the decision's instant: Redis TIME, or
	// Now). The default (nil) is Now when it is set, else time.Now. A
	// client clock off the server's by less than a window decides as an
	// exact one; set it to test that.
	CalendarClock func() time.Time

	// Timeout bounds each decision's time in the store, from its wait
	// for a batch (or for one of its node's MaxInFlight slots, unbatched)
	// to Redis' reply, the store's first decisions included. A decision
	// that times out fails with ErrTimeout and goes to the failure
	// policy; it counts against its node's breaker unless the node
	// answered other calls meanwhile (the process sent more at once than
	// the node could carry) or has answered nothing yet and was first
	// called less than a second ago (its connections are being dialled).
	// The bound holds whatever options the go-redis client was built with
	// (see New). A batched decision waits at most three quarters of it
	// for a batch to take it, an unbatched one at most half of it for a
	// slot, so that the call has the rest. The default is 50ms, chosen
	// from measurement: 512 goroutines deciding at once on one store
	// (TestFanIn, a default-options client, a healthy Redis on a loaded
	// 2-core host) timed out 0.08-2.1% of their decisions at 20ms and
	// none of 409,600 at 50ms or 100ms. Lower it where failing fast
	// matters more; NoTimeout turns it off.
	Timeout time.Duration

	// MaxInFlight is the most unbatched calls sent to one node (a
	// Cluster's master, a Ring's shard, the server of a Client) at once;
	// the others wait for a slot, within Timeout. The default is the
	// client's PoolSize (go-redis' default: 10 per CPU, per node), so that
	// calls wait here rather than for a connection inside go-redis. With
	// batching (the default), the one decision a node sends alone takes
	// a slot; the pipelines and the probe of a half-open breaker take
	// none.
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

	// BreakerThreshold is the number of failed calls to a node (errors or
	// timeouts) within the last second or so that open its circuit
	// breaker, provided they are at least half of its calls of that time.
	// Each node has a breaker of its own. The default is 10.
	BreakerThreshold int

	// BreakerCooldown is how long an open breaker sends nothing to its
	// node before it lets one probe through: a PING on a goroutine of the
	// store's, with a deadline of BreakerCooldown (or Timeout if longer),
	// not a decision. The decision that finds the breaker due for a probe
	// fails as when it is open; the probe's reply closes the breaker. The
	// default is 1s.
	BreakerCooldown time.Duration

	// Name names the store in the events of Observer (observe.StoreCall,
	// Failures and BreakerChange carry it): the store label of the
	// metrics adapters, which tells the stores of one process apart. The
	// default is "redis".
	Name string

	// Observer is told of every round trip to Redis (OnStoreCall), of the
	// decisions Redis failed to make, counted per node and policy over
	// Observer.FailureEvery (OnFailures), and of every change of a node's
	// circuit breaker (OnBreaker); see the package doc. The store reads
	// only those three functions and FailureInterval. The default (nil)
	// tells no one, at the cost of a comparison per event.
	Observer *observe.Observer

	// BatchSize is the most decisions sent to one node in one pipeline.
	// A decision goes out at once, on its caller's goroutine and with the
	// single-decision script, when nothing is in flight for its node;
	// decisions that arrive while calls are in flight share the next
	// pipeline (see the package doc). The default is 64; 1 turns batching
	// off: each decision is a call of its own, from its caller's
	// goroutine, within the node's MaxInFlight slots.
	BatchSize int

	// BatchLinger is how long a batch waits for more decisions once it has
	// one. The default, 0, sends what is queued at once: batches form only
	// while earlier calls are in flight, adding no latency.
	BatchLinger time.Duration

	// BatchPipelines is the number of pipelines in flight at once per
	// node when batching, beside the one decision sent alone. The default
	// is 4.
	BatchPipelines int
}

// Store is the Redis floodgate.Store. It is safe for concurrent use. Create
// one with New and Close it when done; the zero value is not usable.
//
// Each decision is one script run (EVALSHA, and EVAL when the server lacks
// the script); see the package documentation.
type Store struct {
	client   redis.UniversalClient // the client calls go through (see derive)
	owned    bool                  // client is the store's own: Close closes it
	guard    bool                  // client ignores context deadlines: call on goroutines
	cluster  *redis.ClusterClient  // client, when it is one
	ring     *redis.Ring           // client, when it is one
	single   *node                 // the one node of any other client
	nodes    nodes                 // the nodes of a Cluster or a Ring
	reloaded atomic.Int64          // when the slot map was last reloaded, in Unix ns
	undone   atomic.Uint64         // takes given back by undo (see UndoneTakes)

	prefix      string
	hashKeys    bool
	now         func() time.Time
	calClock    func() time.Time // Options.CalendarClock, or Now, or time.Now
	timeout     time.Duration
	marginMs    int64
	policy      FailurePolicy
	share       float64
	threshold   int
	cooldown    time.Duration
	maxInFlight int
	batchSize   int
	linger      time.Duration
	pipelines   int
	name        string
	onCall      func(context.Context, observe.StoreCall)     // nil: not observed
	onBreaker   func(context.Context, observe.BreakerChange) // nil: not observed
	failState                                                // OnFailures' counters (failures.go)
	local       *memstore.Store                              // FailLocal's rate limits
	localHolds  *inflight.LocalStore                         // FailLocal's in-flight holds
	wall        func() time.Time                             // the breakers' clock; tests replace it

	life     context.Context // ended by Close: a breaker's probe in flight stops
	stop     context.CancelFunc
	mu       sync.RWMutex // guards closed against inflight.Add
	closed   bool
	shut     atomic.Bool    // closed, read without the lock
	inflight sync.WaitGroup // guarded calls still running
	holds    holdIDs        // package inflight's holds (inflight.go)
	cleaner  cleaner        // removes the holds failed calls left (cleanup.go)
}

var _ floodgate.Store = (*Store)(nil)

// programs are the scripts, and batchPrograms those making a batch of
// decisions of one algorithm (scripts.BatchSource) or of Limits
// (scripts.LimitsBatchSource), indexed by prog. Package inflight's calls
// have no batch script: batched, each is a script call of its own in a
// batch's pipeline.
var (
	programs      = programsOf(scripts.Source, scripts.LimitsSource(), scripts.InflightSource())
	batchPrograms = programsOf(scripts.BatchSource, scripts.LimitsBatchSource(), "")
)

func programsOf(source func(step.Kind) string, limits, inflight string) (p [progInflight + 1]program) {
	for k := step.KindTokenBucket; k <= scripts.KindCalendar; k++ {
		p[k] = newProgram(source(k))
	}
	if limits != "" {
		p[progLimits] = newProgram(limits)
	}
	if inflight != "" {
		p[progInflight] = newProgram(inflight)
	}
	return p
}

// New returns a Store that keeps its state in client, which may be any
// go-redis client: a Client, a ClusterClient (every key of one limiter key
// shares a hash slot), a Ring or a failover client. A nil opts means the
// defaults. The Store does not close client.
//
// go-redis bounds a call by its context only when the client was built
// with ContextTimeoutEnabled; by default it is not, and a stalled Redis
// holds a call for the client's ReadTimeout (3s by default). So when
// client ignores contexts, the store calls Redis through a client of its
// own that honours them: a *redis.Client (a failover client too) is
// cloned with WithTimeout, which shares its connection pool but (go-redis
// v9.22) none of the hooks added to it; a *redis.ClusterClient or
// *redis.Ring is rebuilt from its options, with pools of its own and
// without its hooks, and closed by Close. Any other UniversalClient runs
// each call on a goroutine of its own, which the decision stops waiting
// for at its deadline. Build the client with ContextTimeoutEnabled to have
// the store use it as it is (and its hooks see the store's calls).
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
	if err := o.Observer.Validate(); err != nil {
		return nil, fmt.Errorf("%w: Observer: %w", ErrInvalidOptions, err)
	}
	if o.Name == "" {
		o.Name = DefaultName
	}
	if err := floodgate.CheckName(o.Name); err != nil {
		return nil, fmt.Errorf("%w: Name: %w", ErrInvalidOptions, err)
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
	if o.CalendarClock == nil {
		o.CalendarClock = o.Now
	}
	if o.CalendarClock == nil {
		o.CalendarClock = time.Now
	}
	if o.BreakerThreshold == 0 {
		o.BreakerThreshold = DefaultBreakerThreshold
	}
	if o.BreakerCooldown == 0 {
		o.BreakerCooldown = DefaultBreakerCooldown
	}
	if o.BatchSize == 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.BatchPipelines == 0 {
		o.BatchPipelines = DefaultBatchPipelines
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = poolSize(client)
	}
	s := &Store{
		prefix:      o.Prefix,
		hashKeys:    o.HashKeys,
		now:         o.Now,
		calClock:    o.CalendarClock,
		timeout:     o.Timeout,
		marginMs:    int64((o.ExpiryMargin + time.Millisecond - 1) / time.Millisecond),
		policy:      o.OnFailure,
		share:       o.LocalShare,
		threshold:   o.BreakerThreshold,
		cooldown:    o.BreakerCooldown,
		maxInFlight: o.MaxInFlight,
		batchSize:   o.BatchSize,
		linger:      o.BatchLinger,
		pipelines:   o.BatchPipelines,
		name:        o.Name,
		wall:        time.Now,
	}
	s.life, s.stop = context.WithCancel(context.Background())
	if obs := o.Observer; obs != nil {
		s.onCall, s.onBreaker = obs.OnStoreCall, obs.OnBreaker
		if obs.OnFailures != nil {
			s.onFailures, s.failEvery = obs.OnFailures, obs.FailureEvery()
			// Armed by the first failure (armFailures); stopped by Close.
			s.failTimer = time.AfterFunc(time.Duration(math.MaxInt64), s.failTick)
			s.failTimer.Stop()
		}
	}
	if o.OnFailure == FailLocal {
		local, err := memstore.New(&memstore.Options{Now: o.Now})
		if err != nil {
			return nil, fmt.Errorf("%w: local store: %w", ErrInvalidOptions, err)
		}
		s.local = local
		s.localHolds = inflight.NewLocalStore()
	}
	s.client, s.owned, s.guard = derive(client)
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		s.cluster = c
	case *redis.Ring:
		s.ring = c
	case *redis.Client:
		s.single = s.newNode(c.Options().Addr, c, true)
	default:
		s.single = s.newNode("", nil, true)
	}
	if s.single == nil {
		m := map[string]*node{}
		s.nodes.m.Store(&m)
	}
	return s, nil
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

// Close stops the store's goroutines (the batching pipelines, the timer of
// Observer.OnFailures, the background removal of holds that failed
// in-flight calls may have left, whose queued removals it drops) and
// waits for the calls still running on them (a pipeline carrying takes
// that ask floodgate.Request.UndoLate waits up to 500ms past its
// decisions' deadlines for its reply; the give-backs it would have sent
// then are not);
// decisions after Close fail with floodgate.ErrClosed. It reports to OnFailures the
// failures counted since the last report. It does not close the Redis
// client. Close is safe to call more than once and always returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	was := s.closed
	s.closed = true
	s.shut.Store(true)
	s.mu.Unlock()
	if was {
		return nil
	}
	s.stop()
	// Before the batchers: a removal in flight may be in a batch.
	s.stopCleanup()
	for _, n := range s.all() {
		if n.batch != nil {
			n.batch.stop()
		}
	}
	s.inflight.Wait()
	if s.owned {
		_ = s.client.Close()
	}
	s.stopFailures()
	return nil
}

// BreakerState returns the state of the circuit breaker of the node that
// holds key's state: the master of its slot on a Cluster, its shard on a
// Ring, the one server otherwise. It asks the client which node that is,
// as a decision does. (Every key of one user key shares its hash tag, so
// the node does not depend on the limiter.)
func (s *Store) BreakerState(key string) BreakerState {
	n, err := s.nodeFor(context.Background(), s.Key("-", key, step.KindTokenBucket))
	if err != nil {
		return BreakerClosed
	}
	return n.breaker.current()
}

// Key returns the Redis key holding the state of key for the algorithm
// kind of the limiter named name: Prefix + "{" + key + "}:" + name + ":"
// + the kind's code ("tb", "lb", "fw", "sw", "sl"), such as
// "fg:{user:42}:search:tb", for operators and tests.
func (s *Store) Key(name, key string, kind step.Kind) string {
	return s.prefix + "{" + s.hashed(key) + "}" + singleSuffix(name, kind)
}

// LimitKey returns the Redis key holding the state of key for the limit of
// a floodgate.Limits named name that is the ordinal-th (from 0) of kind
// among its limits: Prefix + "{" + key + "}:" + name + ":L:" + the kind's
// code + ordinal, such as "fg:{user:42}:api:L:tb0" for the first token
// bucket of a Limits named "api". It is apart from the key of a single
// algorithm of the same name (Key). The keys of a Limits share key's hash
// tag, so that one script call decides them all on a Cluster too. A name
// holds no brace (floodgate.CheckName), so the last '}' of a Redis key
// ends its user key, and no two (name, key, kind, ordinal) share a Redis
// key.
func (s *Store) LimitKey(name, key string, kind step.Kind, ordinal int) string {
	return s.prefix + "{" + s.hashed(key) + "}" + limitSuffix(name, kind, ordinal)
}

// Slot returns the Redis Cluster hash slot (0 to 16383) of the Redis keys
// the store keeps for key: every key of its limiters and in-flight
// limits share it, since they share key's hash tag (see Key). It returns
// -1 when they share none: when their hash tag is empty (a key beginning
// with '}', without HashKeys), Redis hashes each whole. Package shard
// places a limit's shards on distinct slots with it.
func (s *Store) Slot(key string) int {
	k := s.prefix + "{" + s.hashed(key) + "}"
	i := strings.IndexByte(k, '{')
	if strings.IndexByte(k[i+1:], '}') == 0 {
		return -1
	}
	return int(slotOf(k))
}

// hashed returns key as the hash tag holds it: its hash with HashKeys.
func (s *Store) hashed(key string) string {
	if s.hashKeys {
		sum := sha256.Sum256([]byte(key))
		key = base64.RawURLEncoding.EncodeToString(sum[:16])
	}
	return key
}

// Bind implements floodgate.Store: it validates name and alg once, so
// that the decisions of a limiter made with floodgate.New skip it. The
// Bound is safe for concurrent use and valid until the Store is closed.
func (s *Store) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	if err := floodgate.CheckName(name); err != nil {
		return nil, err
	}
	a, err := s.resolve(alg)
	if err != nil {
		return nil, err
	}
	b := &bound{s: s, a: a, args: new(argsCache)}
	if a.members == nil {
		b.suffix = singleSuffix(name, a.stateKind())
	} else {
		b.suffixes = make([]string, len(a.members))
		var ords [step.KindCalendarWindow + 1]int
		for i := range a.members {
			k := a.members[i].stateKind()
			b.suffixes[i] = limitSuffix(name, k, ords[k])
			ords[k]++
		}
	}
	if s.policy == FailLocal {
		// The local share under the same name: resolve checked that it
		// is a valid configuration.
		if b.local, err = s.local.Bind(name, a.scale(s.share)); err != nil {
			return nil, err
		}
	}
	return b, nil
}

var _ floodgate.Store = (*Store)(nil)

// resolve validates alg for this store: under FailLocal, its local share
// (for a Limits, each limit's) must be a valid configuration too, or every
// decision of an outage would fail. (Shrinking a bucket's burst keeps its
// rate per unit of burst, so Per grows by 1/LocalShare and may pass
// floodgate.MaxWindow.)
func (s *Store) resolve(alg floodgate.Algorithm) (algo, error) {
	a, err := resolve(alg)
	if err != nil || s.policy != FailLocal {
		return a, err
	}
	if err := a.scale(s.share).Validate(); err != nil {
		return a, fmt.Errorf("%w: FailLocal cannot keep LocalShare %v of %+v: %w", floodgate.ErrInvalidConfig, s.share, alg, err)
	}
	return a, nil
}

// bound is a Store bound to one algorithm under one name.
type bound struct {
	s    *Store
	a    algo
	args *argsCache
	// suffix is what follows the hash tag in the Redis key of a single
	// algorithm; suffixes, those of a Limits' limits, in its order.
	suffix   string
	suffixes []string
	// local is the binding of FailLocal's share on the store's memstore,
	// or nil.
	local floodgate.Bound
}

func (b *bound) Apply(ctx context.Context, key string, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	return b.apply(ctx, key, req, each)
}

// Take is Apply of a plain take: a round trip costs far more than the
// Result it builds.
func (b *bound) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	res, err := b.apply(ctx, key, floodgate.Request{Op: floodgate.OpTake, N: n}, nil)
	return res.Decision, err
}

// apply executes one step: one script call, and the failure policy when
// Redis fails.
func (b *bound) apply(ctx context.Context, key string, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	s, a := b.s, b.a
	if err := floodgate.CheckKey(key); err != nil {
		return floodgate.Result{}, err
	}
	now, err := s.begin(ctx, req, a.quota)
	if err != nil {
		return floodgate.Result{}, err
	}

	rkey, keys := b.redisKeys(key)
	var late func(any)
	if req.UndoLate && !req.Check && req.Op != floodgate.OpSettle && s.policy != FailOpen {
		// (FailOpen admits a decision Redis failed to make: one Redis
		// made late is then rightly counted.)
		late = func(reply any) { b.undo(key, req, reply) }
	}
	reply, o, n, err := s.exec(ctx, a.prog(), false, rkey, keys, b.args.args(a, now, s.calClock, req, s.marginMs), late)
	if err == nil {
		var (
			res  floodgate.Result
			derr error
		)
		if a.members != nil {
			// On the bound's algo: a copy's address would escape.
			res, derr = b.a.decodeLimits(reply, req, each)
		} else {
			res, derr = a.decode(reply, req, each)
		}
		if derr == nil {
			return res, nil
		}
		err = derr
	}
	switch o {
	case ignored:
		return floodgate.Result{}, err
	case failed, timedOut, refused, busy:
		return s.fallback(ctx, n, key, b, req, each, err)
	}
	s.failures(n, false, err)
	return floodgate.Result{}, err
}

// begin checks what every step checks before its script call (req
// against quota, ctx, Close) and returns ARGV's now: the client's clock
// in decimal nanoseconds with Options.Now, "" for Redis TIME.
func (s *Store) begin(ctx context.Context, req floodgate.Request, quota int64) (string, error) {
	if err := floodgate.CheckRequest(req, quota); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if s.shut.Load() {
		return "", unavailable(floodgate.ErrClosed, nil)
	}
	if s.now == nil {
		return "", nil
	}
	t := s.now()
	if err := floodgate.CheckTime(t); err != nil {
		return "", err
	}
	return strconv.FormatInt(t.UnixNano(), 10), nil
}

// redisKeys returns the Redis key of key's state for one of the five
// algorithms, or the keys of a Limits' limits (whose first serves as
// rkey: they share one hash slot).
func (b *bound) redisKeys(key string) (rkey string, keys []string) {
	s := b.s
	if b.a.members == nil {
		return s.prefix + "{" + s.hashed(key) + "}" + b.suffix, nil
	}
	keys = s.limitKeys(key, b.suffixes)
	return keys[0], keys
}

// undoPause is the pause between two attempts of a give-back of undo.
const undoPause = 50 * time.Millisecond

// UndoneTakes returns the number of takes asking
// floodgate.Request.UndoLate that the store gave back because Redis made
// them after their callers had given up (see the package doc, "Takes that
// time out: UndoLate").
func (s *Store) UndoneTakes() uint64 { return s.undone.Load() }

// undo gives back what a take (req, asking UndoLate) on key took, as its
// reply came after its caller gave up: on a goroutine of the store's, an
// OpSettle of Granted units at the instant they were admitted for, sent
// straight to the key's node (no breaker, slot, batch or failure policy:
// no caller waits for it) and waited for up to a second (or Timeout, or
// twice BreakerCooldown, if longer), and sent again every undoPause while
// it could not be sent (no connection). One that fails otherwise is not
// sent again (it may have been made: a give-back made twice would return
// units others were admitted) and leaves the units taken, the quota
// under-used, as without UndoLate. Close ends it.
func (b *bound) undo(key string, req floodgate.Request, reply any) {
	rkey, keys := b.redisKeys(key)
	b.s.giveBack(&b.a, b.args, rkey, keys, req, reply)
}

// giveBack is undo for the algorithm a on rkey (keys, for a Limits):
// the give-back of what the take req made, told by its reply, on a
// goroutine of the store's. args, when not nil, caches a's arguments.
func (s *Store) giveBack(a *algo, args *argsCache, rkey string, keys []string, req floodgate.Request, reply any) {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return
	}
	s.inflight.Add(1)
	s.mu.RUnlock()
	go func() {
		defer s.inflight.Done()
		var (
			res floodgate.Result
			err error
		)
		if a.members != nil {
			res, err = a.decodeLimits(reply, req, make([]floodgate.Decision, len(a.members)))
		} else {
			res, err = a.decode(reply, req, nil)
		}
		if err != nil || !res.Allowed || res.Granted <= 0 {
			return
		}
		ctx, cancel := context.WithTimeout(s.life, max(s.timeout, 2*s.cooldown, time.Second))
		defer cancel()
		now := ""
		if s.now != nil {
			now = strconv.FormatInt(s.now().UnixNano(), 10)
		}
		back := floodgate.Request{Op: floodgate.OpSettle, N: -res.Granted, At: res.At.Add(res.Delay)}
		argv := args.args(*a, now, s.calClock, back, s.marginMs)
		for {
			n, err := s.nodeFor(ctx, rkey)
			if err == nil {
				if _, err = s.runAt(ctx, n, a.prog(), rkey, keys, argv, s.trip(context.Background(), n, 1)); err == nil {
					s.undone.Add(1)
					return
				}
			}
			if !unsent(err) {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(undoPause):
			}
		}
	}()
}

// limitKeys returns the keys of a Limits' limits on key, one per suffix,
// as substrings of one string: two allocations, where a string each made
// one per limit more.
func (s *Store) limitKeys(key string, suffixes []string) []string {
	h := s.hashed(key)
	head := len(s.prefix) + len(h) + 2 // prefix{h}
	n := 0
	for _, suffix := range suffixes {
		n += head + len(suffix)
	}
	var sb strings.Builder
	sb.Grow(n)
	for _, suffix := range suffixes {
		sb.WriteString(s.prefix)
		sb.WriteByte('{')
		sb.WriteString(h)
		sb.WriteByte('}')
		sb.WriteString(suffix)
	}
	all := sb.String()
	keys := make([]string, len(suffixes))
	for i, suffix := range suffixes {
		m := head + len(suffix)
		keys[i], all = all[:m], all[m:]
	}
	return keys
}

// exec sends the script id on rkey (on keys when they are not nil, a
// Limits': rkey is then the first) through the path every call takes: the
// node that serves rkey, its breaker and its MaxInFlight slots (or its
// batches), Options.Timeout, and the classification of errors. It returns
// the reply, or the error with what it says: ignored (the caller's context
// ended, or Close did), a failure of Redis for the caller's failure policy
// (failed, timedOut, refused, busy), or succeeded with an error no policy
// absorbs (an error reply about the data); and the node it called, nil
// when the client could not tell which node serves rkey, for the counts
// of failures. Decisions (apply) and package inflight's calls
// (inflight.go) share it. alone sends the call on its own even when the
// node batches (see call); late, when not nil, is given the reply of a
// call that came after its caller gave up (see call).
func (s *Store) exec(ctx context.Context, id prog, alone bool, rkey string, keys []string, args []any, late func(any)) (any, outcome, *node, error) {
	// One reading of the clock serves the breaker before and after the
	// call: its tallies count calls per second.
	wall := s.wall()
	n, err := s.nodeFor(ctx, rkey)
	if err != nil {
		// The client cannot tell which node serves the key: a Cluster
		// whose slot map could not be loaded.
		o, err := classify(ctx, err)
		if o == ignored {
			return nil, ignored, nil, err
		}
		s.reload(wall)
		return nil, failed, nil, err
	}
	ok, probe, c := n.breaker.allow(wall)
	s.report(ctx, n, c)
	if probe {
		// The half-open breaker's probe is a PING of its own (see
		// probe); the decision fails as when the breaker is open.
		s.probe(n)
		ok = false
	}
	if !ok {
		// Not a round trip: nothing for OnStoreCall; the decision's
		// failure is counted for OnFailures.
		s.reload(wall)
		// Callers that retry a failed decision at once never block, so
		// Go's scheduler preempts them only every 10ms: with a hundred
		// of them on two CPUs, the goroutines that wait to run (the
		// breaker's probe reading its reply, the callers of other nodes)
		// waited for seconds (a decision on an open breaker took 367ms,
		// measured by TestColdStartStall). Yielding here costs a caller
		// well under a microsecond and keeps those waits short.
		runtime.Gosched()
		return nil, failed, n, errBreakerOpen
	}
	seen := n.served.Load()
	reply, err := s.call(ctx, n, id, alone, rkey, keys, args, late)
	if err != nil && s.shut.Load() {
		// Close ended the call (it closes the store's own client).
		s.report(ctx, n, n.breaker.done(wall, false, ignored))
		return nil, ignored, n, unavailable(floodgate.ErrClosed, nil)
	}
	o, err := classify(ctx, err)
	if o == timedOut && (n.busy(seen, err) || n.cold()) {
		// A process may send more at once than its slots or batches
		// carry, and a node's first calls dial its connections: those
		// timeouts say little of Redis (see node.busy and node.cold).
		// Errors (a refused connection) still count.
		o = busy
	}
	s.report(ctx, n, n.breaker.done(wall, false, o))
	switch o {
	case succeeded:
		// One atomic load on the path of every decision; true only
		// after a call to n failed ambiguously and left a hold to
		// remove.
		if n.owed.Load() && n.owed.CompareAndSwap(true, false) {
			s.kickCleanup(n)
		}
	case failed, timedOut, refused:
		s.reload(wall)
	}
	return reply, o, n, err
}
