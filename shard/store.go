package shard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Options configures a Store. The zero value (or a nil *Options) means the
// defaults.
type Options struct {
	// Shards is K, the number of shards of each limit: 2 to MaxShards.
	// The default is 16.
	Shards int
	// Probes is P, the most shards a decision asks after its home shard
	// denies: 1 to Shards-1. The default is 2 (at most Shards-1); with
	// Shards-1 a decision is denied only when every shard denies it.
	Probes int
	// MaxKeys is the most keys per limiter whose shard keys and hints the
	// Store keeps; one more evicts one. The default is 4096.
	MaxKeys int
	// Ledger is the number of admissions per key (of Apply, the step of
	// Reserve and of the lease layer's refills) the Store remembers, with
	// the shard that made each, so that a give-back returns units to the
	// shards that admitted them. The default is 32.
	Ledger int
	// MaxHint bounds how long a shard that denied is skipped: its
	// RetryAfter, at most MaxHint. Units given back to a shard through
	// another Store (another process) are seen here when the hint ends.
	// The default is 250 ms.
	MaxHint time.Duration
	// Now is the clock of the hints: the instants until which a shard is
	// known to deny. The default is time.Now; a test on a virtual clock
	// gives it the inner store's clock.
	Now func() time.Time
}

// MaxShards is the most shards a limit may be split over.
const MaxShards = 1024

// Defaults of Options.
const (
	DefaultShards  = 16
	DefaultProbes  = 2
	DefaultMaxKeys = 4096
	DefaultLedger  = 32
	DefaultMaxHint = 250 * time.Millisecond
)

// Store is a floodgate.Store that splits every limit bound to it over
// Shards shards on its inner Store. See the package doc.
type Store struct {
	inner  floodgate.Store
	slots  Slotter
	k, p   int
	max    int
	ledger int
	hint   time.Duration
	now    func() time.Time
	origin time.Time
}

var _ floodgate.Store = (*Store)(nil)

