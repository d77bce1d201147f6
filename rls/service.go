package rls

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/headers"
	"github.com/floodgate-go/floodgate/redisstore"
)

// Defaults of Options.
const (
	DefaultTimeout        = 8 * time.Millisecond
	DefaultNearLimitRatio = 0.8
	DefaultMaxStatKeys    = 10000
	maxOverrides          = 1024
)

// StoreErrorPolicy says what a descriptor whose store call failed counts as.
type StoreErrorPolicy uint8

const (
	// FailOpen counts the descriptor as within its limit (status OK), as
	// Envoy does when the service fails and failure_mode_deny is false.
	FailOpen StoreErrorPolicy = iota
	// FailClosed counts the descriptor as over its limit.
	FailClosed
	// FailError answers the call with a gRPC UNAVAILABLE error, leaving
	// the decision to Envoy's failure_mode_deny.
	FailError
)

// Options configures a Service. A nil *Options means the defaults; so does
// the zero value of each field.
type Options struct {
	// Now is the clock the durations of fixed windows without a store
	// call (requests_per_unit 0) are measured on; the store's own clock
	// (memstore.Options.Now, Redis TIME) measures the others. The default
	// is time.Now. Set it with the store's for deterministic tests.
	Now func() time.Time

	// Timeout bounds the store calls of one ShouldRateLimit, all its
	// descriptors and their refunds together, so that the reply comes
	// within Envoy's 20ms default timeout whatever the store does; what is
	// left undecided when it ends goes to OnStoreError. The default is
	// 8ms: with a store timeout of at most 10ms, it leaves 12ms of Envoy's
	// 20ms for gRPC and a loaded host, so that a reply comes within 15ms
	// even when the store does not answer.
	Timeout time.Duration

	// OnStoreError says how a descriptor whose store call failed or timed
	// out counts. The default is FailOpen.
	OnStoreError StoreErrorPolicy

	// Headers are the rate-limit fields added to Envoy's response
	// (response_headers_to_add) for the binding descriptor: the IETF
	// RateLimit and RateLimit-Policy fields by default; headers.StyleDraft
	// adds the RateLimit-Limit/-Remaining/-Reset trio and headers.StyleX the
	// X-RateLimit-* one. Retry-After is added to every OVER_LIMIT answer.
	// NoHeaders sends none of them.
	Headers   headers.Style
	NoHeaders bool

	// Parallel decides a call's descriptors at once, each on a goroutine
	// of its own (a take that joins a coalesced call in flight waits
	// without one), and refunds the ones taken when any is denied: one
	// store round trip of latency instead of one per descriptor. The
	// default decides them in order, stopping at the first denial, which
	// spends less store work on denials. On Redis with Coalesce it served
	// more calls (peertest's TestSideBySide, two descriptors a call, on
	// the 2-core build machine, medians of four runs: 17,356 calls/s at
	// once against 16,973 in order at 32 calls at a time, 23,045 against
	// 22,735 at 128; README.md, Speed); memstore gains nothing from
	// goroutines. floodgate-rls sets it on Redis (its -descriptors flag).
	Parallel bool

	// Joint decides a call's descriptors as one step of the store when
	// it can: on a redisstore.Store (Store.ApplyJoint), one script call on
	// a single Redis, or on a Cluster when their keys share a slot. The
	// request is admitted only if every descriptor is within its limit,
	// and a denial spends nothing at any moment, where the other modes
	// take and then refund (a concurrent request may meet the units taken
	// before their refund and be denied). It applies to the calls of 2 to
	// 8 limited descriptors with one hits_addend, none in shadow or quota
	// mode; the others, and every call on another store, are decided as
	// Parallel says. It is slower on Redis: in peertest's TestSideBySide
	// (two descriptors a call), 0.89 and 0.93 times the calls a second of
	// Parallel with Coalesce at 32 calls at a time, 0.86 at 128 (README.md).
	// floodgate-rls sets it with -descriptors joint.
	Joint bool

	// Coalesce decides the takes of one fixed-window counter that arrive
	// while a store call for it is in flight together, once it returns,
	// as one take of their sum, with the answer each would get alone (see
	// coalescer): a counter every request carries (a route or a host
	// limit) then costs one store call per round trip rather than one per
	// request. It pays on a store behind a network (redisstore, where a
	// script run per descriptor is most of Redis' work; see README.md,
	// Speed); on memstore, whose calls take a microsecond, it costs more
	// than it saves. The default is false; floodgate-rls sets it for
	// Redis.
	Coalesce bool

	// NearLimitRatio is the share of a limit above which units count as
	// near_limit in the stats, as envoyproxy/ratelimit's NEAR_LIMIT_RATIO.
	// The default is 0.8.
	NearLimitRatio float64

	// MaxStatKeys bounds the stat keys kept (detailed_metric makes one
	// per descriptor value); the hits of keys beyond it are counted under
	// the limit's own key. The default is 10,000.
	MaxStatKeys int

	// Logger receives configuration changes and store failures (at most
	// a line a second for these, with the number left unlogged). The
	// default is slog.Default().
	Logger *slog.Logger
}

