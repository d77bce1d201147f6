// Package rediscoord is a region.Coordinator on Redis: the ledger of
// package region's protocol in a few hashes per quota, each Exchange one
// Lua script call (EVALSHA, with EVAL on NOSCRIPT), atomic on the server.
//
// Every key starts with Options.Prefix and shares one hash tag, so the
// coordinator lives on one Redis Cluster slot: one master. A window's hash
// expires two windows after the window ends, the demand reports three
// windows after the last one. The script reads no clock: windows and
// report times are the sender's (see package region on clocks).
//
// The coordinator is usually in another region than most of its callers.
// Each Exchange returns by its context's deadline (region's
// Options.Timeout), whatever the client's timeouts: a stalled server
// holds no reconciler longer.
//
// Peers (NewPeers) is the other half of the package: the processes of one
// region share one reconciler through it, on the region's own Redis (see
// region.Peers). Its three keys share one hash tag too, and its script
// reads the server's clock only for the leader's lease (SET PX).
//
// Replication is asynchronous: a failover that loses acknowledged writes
// loses grants and debits the regions already acted on. A lost debit only
// strands its units (they stay taken out of the region's local store). But
// a region keeps the grants it learned (grants only grow), so the units of
// a lost grant can be granted again to another region in their window:
// over-admission bounded by the grants the failover lost. Options.Replicas
// closes that hole: each Exchange is followed, on the same connection, by
// WAIT for that many replicas, and fails unless they acknowledged it, so
// that no region acts on a ledger a failover to one of those replicas
// could lose (replication is in order: a reply a replica acknowledged
// carries every write it read). Set it to the number of replicas of the
// coordinator's master, so that whichever is promoted has every
// acknowledged write; then a replica that falls behind fails the
// Exchanges (each region keeps what it holds, as when the coordinator is
// down) instead of risking over-admission. Without it, run the
// coordinator's Redis without failover, or accept the bound; see
// docs/regions.md.
package rediscoord

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/region"
	"github.com/redis/go-redis/v9"
)

//go:embed coordinator.lua
var source string

// script is the coordinator's one script; immutable.
var script = redis.NewScript(source)

// DefaultPrefix is the default of Options.Prefix.
const DefaultPrefix = "fgr:{region}:"

// Options configures a Coordinator. A nil *Options means the defaults.
type Options struct {
	// Prefix starts every key; it must hold one hash tag ({…}) so that
	// every key lands on one Cluster slot. The default is "fgr:{region}:".
	// Coordinators of different sets of regions on one Redis need
	// different prefixes.
	Prefix string

	// Replicas, when above 0, makes each Exchange wait (WAIT) until that
	// many replicas of the coordinator's master acknowledged its writes,
	// for at most half the time its context has left (1s without a
	// deadline),
	// and fail with ErrNotReplicated otherwise: see the package doc. The
	// client must be a *redis.Client (a Sentinel failover client
	// included) or a *redis.ClusterClient.
	Replicas int
}

// Coordinator is a region.Coordinator on Redis. It is safe for concurrent
// use. Create one with New; the zero value is not usable.
type Coordinator struct {
	client   redis.UniversalClient
	regions  []region.Region
	prefix   string
	replicas int
}

var _ region.Coordinator = (*Coordinator)(nil)

// ErrInvalidOptions reports unusable Options.
var ErrInvalidOptions = errors.New("rediscoord: invalid options")

// ErrNotReplicated reports an Exchange that fewer replicas than
// Options.Replicas acknowledged in time. The master applied it; the
// sender acts on nothing it replied, and its next Exchange learns the
// ledger (grants are absolute, debits idempotent).
var ErrNotReplicated = errors.New("rediscoord: not acknowledged by the replicas")

// errReply reports a reply of the script that does not have the expected
// shape.
var errReply = errors.New("rediscoord: unexpected reply")