// New returns a Store over inner. It returns an error matching
// floodgate.ErrInvalidConfig for a nil inner store or options out of
// range.
func New(inner floodgate.Store, opts *Options) (*Store, error) {
	if inner == nil {
		return nil, fmt.Errorf("%w: shard: nil inner store", floodgate.ErrInvalidConfig)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	switch {
	case o.Shards == 0:
		o.Shards = DefaultShards
	case o.Shards < 2 || o.Shards > MaxShards:
		return nil, fmt.Errorf("%w: shard: Shards %d, want 2 to %d", floodgate.ErrInvalidConfig, o.Shards, MaxShards)
	}
	switch {
	case o.Probes == 0:
		o.Probes = min(DefaultProbes, o.Shards-1)
	case o.Probes < 1 || o.Probes > o.Shards-1:
		return nil, fmt.Errorf("%w: shard: Probes %d, want 1 to Shards-1 (%d)", floodgate.ErrInvalidConfig, o.Probes, o.Shards-1)
	}
	switch {
	case o.MaxKeys == 0:
		o.MaxKeys = DefaultMaxKeys
	case o.MaxKeys < 0:
		return nil, fmt.Errorf("%w: shard: negative MaxKeys %d", floodgate.ErrInvalidConfig, o.MaxKeys)
	}
	switch {
	case o.Ledger == 0:
		o.Ledger = DefaultLedger
	case o.Ledger < 0 || o.Ledger > 1<<16:
		return nil, fmt.Errorf("%w: shard: Ledger %d, want 1 to 65536", floodgate.ErrInvalidConfig, o.Ledger)
	}
	switch {
	case o.MaxHint == 0:
		o.MaxHint = DefaultMaxHint
	case o.MaxHint < 0:
		return nil, fmt.Errorf("%w: shard: negative MaxHint %v", floodgate.ErrInvalidConfig, o.MaxHint)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Store{inner: inner, k: o.Shards, p: o.Probes, max: o.MaxKeys, ledger: o.Ledger, hint: o.MaxHint, now: o.Now}
	s.slots, _ = inner.(Slotter)
	s.origin = s.now()
	return s, nil
}

// InnerName returns the name under which a Store of k shards binds a
// limiter named name on its inner store: name + ":shard" + k. Its keys
// there are each shard's suffix, ':' and the limiter's key. Another
// limiter bound to that store directly under this name would share the
// shards' state: do not name one so.
func InnerName(name string, k int) string {
	return fmt.Sprintf("%s:shard%d", name, k)
}

// Bind implements floodgate.Store: it splits alg over the shards (see the
// package doc) and binds each shard's part on the inner store under
// InnerName(name, Shards).
func (s *Store) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	if err := floodgate.CheckName(name); err != nil {
		return nil, err
	}
	alg, err := deref(alg)
	if err != nil {
		return nil, err
	}
	if err := alg.Validate(); err != nil {
		return nil, fmt.Errorf("shard: %w", err)
	}
	inner := InnerName(name, s.k)
	if err := floodgate.CheckName(inner); err != nil {
		return nil, fmt.Errorf("shard: the inner name of %q: %w", name, err)
	}
	b := &bound{s: s, quota: alg.Policy().Quota, limits: quotas(alg), bounds: make([]floodgate.Bound, s.k)}
	b.shardQuota = b.quota
	for i := range s.k {
		part, err := split(alg, i, s.k)
		if err != nil {
			return nil, err
		}
		if b.bounds[i], err = s.inner.Bind(inner, part); err != nil {
			return nil, fmt.Errorf("shard: shard %d: %w", i, err)
		}
		if b.bounds[i] == nil {
			return nil, fmt.Errorf("%w: shard: %T bound %v to nothing", floodgate.ErrInvalidConfig, s.inner, part)
		}
		b.shardQuota = min(b.shardQuota, part.Policy().Quota)
	}
	return b, nil
}

// bound is a limiter's shards.
type bound struct {
	s          *Store
	quota      int64   // the limit's Policy().Quota
	limits     []int64 // each limit's quota (one for a single algorithm)
	shardQuota int64   // the smallest shard's quota: the largest take every shard can admit
	bounds     []floodgate.Bound

	// keys holds each key's *entry: a sync.Map, read without a lock on
	// the hot path; mu serializes insertions and n counts the entries.
	keys sync.Map
	mu   sync.Mutex
	n    int
}

// entry is what a bound keeps of a key: its shards' keys and hints, and
// the ledger of its recent admissions.
type entry struct {
	keys []string
	// hints[i] is shard i's: until (ns after the Store's origin) a take of
	// at least units, with a MaxDelay of at most maxDelay, is denied there.
	hints []hint

	mu     sync.Mutex
	ledger []admission // a ring, next the oldest
	next   int
}

// admission is an admission of Apply that the ledger remembers: units
// admitted by shard at the instant at (the Result's At plus Delay), of
// which left may still be given back.
type admission struct {
	at    time.Time
	shard int
	left  int64
}

// record adds an admission to e's ledger, of at most n entries.
func (e *entry) record(a admission, n int) {
	e.mu.Lock()
	if len(e.ledger) < n {
		e.ledger = append(e.ledger, a)
	} else {
		e.ledger[e.next] = a
		e.next = (e.next + 1) % n
	}
	e.mu.Unlock()
}

// claim takes up to n units from the ledger's admissions at or before
// at, newest first, and returns them as the admissions to give back to.
func (e *entry) claim(at time.Time, n int64) []admission {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []admission
	for range len(e.ledger) {
		if n == 0 {
			break
		}
		// The newest admission left that is at or before at.
		best := -1
		for j := range e.ledger {
			a := &e.ledger[j]
			if a.left > 0 && !a.at.After(at) && (best < 0 || a.at.After(e.ledger[best].at)) {
				best = j
			}
		}
		if best < 0 {
			break
		}
		a := &e.ledger[best]
		take := min(a.left, n)
		a.left -= take
		n -= take
		out = append(out, admission{at: a.at, shard: a.shard, left: take})
	}
	return out
}

type hint struct {
	until, units atomic.Int64
	maxDelay     atomic.Int64 // the denied take's MaxDelay: a longer one may be admitted
	retry        atomic.Int64 // when the shard admits the units: until, before MaxHint caps it
}

// entry returns key's entry, placing its shards when it has none.
func (b *bound) entry(key string) *entry {
	if e, ok := b.keys.Load(key); ok {
		return e.(*entry)
	}
	e := &entry{keys: place(b.s.slots, key, b.s.k), hints: make([]hint, b.s.k)}
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.keys.Load(key); ok {
		return old.(*entry)
	}
	if b.n >= b.s.max {
		b.keys.Range(func(k, _ any) bool {
			b.keys.Delete(k)
			b.n--
			return false
		})
	}
	b.keys.Store(key, e)
	b.n++
	return e
}

// check returns the error of a request the shards cannot take, or nil.
func (b *bound) check(key string, req floodgate.Request) error {
	if err := floodgate.CheckKey(key); err != nil {
		return err
	}
	if len(key) > floodgate.MaxKeyLen-sfxLen-1 {
		return fmt.Errorf("%w: %d bytes, at most %d on a sharded limit (each shard's key adds %d)", floodgate.ErrKeyTooLong, len(key), floodgate.MaxKeyLen-sfxLen-1, sfxLen+1)
	}
	if err := floodgate.CheckRequest(req, b.quota); err != nil {
		return err
	}
	return nil
}

func (b *bound) Apply(ctx context.Context, key string, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	if err := b.check(key, req); err != nil {
		return floodgate.Result{}, err
	}
	return b.decide(ctx, key, req, each, false)
}

func (b *bound) Take(ctx context.Context, key string, n int64) (floodgate.Decision, error) {
	req := floodgate.Request{Op: floodgate.OpTake, N: n}
	if err := b.check(key, req); err != nil {
		return floodgate.Decision{}, err
	}
	res, err := b.decide(ctx, key, req, nil, true)
	return res.Decision, err
}

// decide asks the home shard, then, while they deny, up to Probes others
// not known to deny; see the package doc.
func (b *bound) decide(ctx context.Context, key string, req floodgate.Request, each []floodgate.Decision, take bool) (floodgate.Result, error) {
	e := b.entry(key)
	k := b.s.k
	home := int(rand.Uint32N(uint32(k)))
	if req.Op == floodgate.OpSettle {
		if req.N < 0 {
			return b.giveBack(ctx, e, home, req, each)
		}
		// A charge counts on any shard: the home one.
		res, err := b.bounds[home].Apply(ctx, e.keys[home], req, each)
		return b.fix(res, each), err
	}
	if req.Op == floodgate.OpTake && req.N > b.shardQuota {
		return b.spread(ctx, e, home, req, each)
	}
	now := int64(b.s.now().Sub(b.s.origin))
	var (
		denied floodgate.Result
		saved  []floodgate.Decision // denied's decisions, when a later shard wrote each
		first  error
		nd     int // denials
		asked  int
		hinted = int64(-1) // the soonest instant a skipped shard admits
	)
	for j := range k {
		i := home + j
		if i >= k {
			i -= k
		}
		h := &e.hints[i]
		// A shard known to deny this take is skipped, unless every
		// shard is: the last is asked, so that the decision has an
		// answer.
		if u := h.until.Load(); u > now && req.N >= h.units.Load() && int64(req.MaxDelay) <= h.maxDelay.Load() && (asked > 0 || j < k-1) {
			if r := h.retry.Load(); hinted < 0 || r < hinted {
				hinted = r
			}
			continue
		}
		// A shard's take that fails for want of an answer may have been
		// made all the same, and the next shard is asked: UndoLate has
		// the store give it back if it learns so, or the quota would be
		// under-used by it.
		probe := req
		probe.UndoLate = true
		res, err := b.bounds[i].Apply(ctx, e.keys[i], probe, each)
		asked++
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return floodgate.Result{}, err
			}
			if first == nil {
				first = err
			}
		case res.Allowed:
			h.until.Store(0)
			if !take && !req.Check && res.Granted > 0 {
				e.record(admission{at: res.At.Add(res.Delay), shard: i, left: res.Granted}, b.s.ledger)
			}
			return b.fix(res, each), nil
		default:
			h.units.Store(req.N)
			h.maxDelay.Store(int64(req.MaxDelay))
			h.retry.Store(now + int64(res.RetryAfter))
			h.until.Store(now + int64(min(res.RetryAfter, b.s.hint)))
			if nd == 0 || res.RetryAfter < denied.RetryAfter {
				denied = res
				if len(each) > 0 {
					saved = append(saved[:0], each...)
				}
			}
			nd++
		}
		if asked > b.s.p {
			break
		}
	}
	if nd == 0 {
		return floodgate.Result{}, first
	}
	copy(each, saved)
	if hinted >= 0 && time.Duration(hinted-now) < denied.RetryAfter {
		// A shard skipped admits sooner than those asked.
		denied.RetryAfter = time.Duration(hinted - now)
	}
	return b.fix(denied, each), nil
}