// Service is Envoy's rate limit service (envoy.service.ratelimit.v3) on a
// floodgate Store. It is safe for concurrent use. Create one with New; the
// zero value is not usable.
type Service struct {
	pb.UnimplementedRateLimitServiceServer

	store floodgate.Store
	opts  Options
	state atomic.Pointer[state]
	mu    sync.Mutex // serialises SetConfig

	overrides sync.Map // overrideKey -> *floodgate.Limiter
	nOverride atomic.Int64
	stats     *Stats

	coalesce coalescer
	refunds  sync.WaitGroup
	closed   atomic.Bool
	warned   atomic.Int64  // when warn last logged, in Unix ns
	unlogged atomic.Uint64 // the failures warn did not log since
}

var _ pb.RateLimitServiceServer = (*Service)(nil)

// state is a configuration with the limiters of its limits.
type state struct {
	cfg      *Config
	limiters map[*Limit]*floodgate.Limiter
}

// New returns a Service deciding on store under cfg (nil: no configuration
// yet; every call fails with UNAVAILABLE until SetConfig). It returns an
// error matching ErrConfig when cfg's limits cannot run on store.
func New(store floodgate.Store, cfg *Config, opts *Options) (*Service, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrConfig)
	}
	s := &Service{store: store}
	if opts != nil {
		s.opts = *opts
	}
	if s.opts.Now == nil {
		s.opts.Now = time.Now
	}
	if s.opts.Timeout <= 0 {
		s.opts.Timeout = DefaultTimeout
	}
	if s.opts.NearLimitRatio <= 0 {
		s.opts.NearLimitRatio = DefaultNearLimitRatio
	}
	if s.opts.MaxStatKeys <= 0 {
		s.opts.MaxStatKeys = DefaultMaxStatKeys
	}
	if s.opts.Headers == 0 {
		s.opts.Headers = headers.StyleIETF
	}
	if s.opts.Logger == nil {
		s.opts.Logger = slog.Default()
	}
	s.stats = newStats(s.opts.MaxStatKeys)
	// A descriptor whose take fails counts as within its limit only under
	// FailOpen; otherwise the request is refused, so a take the store made
	// after all (a timeout after Redis read it) is given back.
	s.coalesce.undo = s.opts.OnStoreError != FailOpen
	if cfg != nil {
		if err := s.SetConfig(cfg); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Stats returns the service's counters, under envoyproxy/ratelimit's names.
func (s *Service) Stats() *Stats { return s.stats }

// Config returns the configuration in force, nil before the first.
func (s *Service) Config() *Config {
	if st := s.state.Load(); st != nil {
		return st.cfg
	}
	return nil
}

// SetConfig puts cfg in force for the calls that start after it returns.
// Counters carry over: a limit's state belongs to its descriptor path
// (the limiter is named after the stat key), so a reload that changes a
// requests_per_unit continues from what was counted. It returns an error
// matching ErrConfig, and changes nothing, when a limit cannot run on the
// store.
func (s *Service) SetConfig(cfg *Config) error {
	if cfg == nil {
		return fmt.Errorf("%w: nil configuration", ErrConfig)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &state{cfg: cfg, limiters: map[*Limit]*floodgate.Limiter{}}
	for _, d := range cfg.domains {
		if err := s.build(st, d); err != nil {
			return err
		}
	}
	s.state.Store(st)
	s.stats.configLoadSuccess.Add(1)
	s.opts.Logger.Info("rls: configuration loaded", "domains", cfg.Domains())
	return nil
}

func (s *Service) build(st *state, n *node) error {
	if l := n.limit; l != nil && l.alg != nil {
		lim, err := floodgate.New(s.store, l.alg, &floodgate.Options{Name: limiterName("rls:" + l.FullKey)})
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrConfig, l.FullKey, err)
		}
		st.limiters[l] = lim
	}
	for _, c := range n.children {
		if err := s.build(st, c); err != nil {
			return err
		}
	}
	return nil
}