// New returns a Coordinator for regions (see region.CheckRegions) that
// keeps its ledger on client.
func New(client redis.UniversalClient, regions []region.Region, opts *Options) (*Coordinator, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidOptions)
	}
	if err := region.CheckRegions(regions); err != nil {
		return nil, err
	}
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if i := strings.IndexByte(o.Prefix, '{'); i < 0 || !strings.Contains(o.Prefix[i:], "}") || strings.Index(o.Prefix[i:], "}") == 1 {
		return nil, fmt.Errorf("%w: Prefix %q holds no hash tag {…}", ErrInvalidOptions, o.Prefix)
	}
	if o.Replicas < 0 {
		return nil, fmt.Errorf("%w: Replicas %d", ErrInvalidOptions, o.Replicas)
	}
	if o.Replicas > 0 {
		switch client.(type) {
		case *redis.Client, *redis.ClusterClient:
		default:
			return nil, fmt.Errorf("%w: Replicas needs a *redis.Client or a *redis.ClusterClient, not a %T", ErrInvalidOptions, client)
		}
	}
	return &Coordinator{client: client, regions: append([]region.Region(nil), regions...), prefix: o.Prefix, replicas: o.Replicas}, nil
}

// run runs the script with arg; with Replicas, followed by WAIT on the
// same connection (a pipeline on the master's client), which counts the
// replicas that acknowledged that connection's writes.
func (c *Coordinator) run(ctx context.Context, arg []byte) (any, error) {
	keys := []string{c.prefix}
	if c.replicas == 0 {
		return script.Run(ctx, c.client, keys, arg).Result()
	}
	master, ok := c.client.(*redis.Client)
	if cc, isCluster := c.client.(*redis.ClusterClient); isCluster {
		var err error
		if master, err = cc.MasterForKey(ctx, c.prefix); err != nil {
			return nil, err
		}
		ok = true
	}
	if !ok {
		return nil, fmt.Errorf("%w: Replicas with a %T", ErrInvalidOptions, c.client)
	}
	wait := time.Second
	if d, has := ctx.Deadline(); has {
		// Half the time left, so that the reply comes before the
		// deadline; WAIT counts milliseconds, and 0 waits for ever.
		wait = max(time.Until(d)/2, time.Millisecond)
	}
	pipe := master.Pipeline()
	// EVAL, not EVALSHA: a NOSCRIPT inside the pipeline would cost
	// another round trip, and a reconciler calls at most twice a second.
	ev := script.Eval(ctx, pipe, keys, arg)
	acks := pipe.Do(ctx, "WAIT", c.replicas, int64(wait/time.Millisecond))
	_, _ = pipe.Exec(ctx)
	if err := ev.Err(); err != nil {
		return nil, err
	}
	n, err := acks.Int64()
	if err != nil {
		return nil, err
	}
	if n < int64(c.replicas) {
		return nil, fmt.Errorf("%w: %d of %d within %v", ErrNotReplicated, n, c.replicas, wait)
	}
	return ev.Val(), nil
}

// wire is the message as the script reads it.
type wire struct {
	R   int         `json:"r"`
	N   int         `json:"n"`
	At  int64       `json:"at"`
	Ats string      `json:"ats"`
	Q   []wireQuota `json:"q"`
}

type wireQuota struct {
	ID  string  `json:"id"`
	Lim int64   `json:"lim"`
	W   int64   `json:"w"`
	WM  int64   `json:"wm"`
	IX  bool    `json:"ix,omitempty"`
	F   []int64 `json:"f"`
	Rep []any   `json:"rep,omitempty"`
	Deb [][]any `json:"deb,omitempty"`
	Rai [][]any `json:"rai,omitempty"`
}

