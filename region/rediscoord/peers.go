package rediscoord

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/region"
	"github.com/redis/go-redis/v9"
)

//go:embed peers.lua
var peersSource string

// peersScript is the Peers' one script; immutable.
var peersScript = redis.NewScript(peersSource)

// PeersOptions configures a Peers. A nil *PeersOptions means the defaults.
type PeersOptions struct {
	// Prefix starts the Peers' three keys; it must hold one hash tag
	// ({…}) so that they land on one Cluster slot. The default is
	// "fgp:{<region>}:", region being the name passed to NewPeers.
	Prefix string
	// TTL is how long the region's demand and published grants live
	// after the last Sync that wrote them: a bound on what a region whose
	// processes all stopped leaves behind. The default is one minute; it
	// must exceed the Stores' Interval several times over.
	TTL time.Duration
}

// Peers is a region.Peers on the region's own Redis (the one its local
// store uses, or any Redis all of the region's processes reach): the
// leader's lease, the region's demand and the published grants in three
// keys, each Sync one Lua script call (EVALSHA, with EVAL on NOSCRIPT),
// atomic on the server. Leases run on the server's clock. It is safe for
// concurrent use; create one with NewPeers.
type Peers struct {
	client redis.UniversalClient
	keys   []string
	ttl    string
}

var _ region.Peers = (*Peers)(nil)

// NewPeers returns the Peers of the region named name, on client.
func NewPeers(client redis.UniversalClient, name string, opts *PeersOptions) (*Peers, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidOptions)
	}
	if name == "" {
		return nil, fmt.Errorf("%w: no region name", ErrInvalidOptions)
	}
	o := PeersOptions{}
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = "fgp:{" + name + "}:"
	}
	if i := strings.IndexByte(o.Prefix, '{'); i < 0 || !strings.Contains(o.Prefix[i:], "}") || strings.Index(o.Prefix[i:], "}") == 1 {
		return nil, fmt.Errorf("%w: Prefix %q holds no hash tag {…}", ErrInvalidOptions, o.Prefix)
	}
	switch {
	case o.TTL < 0:
		return nil, fmt.Errorf("%w: negative TTL %v", ErrInvalidOptions, o.TTL)
	case o.TTL == 0:
		o.TTL = time.Minute
	}
	return &Peers{client: client, keys: []string{o.Prefix + "lead", o.Prefix + "demand", o.Prefix + "grants"},
		ttl: strconv.FormatInt(ms(o.TTL), 10)}, nil
}

// ms is d in whole milliseconds, rounded up: a lease is never shorter than
// asked.
func ms(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// field is a quota's field in the demand and grants hashes: its
// configuration, then the calendar's and the name's lengths, so that no
// two quotas share one.
func field(q region.PeerQuota) string {
	return strconv.FormatInt(q.Limit, 10) + ":" + strconv.FormatInt(int64(q.Window), 10) + ":" +
		strconv.Itoa(len(q.Calendar)) + ":" + strconv.Itoa(len(q.Name)) + ":" + q.Calendar + q.Name + q.Key
}

// parseField inverts field.
func parseField(f string) (q region.PeerQuota, ok bool) {
	parts := strings.SplitN(f, ":", 5)
	if len(parts) != 5 {
		return q, false
	}
	limit, err1 := strconv.ParseInt(parts[0], 10, 64)
	w, err2 := strconv.ParseInt(parts[1], 10, 64)
	cl, err3 := strconv.Atoi(parts[2])
	nl, err4 := strconv.Atoi(parts[3])
	rest := parts[4]
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || cl < 0 || nl < 0 || cl > len(rest) || nl > len(rest)-cl {
		return q, false
	}
	return region.PeerQuota{Calendar: rest[:cl], Name: rest[cl : cl+nl], Key: rest[cl+nl:], Limit: limit, Window: time.Duration(w)}, true
}

// Sync applies m in one script call and answers it; see region.Peers. It
// returns an error matching region.ErrInvalid for a message
// region.CheckPeerMessage refuses, and the client's errors wrapped. It
// returns by ctx's deadline whatever the client's timeouts (see
// Coordinator.Exchange).
func (p *Peers) Sync(ctx context.Context, m *region.PeerMessage) (*region.PeerReply, error) {
	if err := region.CheckPeerMessage(m); err != nil {
		return nil, err
	}
	args := make([]any, 0, 6+2*len(m.Quotas)+2*len(m.Grants))
	publish := "0"
	if m.Publish {
		publish = "1"
	}
	args = append(args, m.Member, ms(m.Lead), p.ttl, publish, len(m.Quotas))
	for _, q := range m.Quotas {
		args = append(args, field(q), strconv.FormatInt(q.Asked, 10))
	}
	args = append(args, len(m.Grants))
	var b strings.Builder
	for _, g := range m.Grants {
		b.Reset()
		for k, w := range g.Windows {
			if k > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatInt(w.Window, 10))
			b.WriteByte(':')
			b.WriteString(strconv.FormatInt(w.Granted, 10))
		}
		args = append(args, field(region.PeerQuota{Name: g.Name, Key: g.Key, Limit: g.Limit, Window: g.Window, Calendar: g.Calendar}), b.String())
	}
	type result struct {
		v   any
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := peersScript.Run(ctx, p.client, p.keys, args...).Result()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("rediscoord: peers: %w", r.err)
		}
		return decodePeers(r.v, len(m.Quotas))
	case <-ctx.Done():
		return nil, fmt.Errorf("rediscoord: peers: %w", ctx.Err())
	}
}

func decodePeers(v any, quotas int) (*region.PeerReply, error) {
	top, ok := v.([]any)
	if !ok || len(top) != 3 {
		return nil, fmt.Errorf("%w: peers reply %T", errReply, v)
	}
	leads, _ := top[0].(int64)
	grants, ok1 := top[1].([]any)
	demand, ok2 := top[2].([]any)
	if !ok1 || !ok2 || len(grants) != quotas || len(demand)%2 != 0 {
		return nil, fmt.Errorf("%w: peers reply of %d grants for %d quotas", errReply, len(grants), quotas)
	}
	r := &region.PeerReply{Leader: leads == 1, Grants: make([][]region.WindowGrant, quotas)}
	for i, g := range grants {
		s, ok := g.(string)
		if !ok || s == "" {
			continue // none published
		}
		for _, part := range strings.Split(s, ",") {
			idx, gr, found := strings.Cut(part, ":")
			w, err1 := strconv.ParseInt(idx, 10, 64)
			n, err2 := strconv.ParseInt(gr, 10, 64)
			if !found || err1 != nil || err2 != nil {
				return nil, fmt.Errorf("%w: published grant %q", errReply, s)
			}
			r.Grants[i] = append(r.Grants[i], region.WindowGrant{Window: w, Granted: n})
		}
	}
	for k := 0; k < len(demand); k += 2 {
		f, _ := demand[k].(string)
		u, _ := demand[k+1].(string)
		q, ok := parseField(f)
		n, err := strconv.ParseInt(u, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("%w: demand %q = %q", errReply, f, u)
		}
		q.Asked = n
		r.Demand = append(r.Demand, q)
	}
	return r, nil
}