// limiterName makes a valid floodgate name of s: braces escaped, and a
// hash when it is too long.
func limiterName(s string) string {
	s = strings.NewReplacer("{", "%7B", "}", "%7D").Replace(s)
	if len(s) > floodgate.MaxNameLen {
		sum := sha256.Sum256([]byte(s))
		s = s[:64] + "#" + base64.RawURLEncoding.EncodeToString(sum[:])
	}
	return s
}

// Close waits for the refunds still in flight. It does not close the store.
func (s *Service) Close() error {
	s.closed.Store(true)
	s.coalesce.wait()
	s.refunds.Wait()
	return nil
}

// item is one descriptor of a call being decided.
type item struct {
	limit   *Limit
	lim     *floodgate.Limiter
	key     string
	statKey string
	hits    uint64

	unlimited bool // unlimited: true; limit is nil
	decided   bool
	failed    bool
	taken     bool // units were taken and must be refunded on a denial
	res       floodgate.Result
	allowed   bool
	remaining int64
	reset     time.Duration
}

// ShouldRateLimit decides a request's descriptors as one: it is admitted
// (overall_code OK) only if every descriptor is within its limit, and a
// denied request spends nothing. See the package doc.
func (s *Service) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		s.stats.serviceError.Add(1)
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		s.stats.serviceError.Add(1)
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	st := s.state.Load()
	if st == nil {
		s.stats.serviceError.Add(1)
		return nil, status.Error(codes.Unavailable, "no rate limit configuration loaded")
	}
	descs := req.GetDescriptors()
	items := make([]item, len(descs))
	var replacing map[string]bool
	// A descriptor's entries, on the stack when few (lookup and entryKey
	// keep none of them).
	var entryBuf [8]Entry
	for i, d := range descs {
		it := &items[i]
		entries := entryBuf[:0]
		for _, e := range d.GetEntries() {
			entries = append(entries, Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		if o := d.GetLimit(); o != nil {
			lim, l, err := s.override(req.GetDomain(), entries, o)
			if err != nil {
				s.stats.serviceError.Add(1)
				return nil, status.Error(codes.InvalidArgument, err.Error())
			}
			it.limit, it.lim = l, lim
			it.key = req.GetDomain() + "|" + entryKey(entries, nil)
		} else {
			m := st.cfg.lookup(req.GetDomain(), entries)
			if m.limit == nil {
				continue
			}
			it.limit, it.lim = m.limit, st.limiters[m.limit]
			it.key = entryKey(entries, m.patterns)
			it.statKey = m.statKey
		}
		for _, r := range it.limit.Replaces {
			if replacing == nil {
				replacing = map[string]bool{}
			}
			replacing[r] = true
		}
		if it.limit.Unlimited {
			it.unlimited = true
			it.limit = nil
		}
		if hv := d.GetHitsAddend(); hv != nil {
			it.hits = hv.GetValue()
		} else {
			it.hits = max(1, uint64(req.GetHitsAddend()))
		}
	}
	for i := range items {
		if l := items[i].limit; l != nil && l.Name != "" && replacing[l.Name] {
			items[i].limit = nil
		}
	}

	bctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()

	joint := false
	if j, ok := s.store.(joiner); ok && s.opts.Joint {
		var err error
		if joint, err = s.decideJoint(bctx, j, items); err != nil {
			return nil, err
		}
	}
	switch {
	case joint:
	case s.opts.Parallel:
		if err := s.decideParallel(bctx, items); err != nil {
			return nil, err
		}
	default:
		if err := s.decideInOrder(bctx, items); err != nil {
			return nil, err
		}
	}

	resp := &pb.RateLimitResponse{
		OverallCode: pb.RateLimitResponse_OK,
		Statuses:    make([]*pb.RateLimitResponse_DescriptorStatus, len(items)),
	}
	binding := -1
	for i := range items {
		it := &items[i]
		switch {
		case it.unlimited:
			resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
			continue
		case it.limit == nil:
			resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
			continue
		}
		ds := &pb.RateLimitResponse_DescriptorStatus{
			Code: pb.RateLimitResponse_OK,
			CurrentLimit: &pb.RateLimitResponse_RateLimit{
				Name:            it.limit.Name,
				RequestsPerUnit: it.limit.RequestsPerUnit,
				Unit:            it.limit.Unit,
			},
			LimitRemaining:     uint32(min(max(it.remaining, 0), math.MaxUint32)),
			DurationUntilReset: durationpb.New(ceilSecond(it.reset)),
		}
		over := !it.allowed
		if over {
			// As envoyproxy/ratelimit reports every descriptor over its
			// limit, shadow and quota mode included.
			ds.LimitRemaining = 0
		}
		switch {
		case over && it.limit.QuotaMode:
			ds.DurationUntilReset = nil
		case over && !it.limit.ShadowMode:
			ds.Code = pb.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
		}
		resp.Statuses[i] = ds
		if binding < 0 || s.binds(it, &items[binding], resp.Statuses[binding]) {
			binding = i
		}
	}
	if binding >= 0 {
		resp.ResponseHeadersToAdd = s.headers(&items[binding], resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT)
	}
	return resp, nil
}

// decideInOrder takes each descriptor in order and stops at the first
// denial; the descriptors after it are checked (reported as they stand,
// spending nothing) and the ones taken are refunded.
func (s *Service) decideInOrder(ctx context.Context, items []item) error {
	denied := -1
	for i := range items {
		it := &items[i]
		if it.limit == nil {
			continue
		}
		s.decide(ctx, it, false)
		if it.failed && s.opts.OnStoreError == FailError {
			s.refund(ctx, items)
			return status.Errorf(codes.Unavailable, "rate limit store failed for %s", it.limit.FullKey)
		}
		if blocks(it) {
			denied = i
			break
		}
	}
	if denied >= 0 {
		for i := denied + 1; i < len(items); i++ {
			if items[i].limit != nil {
				s.decide(ctx, &items[i], true)
			}
		}
		s.refund(ctx, items)
	}
	return nil
}

// decideParallel takes every descriptor at once, the first on the
// caller's goroutine, and refunds the ones taken when any is denied: one
// store round trip of latency instead of one per descriptor.
func (s *Service) decideParallel(ctx context.Context, items []item) error {
	first := -1
	var wg sync.WaitGroup
	// The takes that joined a call in flight for their counter wait for
	// it without a goroutine of their own.
	type waiting struct {
		i int
		j *joined
	}
	var joinedBuf [4]waiting
	joins := joinedBuf[:0]
	for i := range items {
		it := &items[i]
		if it.limit == nil {
			continue
		}
		if s.coalesces(it) {
			if j := s.coalesce.join(ctx, it.lim, it.key, int64(min(it.hits, math.MaxInt64))); j != nil {
				joins = append(joins, waiting{i, j})
				continue
			}
		}
		if first < 0 {
			first = i
			continue
		}
		wg.Go(func() { s.decide(ctx, it, false) })
	}
	if first >= 0 {
		s.decide(ctx, &items[first], false)
	}
	for _, w := range joins {
		it := &items[w.i]
		it.decided = true
		res, err := s.coalesce.await(ctx, w.j, it.lim, it.key, int64(min(it.hits, math.MaxInt64)))
		s.record(ctx, it, false, res, err)
	}
	wg.Wait()
	denied, failed := false, ""
	for i := range items {
		it := &items[i]
		if it.limit == nil {
			continue
		}
		if it.failed && s.opts.OnStoreError == FailError && failed == "" {
			failed = it.limit.FullKey
		}
		denied = denied || blocks(it)
	}
	if denied || failed != "" {
		s.refund(ctx, items)
	}
	if failed != "" {
		return status.Errorf(codes.Unavailable, "rate limit store failed for %s", failed)
	}
	return nil
}

// joiner is a store that decides several limiters' takes as one step
// (redisstore.Store.ApplyJoint).
type joiner interface {
	ApplyJoint(ctx context.Context, steps []redisstore.JointStep, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error)
}

// decideJoint decides the items as one joint step when they can be: two
// to eight limited items, none in shadow or quota mode, all of the same
// hits, whose keys the store can decide in one script call. It reports
// whether it decided them; the error is FailError's.
func (s *Service) decideJoint(ctx context.Context, j joiner, items []item) (bool, error) {
	var idx [8]int
	n := 0
	var hits uint64
	for i := range items {
		it := &items[i]
		if it.limit == nil {
			continue
		}
		if n == len(idx) || it.lim == nil || it.limit.ShadowMode || it.limit.QuotaMode || it.hits == 0 || n > 0 && it.hits != hits {
			return false, nil
		}
		hits = it.hits
		idx[n] = i
		n++
	}
	if n < 2 {
		return false, nil
	}
	var stepBuf [8]redisstore.JointStep
	steps := stepBuf[:n]
	for k, i := range idx[:n] {
		it := &items[i]
		steps[k] = redisstore.JointStep{Name: it.lim.Name(), Alg: it.lim.Algorithm(), Key: it.key}
	}
	var each [8]floodgate.Decision
	req := floodgate.Request{Op: floodgate.OpTake, N: int64(min(hits, math.MaxInt64)), UndoLate: s.coalesce.undo}
	res, err := j.ApplyJoint(ctx, steps, req, each[:n])
	if errors.Is(err, redisstore.ErrNotJoint) {
		return false, nil
	}
	failed := ""
	for k, i := range idx[:n] {
		it := &items[i]
		it.decided = true
		if err != nil {
			s.fail(it, err)
			if failed == "" {
				failed = it.limit.FullKey
			}
			continue
		}
		s.record(ctx, it, false, floodgate.Result{Decision: each[k], At: res.At}, nil)
		if it.taken && !res.Allowed {
			// A denied joint step took nothing: reported as a refunded
			// take is, with nothing to refund.
			it.taken = false
			it.unspent()
		}
	}
	if failed != "" && s.opts.OnStoreError == FailError {
		return true, status.Errorf(codes.Unavailable, "rate limit store failed for %s", failed)
	}
	return true, nil
}

// blocks reports whether a decided item denies the request: over its limit
// and in neither shadow nor quota mode.
func blocks(it *item) bool {
	return !it.allowed && !it.limit.ShadowMode && !it.limit.QuotaMode
}

// binds reports whether it binds rather than b: an OVER_LIMIT descriptor
// before an OK one, the longest wait among those over, the fewest units
// left among those within (the first on a tie, as envoyproxy/ratelimit
// picks the descriptor of its headers).
func (s *Service) binds(it, b *item, bs *pb.RateLimitResponse_DescriptorStatus) bool {
	itOver := !it.allowed && !it.limit.ShadowMode && !it.limit.QuotaMode
	bOver := bs.Code == pb.RateLimitResponse_OVER_LIMIT
	switch {
	case itOver != bOver:
		return itOver
	case itOver:
		return it.reset > b.reset
	}
	return it.remaining < b.remaining
}

// decide takes (or, with check, checks) the item's units and records what
// it reports.
func (s *Service) decide(ctx context.Context, it *item, check bool) {
	it.decided = true
	if it.lim == nil {
		// requests_per_unit 0: a fixed window that admits nothing.
		it.allowed, it.remaining = false, 0
		it.reset = untilWindowEnd(s.opts.Now(), it.limit.Window)
		s.countDecision(it)
		return
	}
	hits := int64(min(it.hits, math.MaxInt64))
	req := floodgate.Request{Op: floodgate.OpTake, N: hits, Check: check, UndoLate: s.coalesce.undo}
	if hits == 0 {
		req.N, req.Check = 1, true
	}
	var res floodgate.Result
	var err error
	if !req.Check && s.coalesces(it) {
		res, err = s.coalesce.take(ctx, it.lim, it.key, hits)
	} else {
		res, err = it.lim.Apply(ctx, it.key, req, nil)
	}
	s.record(ctx, it, check, res, err)
}

// record records what the store answered for an item: res and err of
// the take (or, with check, the check) of its hits.
func (s *Service) record(ctx context.Context, it *item, check bool, res floodgate.Result, err error) {
	hits := int64(min(it.hits, math.MaxInt64))
	if errors.Is(err, floodgate.ErrExceedsLimit) {
		// More units than the limit can ever admit: over the limit, and
		// the remaining count is what a check of one unit reports.
		res, err = it.lim.Apply(ctx, it.key, floodgate.Request{Op: floodgate.OpTake, N: 1, Check: true}, nil)
		if err == nil {
			if res.Allowed {
				res.Remaining++
			}
			res.Allowed = false
			if res.RetryAfter == 0 {
				res.RetryAfter = res.ResetAfter
			}
		}
	}
	if err != nil {
		s.fail(it, err)
		return
	}
	it.res = res
	it.allowed = res.Allowed
	it.remaining = res.Remaining
	switch {
	case hits == 0 && res.Allowed:
		// The check asked about one unit; nothing is spent.
		it.remaining++
	case check && res.Allowed:
		// A descriptor checked after another's denial reports what is
		// left, as the refunded ones do: the request spends nothing.
		it.remaining += hits
	}
	if hits == 0 {
		// hits_addend 0 never spends, so it is never over a limit it has
		// not passed (envoyproxy/ratelimit: the count after adding 0 is
		// at most the limit).
		it.allowed = true
	}
	it.taken = res.Allowed && !check && hits > 0
	switch a := it.limit.alg.(type) {
	case floodgate.FixedWindow:
		at := res.At
		if at.IsZero() {
			at = s.opts.Now()
		}
		it.reset = untilWindowEnd(at, a.Window)
	default:
		if it.allowed {
			it.reset = res.ResetAfter
		} else {
			it.reset = res.RetryAfter
		}
	}
	s.countDecision(it)
}

// coalesces reports whether the takes of an item are coalesced (see
// coalescer): with Options.Coalesce, those of fixed windows, whose answers
// do not depend on how the units of one instant are split, spending units.
func (s *Service) coalesces(it *item) bool {
	if !s.opts.Coalesce || it.lim == nil || it.hits == 0 {
		return false
	}
	switch it.limit.alg.(type) {
	case floodgate.FixedWindow, floodgate.CalendarWindow:
		return true
	}
	return false
}

// fail applies OnStoreError to an item whose store call failed.
func (s *Service) fail(it *item, err error) {
	it.failed = true
	s.stats.storeError.Add(1)
	s.warn("rls: store call failed", it.limit.FullKey, err)
	it.remaining = 0
	it.reset = it.limit.Window
	it.allowed = s.opts.OnStoreError != FailClosed
	limit := limitOf(it.limit)
	if it.allowed {
		s.count(it, 0, 0)
	} else {
		s.count(it, limit, limit+it.hits)
	}
}

// warn logs a store failure, at most once a second with the number of
// failures left unlogged since the last line: when the store is down
// every call fails, and a line per call would cost the service more CPU
// than the calls (the stats count every failure).
func (s *Service) warn(msg, key string, err error) {
	now := s.opts.Now().UnixNano()
	last := s.warned.Load()
	if now-last < int64(time.Second) || !s.warned.CompareAndSwap(last, now) {
		s.unlogged.Add(1)
		return
	}
	s.opts.Logger.Warn(msg, "key", key, "err", err, "unlogged", s.unlogged.Swap(0))
}

// limitOf is the quota of l in units: the burst of a token bucket,
// requests_per_unit otherwise.
func limitOf(l *Limit) uint64 {
	if tb, ok := l.alg.(floodgate.TokenBucket); ok {
		return uint64(tb.Burst)
	}
	return uint64(l.RequestsPerUnit)
}

// refund gives back the units of every item taken, after a denial: the
// request is refused, so it spends nothing. Refunds that the budget of the
// call cannot carry finish in the background (Close waits for them).
func (s *Service) refund(ctx context.Context, items []item) {
	for i := range items {
		it := &items[i]
		if !it.taken {
			continue
		}
		it.taken = false
		req := floodgate.Request{Op: floodgate.OpSettle, N: -int64(it.hits), At: it.res.At.Add(it.res.Delay)}
		if _, err := it.lim.Apply(ctx, it.key, req, nil); err != nil {
			if ctx.Err() == nil || s.closed.Load() {
				s.stats.storeError.Add(1)
				s.warn("rls: refund failed", it.limit.FullKey, err)
				continue
			}
			// The call's budget ran out: finish on a context of its own.
			lim, key := it.lim, it.key
			s.refunds.Add(1)
			go func() {
				defer s.refunds.Done()
				rctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				if _, err := lim.Apply(rctx, key, req, nil); err != nil {
					s.stats.storeError.Add(1)
					s.warn("rls: refund failed", key, err)
				}
			}()
		}
		it.unspent()
	}
}

// unspent reports a descriptor taken as it stands without its units:
// after their refund, or after a denied joint step that took none.
func (it *item) unspent() {
	it.remaining = min(it.remaining+int64(it.hits), int64(it.limit.RequestsPerUnit))
	if tb, ok := it.limit.alg.(floodgate.TokenBucket); ok {
		it.remaining = min(it.remaining, tb.Burst)
	}
}

// count adds the item's hits to its stats as envoyproxy/ratelimit counts
// them: total_hits, and within_limit, near_limit, over_limit and
// shadow_mode from the units used before and after the hits (after is more
// than the limit for a denial, which floodgate does not count: it spends
// nothing).
func (s *Service) count(it *item, before, after uint64) {
	c := s.stats.counters(it.limit, it.statKey)
	hits := it.hits
	c.totalHits.Add(hits)
	limit := limitOf(it.limit)
	near := uint64(math.Floor(float64(float32(limit) * float32(s.opts.NearLimitRatio))))
	if after <= limit {
		if after > near {
			if before >= near {
				c.nearLimit.Add(hits)
			} else {
				c.nearLimit.Add(after - near)
			}
		}
		c.withinLimit.Add(hits)
		return
	}
	if before >= limit {
		c.overLimit.Add(hits)
	} else {
		c.overLimit.Add(after - limit)
		c.nearLimit.Add(limit - max(near, before))
	}
	if it.limit.ShadowMode {
		if before >= limit {
			c.shadowMode.Add(hits)
		} else {
			c.shadowMode.Add(after - limit)
		}
	}
}

// countDecision counts a decided item: used is the limit less the units
// left after the decision (before it, for a denial or a check).
func (s *Service) countDecision(it *item) {
	limit := limitOf(it.limit)
	used := limit - min(uint64(max(it.remaining, 0)), limit)
	switch {
	case it.allowed && it.taken:
		s.count(it, used-min(it.hits, used), used)
	case it.allowed:
		// A check, or a failure counted open: nothing was added.
		s.count(it, used, used)
	default:
		s.count(it, used, used+it.hits)
	}
}

// headers formats the response fields of the binding descriptor.
func (s *Service) headers(it *item, over bool) []*core.HeaderValue {
	if s.opts.NoHeaders && !over {
		return nil
	}
	name := it.limit.Name
	if name == "" {
		name = it.limit.FullKey
	}
	quota := int64(it.limit.RequestsPerUnit)
	window := it.limit.Window
	if it.lim != nil {
		p := it.lim.Policy()
		quota, window = p.Quota, p.Window
	}
	rep := headers.Report{
		Policy:     headers.Policy{Name: printable(name), Quota: quota, Window: window},
		Remaining:  max(it.remaining, 0),
		ResetAfter: it.reset,
		Denied:     over,
		RetryAfter: max(it.reset, time.Second),
	}
	style := s.opts.Headers
	if s.opts.NoHeaders {
		style = 0
	}
	h := http.Header{}
	if err := headers.Write(h, style, rep, nil); err != nil {
		s.opts.Logger.Warn("rls: cannot write rate-limit fields", "key", it.limit.FullKey, "err", err)
		if over {
			return []*core.HeaderValue{{Key: "Retry-After", Value: strconv.FormatInt(headers.Seconds(rep.RetryAfter), 10)}}
		}
		return nil
	}
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]*core.HeaderValue, 0, len(keys))
	for _, k := range keys {
		for _, v := range h[k] {
			out = append(out, &core.HeaderValue{Key: k, Value: v})
		}
	}
	return out
}