// spread takes req.N units, more than the smallest shard holds, from
// several shards: from each in turn, from home on, as many as it has now
// (OpTakeUpTo), until N are taken. When the shards asked have fewer, it
// gives back what it took (at the instants they were taken) and denies:
// all or nothing, like a take on one shard, though units it takes and then
// gives back are unavailable to other decisions for that moment. It admits
// now or not at all (a reservation does not wait here). A give-back that
// fails leaves its units taken until they expire: the quota may be
// under-used, never exceeded. A check asks every shard what it would
// grant and takes nothing.
//
// The Result is the last shard's with Granted N, Remaining the units the
// shards asked had left after the take (or before it, denied), and, for a
// denial, RetryAfter the soonest any shard asked would admit one unit: a
// lower bound of when N would fit.
func (b *bound) spread(ctx context.Context, e *entry, home int, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	k := b.s.k
	need := req.N
	var (
		parts     []admission
		last      floodgate.Result
		remaining int64
		retry     = time.Duration(-1)
		first     error
	)
	for j := 0; j < k && need > 0; j++ {
		i := home + j
		if i >= k {
			i -= k
		}
		res, err := b.bounds[i].Apply(ctx, e.keys[i], floodgate.Request{Op: floodgate.OpTakeUpTo, N: need, Check: req.Check, UndoLate: true}, nil)
		if err != nil {
			if first == nil {
				first = err
			}
			if ctx.Err() != nil {
				break
			}
			continue
		}
		last = res
		if res.Granted > 0 {
			parts = append(parts, admission{at: res.At.Add(res.Delay), shard: i, left: res.Granted})
			need -= res.Granted
		} else if retry < 0 || res.RetryAfter < retry {
			retry = res.RetryAfter
		}
		remaining += res.Remaining
	}
	if need > 0 {
		if !req.Check {
			b.undo(ctx, e, parts)
		}
		if first != nil {
			return floodgate.Result{}, first
		}
		for _, a := range parts {
			remaining += a.left // given back
		}
		last.Allowed, last.Granted, last.Delay = false, 0, 0
		last.Remaining = remaining
		last.RetryAfter = max(retry, 0)
		return b.fix(last, each), nil
	}
	if !req.Check {
		for _, a := range parts {
			e.record(a, b.s.ledger)
			e.hints[a.shard].until.Store(0)
		}
	}
	last.Allowed, last.Granted, last.Delay, last.RetryAfter = true, req.N, 0, 0
	last.Remaining = remaining
	return b.fix(last, each), nil
}