// Exchange applies m in one script call and returns the state after it;
// see region.Coordinator. Report times come back at millisecond precision.
// It returns an error matching region.ErrInvalid for an unusable message,
// and the client's errors wrapped.
func (c *Coordinator) Exchange(ctx context.Context, m *region.Message) (*region.Reply, error) {
	r, err := region.CheckMessage(m, c.regions)
	if err != nil {
		return nil, err
	}
	at := m.At.UnixMilli()
	w := wire{R: r + 1, N: len(c.regions), At: at, Ats: strconv.FormatInt(at, 10), Q: make([]wireQuota, len(m.Quotas))}
	for i, q := range m.Quotas {
		wq := wireQuota{
			// The quota's configuration is part of its identity, as in
			// MemCoordinator.
			ID:  fmt.Sprintf("%s|%d|%d", q.ID, q.Limit, int64(q.Window)),
			Lim: q.Limit, W: region.WindowIndex(m.At, q.Window), IX: q.Indexed,
			WM: int64((q.Window + time.Millisecond - 1) / time.Millisecond),
			F:  make([]int64, len(c.regions)),
		}
		if q.Indexed {
			wq.W = q.Index
		}
		for s, rg := range c.regions {
			wq.F[s] = rg.FloorUnits(q.Limit)
		}
		if q.Report != nil {
			wq.Rep = []any{strconv.FormatFloat(q.Report.Rate, 'g', -1, 64), q.Report.Window, q.Report.Used}
		}
		for _, d := range q.Debits {
			wq.Deb = append(wq.Deb, []any{d.ID, d.Window, d.Units})
		}
		for _, x := range q.Raises {
			wq.Rai = append(wq.Rai, []any{x.Window, x.To})
		}
		w.Q[i] = wq
	}
	arg, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("rediscoord: %w", err)
	}
	// go-redis ignores ctx's deadline on a connection's reads unless the
	// client was built with ContextTimeoutEnabled: a stalled server would
	// hold the reconciler (and Store.Close) for the client's ReadTimeout,
	// 3s by default. The call runs aside, and Exchange returns at ctx's
	// end; the goroutine ends with the client's own timeout. A script the
	// server still runs later is harmless: debits are idempotent, and a
	// raise no one heard of only strands its units until the next call.
	type result struct {
		v   any
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := c.run(ctx, arg)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			if errors.Is(r.err, ErrNotReplicated) {
				return nil, r.err
			}
			return nil, fmt.Errorf("rediscoord: %w", r.err)
		}
		return c.decode(r.v, m, w)
	case <-ctx.Done():
		return nil, fmt.Errorf("rediscoord: %w", ctx.Err())
	}
}

func (c *Coordinator) decode(res any, m *region.Message, w wire) (*region.Reply, error) {
	quotas, ok := res.([]any)
	if !ok || len(quotas) != len(m.Quotas) {
		return nil, fmt.Errorf("%w: %T of %d quotas", errReply, res, lenOf(res))
	}
	n := len(c.regions)
	reply := &region.Reply{Quotas: make([]region.QuotaReply, len(quotas))}
	for i, qv := range quotas {
		parts, ok := qv.([]any)
		if !ok || len(parts) != 9 {
			return nil, fmt.Errorf("%w: quota %d", errReply, i)
		}
		var lists [8][]any
		for k := range lists {
			l, ok := parts[k].([]any)
			if !ok || len(l) != n {
				return nil, fmt.Errorf("%w: quota %d, part %d", errReply, i, k)
			}
			lists[k] = l
		}
		q := &reply.Quotas[i]
		for k := range q.Windows {
			ws := region.WindowState{Index: w.Q[i].W + int64(k), Granted: make([]int64, n), Debited: make([]int64, n)}
			for s := range n {
				g, ok1 := lists[2*k][s].(int64)
				d, ok2 := lists[2*k+1][s].(int64)
				if !ok1 || !ok2 {
					return nil, fmt.Errorf("%w: quota %d, window %d", errReply, i, k)
				}
				ws.Granted[s], ws.Debited[s] = g, d
			}
			q.Windows[k] = ws
		}
		q.Reports = make([]region.RegionReport, n)
		for s := range n {
			var f [4]string
			for k := range f {
				v, ok := lists[4+k][s].(string)
				if !ok {
					return nil, fmt.Errorf("%w: quota %d, report %d", errReply, i, s)
				}
				f[k] = v
			}
			if f[3] == "" {
				continue // never reported
			}
			rate, err1 := strconv.ParseFloat(f[0], 64)
			win, err2 := strconv.ParseInt(f[1], 10, 64)
			used, err3 := strconv.ParseInt(f[2], 10, 64)
			ms, err4 := strconv.ParseInt(f[3], 10, 64)
			if err := errors.Join(err1, err2, err3, err4); err != nil {
				return nil, fmt.Errorf("%w: quota %d, report %d: %w", errReply, i, s, err)
			}
			q.Reports[s] = region.RegionReport{Report: region.Report{Rate: rate, Window: win, Used: used}, At: time.UnixMilli(ms)}
		}
		acked, ok := parts[8].([]any)
		if !ok {
			return nil, fmt.Errorf("%w: quota %d, acked", errReply, i)
		}
		for _, a := range acked {
			id, ok := a.(string)
			if !ok {
				return nil, fmt.Errorf("%w: quota %d, acked", errReply, i)
			}
			q.Acked = append(q.Acked, id)
		}
	}
	return reply, nil
}

func lenOf(v any) int {
	if l, ok := v.([]any); ok {
		return len(l)
	}
	return 0
}