// printable replaces what a structured-field string cannot hold.
func printable(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			b[i] = '_'
		}
	}
	return string(b)
}

type overrideKey struct {
	rpu  uint32
	unit pb.RateLimitResponse_RateLimit_Unit
}

// override returns the limiter of a limit a request carries (the
// descriptor's limit field), which is a fixed window of its unit, as in
// envoyproxy/ratelimit. Its state belongs to the descriptor and the unit,
// not to the count: a request that raises the override continues from what
// was counted.
func (s *Service) override(domain string, entries []Entry, o *rlpb.RateLimitDescriptor_RateLimitOverride) (*floodgate.Limiter, *Limit, error) {
	unit := pb.RateLimitResponse_RateLimit_Unit(o.GetUnit())
	w := unitWindow(unit)
	if w == 0 {
		return nil, nil, fmt.Errorf("invalid rate limit override unit %v", unit)
	}
	if w > floodgate.MaxWindow {
		return nil, nil, fmt.Errorf("a limit override of unit %v (%v) is longer than floodgate's longest window, %v", unit, w, floodgate.MaxWindow)
	}
	var b strings.Builder
	b.WriteString(domain)
	b.WriteString(".")
	for i, e := range entries {
		if i > 0 {
			b.WriteString(".")
		}
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteString("_" + e.Value)
		}
	}
	l := &Limit{FullKey: b.String(), Domain: domain, RequestsPerUnit: o.GetRequestsPerUnit(), Unit: unit, Window: w}
	if l.RequestsPerUnit == 0 {
		return nil, l, nil
	}
	l.alg = floodgate.FixedWindow{Limit: int64(l.RequestsPerUnit), Window: w}
	k := overrideKey{l.RequestsPerUnit, l.Unit}
	if v, ok := s.overrides.Load(k); ok {
		return v.(*floodgate.Limiter), l, nil
	}
	lim, err := floodgate.New(s.store, l.alg, &floodgate.Options{Name: "rls-override:" + l.Unit.String()})
	if err != nil {
		return nil, nil, err
	}
	if s.nOverride.Load() < maxOverrides {
		if v, loaded := s.overrides.LoadOrStore(k, lim); loaded {
			lim = v.(*floodgate.Limiter)
		} else {
			s.nOverride.Add(1)
		}
	}
	return lim, l, nil
}