// undo gives back the units of parts, each to its shard at its instant, on
// a context that outlives ctx's cancellation by at most a second.
func (b *bound) undo(ctx context.Context, e *entry, parts []admission) {
	if len(parts) == 0 {
		return
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	for _, a := range parts {
		_, _ = b.bounds[a.shard].Apply(uctx, e.keys[a.shard], floodgate.Request{Op: floodgate.OpSettle, N: -a.left, At: a.at}, nil)
	}
}

// giveBack gives -req.N units back: first to the shards whose admissions
// of this Store's ledger, at or before req.At, newest first, hold them,
// each part to its shard at its admission's instant; then what is not
// back yet (units another process or Take admitted, or ledger parts their
// shard no longer counts) to the shards in turn from home, at req.At,
// each taking back what it counts there. Units
// are interchangeable between shards: each shard enforces its part of the
// quota on what it counts, so the limit's admissions net of what the
// shards took back never pass the quota, whichever shard takes them back
// (as on the unsharded limit, a give-back of units the caller was not
// admitted returns units others were). Result.Granted is the units the
// shards took back; the Result is otherwise the last shard's that took
// some back, or the home shard's.
func (b *bound) giveBack(ctx context.Context, e *entry, home int, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	var (
		out  floodgate.Result
		got  bool // out is a shard's Result
		back int64
		errs []error
		give = func(i int, n int64, at time.Time) {
			res, err := b.bounds[i].Apply(ctx, e.keys[i], floodgate.Request{Op: floodgate.OpSettle, N: -n, At: at}, each)
			if err != nil {
				errs = append(errs, fmt.Errorf("shard %d: %w", i, err))
				return
			}
			if !got || res.Granted > 0 {
				out, got = res, true
			}
			if res.Granted > 0 {
				back += res.Granted
				e.hints[i].until.Store(0)
			}
		}
	)
	for _, a := range e.claim(req.At, -req.N) {
		give(a.shard, a.left, a.at)
	}
	// The rest, the ledger's shortfall included (its shard no longer
	// counting a part, another Store having given those units back in
	// turn): the shards take back what they count at req.At, in turn.
	for j := 0; j < b.s.k && back < -req.N; j++ {
		give((home+j)%b.s.k, -req.N-back, req.At)
	}
	if back == 0 && len(errs) > 0 {
		return floodgate.Result{}, errors.Join(errs...)
	}
	out.Granted, out.Allowed = back, back > 0
	return b.fix(out, each), nil
}

// fix sets the quotas of res and each to the whole limit's.
func (b *bound) fix(res floodgate.Result, each []floodgate.Decision) floodgate.Result {
	res.Limit = b.quota
	if len(b.limits) > 1 || len(each) > 0 {
		if res.Binding < len(b.limits) {
			res.Limit = b.limits[res.Binding]
		}
		for j := range min(len(each), len(b.limits)) {
			each[j].Limit = b.limits[j]
		}
	}
	return res
}
