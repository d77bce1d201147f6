package redisstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// node is one Redis server that decisions go to: the master of a Cluster
// slot, the shard of a Ring, or the one server of a Client. Each node has
// its own circuit breaker, its own MaxInFlight slots and its own batching
// pipelines, so that a failing node costs the keys of the others nothing:
// its calls neither trip their breaker nor hold their slots.
type node struct {
	addr    string
	client  atomic.Pointer[redis.Client] // the node's own client (nil: use the store's)
	breaker breaker
	gate    chan struct{} // MaxInFlight slots for unbatched calls
	batch   *batcher      // nil unless batching
	served  atomic.Uint64 // calls the node answered (see busy)
	born    time.Time     // when the store first called it (see cold)
	fails   failCounts    // its failed decisions, for OnFailures (failures.go)
	owed    atomic.Bool   // a removal waits for its next answer (see Store.kickCleanup)
}

// busy reports whether a decision that timed out did so because the
// process sent more decisions at once than the node's slots (or batches)
// carry within Timeout, rather than because the node stopped answering:
// the node answered other calls while the decision waited (its served
// count moved from seen), or it waited for a slot before the node had
// answered anything (the first calls dial the connections, which may take
// longer than Timeout when many callers start at once). Such timeouts go
// to the failure policy but do not count against the node's breaker:
// opening it would fail every decision instead of the few that waited too
// long. A node that stops answering still opens it, by the timeouts of
// the calls it holds.
func (n *node) busy(seen uint64, err error) bool {
	return n.served.Load() != seen || (seen == 0 && errors.Is(err, errStarved))
}

// coldFor is how long the timeouts of a node that has answered nothing
// yet do not count against its breaker: see cold.
const coldFor = time.Second

// cold reports whether a decision that timed out did so on a node that
// has answered no call yet and was first called less than coldFor ago:
// its first calls dial its connections and load the scripts, and a
// process that starts under load sends hundreds of decisions at once
// (512 goroutines timed out 0.45% of their first decisions, enough to
// open the breaker). Such timeouts go to the failure policy, within
// Options.Timeout as any; a node that stalls from the start opens its
// breaker once coldFor has passed.
func (n *node) cold() bool {
	return n.served.Load() == 0 && time.Since(n.born) < coldFor
}

// answered counts a call that Redis answered: a reply, or an error reply.
func (n *node) answered(err error) {
	if err == nil || isReply(err) {
		n.served.Add(1)
	}
}

// isReply reports whether err is an error reply. (A function of its own:
// errors.As moves its target to the heap, an allocation that answered
// would otherwise make on every call, failed or not.)
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// nodes holds a Cluster's or a Ring's nodes by address. Decisions read the
// map without a lock; a new node copies it.
type nodes struct {
	mu sync.Mutex // serializes writers
	m  atomic.Pointer[map[string]*node]
}

// reloadEvery is the least time between two reloads of a Cluster's slot map
// that failures ask for. go-redis reloads it only on MOVED and ASK replies
// and every ClusterStateReloadInterval (60s by default), and a dead master
// answers neither: without these reloads its keys would keep failing long
// after a replica took its slots over.
const reloadEvery = 100 * time.Millisecond

// newNode returns a node of addr whose calls go through c (nil for the
// store's client).
func (s *Store) newNode(addr string, c *redis.Client, batch bool) *node {
	n := &node{
		addr:    addr,
		breaker: breaker{threshold: s.threshold, cooldown: s.cooldown},
		gate:    make(chan struct{}, s.maxInFlight),
		born:    time.Now(),
	}
	n.client.Store(c)
	if batch && s.batchSize >= 2 {
		n.batch = newBatcher(s, n)
	}
	return n
}

// nodeFor returns the node serving the Redis key rkey.
func (s *Store) nodeFor(ctx context.Context, rkey string) (*node, error) {
	if s.single != nil {
		return s.single, nil
	}
	var (
		c   *redis.Client
		err error
	)
	if s.cluster != nil {
		c, err = s.cluster.MasterForKey(ctx, rkey)
	} else {
		c, err = s.ring.GetShardClientForKey(rkey)
	}
	if err != nil {
		return nil, err
	}
	addr := c.Options().Addr
	if n := (*s.nodes.m.Load())[addr]; n != nil {
		if n.client.Load() != c {
			// go-redis made a new client for the address (the node left
			// the cluster and came back): the breaker's history stays.
			n.client.Store(c)
		}
		return n, nil
	}
	return s.addNode(addr, c), nil
}

// addNode returns the node of addr, adding it if it is new.
func (s *Store) addNode(addr string, c *redis.Client) *node {
	s.nodes.mu.Lock()
	defer s.nodes.mu.Unlock()
	old := *s.nodes.m.Load()
	if n := old[addr]; n != nil {
		return n
	}
	if s.shut.Load() {
		// Close has stopped the batchers it knew of: a node made now
		// must start no goroutines. Its decisions fail with floodgate.ErrClosed.
		return s.newNode(addr, c, false)
	}
	m := make(map[string]*node, len(old)+1)
	for a, n := range old {
		m[a] = n
	}
	n := s.newNode(addr, c, true)
	m[addr] = n
	s.nodes.m.Store(&m)
	return n
}

// all returns every node.
func (s *Store) all() []*node {
	if s.single != nil {
		return []*node{s.single}
	}
	s.nodes.mu.Lock()
	defer s.nodes.mu.Unlock()
	var ns []*node
	for _, n := range *s.nodes.m.Load() {
		ns = append(ns, n)
	}
	return ns
}

// reload asks a Cluster client to reload its slot map, at most every
// reloadEvery: a failing node may have lost its slots to a replica.
func (s *Store) reload(now time.Time) {
	if s.cluster == nil {
		return
	}
	last := s.reloaded.Load()
	if now.UnixNano()-last < int64(reloadEvery) || !s.reloaded.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	// go-redis reloads on a goroutine of its own, one reload at a time.
	s.cluster.ReloadState(context.Background())
}