// entryKey is the key of a descriptor's counter: its entries, each value
// length-prefixed so that no two descriptors share a key, with the
// share_threshold wildcard standing for the value where it applies, and
// hashed when longer than floodgate.MaxKeyLen.
func entryKey(entries []Entry, patterns map[int]string) string {
	// Built on the stack: one allocation, the key.
	var buf [128]byte
	b := buf[:0]
	for i, e := range entries {
		v := e.Value
		if p, ok := patterns[i]; ok {
			v = p
		}
		if i > 0 {
			b = append(b, '|')
		}
		b = append(append(b, e.Key...), '=')
		b = append(strconv.AppendInt(b, int64(len(v)), 10), ':')
		b = append(b, v...)
	}
	k := string(b)
	if len(k) > floodgate.MaxKeyLen {
		sum := sha256.Sum256([]byte(k))
		k = k[:64] + "#" + base64.RawURLEncoding.EncodeToString(sum[:])
	}
	if k == "" {
		k = "="
	}
	return k
}

// untilWindowEnd is the time from at to the end of its epoch-aligned
// window of length w.
func untilWindowEnd(at time.Time, w time.Duration) time.Duration {
	if w <= 0 {
		return 0
	}
	ns := at.UnixNano()
	return w - time.Duration(ns%int64(w))
}

// ceilSecond rounds d up to whole seconds, as envoyproxy/ratelimit reports
// duration_until_reset.
func ceilSecond(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + time.Second - 1) / time.Second * time.Second
}
