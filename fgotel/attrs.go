package fgotel

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/floodgate-go/floodgate"
)

// The attribute keys. Those of the semantic conventions are spelled as
// the conventions spell them (db.system.name, server.address,
// server.port, error.type); floodgate's own are under floodgate.
const (
	keyLimiter       = attribute.Key("floodgate.limiter.name")
	keyStore         = attribute.Key("floodgate.store.name")
	keyShedder       = attribute.Key("floodgate.shedder.name")
	keyResult        = attribute.Key("floodgate.rate_limiting.result")
	keyOp            = attribute.Key("floodgate.rate_limiting.op")
	keyCheck         = attribute.Key("floodgate.rate_limiting.check")
	keyBinding       = attribute.Key("floodgate.rate_limiting.binding")
	keyPolicy        = attribute.Key("floodgate.store.failure_policy")
	keyBreakerState  = attribute.Key("floodgate.breaker.state")
	keyBreakerFrom   = attribute.Key("floodgate.breaker.previous_state")
	keyLeaseSource   = attribute.Key("floodgate.lease.source")
	keyReturnReason  = attribute.Key("floodgate.lease.return_reason")
	keyClass         = attribute.Key("floodgate.request.class")
	keyRejectReason  = attribute.Key("floodgate.rejection.reason")
	keyDBSystem      = attribute.Key("db.system.name")
	keyServerAddress = attribute.Key("server.address")
	keyServerPort    = attribute.Key("server.port")
	keyErrorType     = attribute.Key("error.type")

	// Keys of the span event only: values per decision, which would be a
	// series per value on a metric.
	keyUnits      = attribute.Key("floodgate.rate_limiting.units")
	keyLimit      = attribute.Key("floodgate.rate_limiting.limit")
	keyRemaining  = attribute.Key("floodgate.rate_limiting.remaining")
	keyDelay      = attribute.Key("floodgate.rate_limiting.delay")
	keyRetryAfter = attribute.Key("floodgate.rate_limiting.retry_after")
)

// dbSystemRedis is db.system.name of every store that makes round trips:
// redisstore is the only one (memstore reports none).
const dbSystemRedis = "redis"

// attrs is one precomputed attribute set in the three forms the
// instruments take. The slices are built once and only read: passing
// them to Add, Record and ObserveInt64 allocates nothing, where
// metric.WithAttributeSet per call would allocate its option and the
// variadic slice.
type attrs struct {
	add []metric.AddOption
	rec []metric.RecordOption
	obs []metric.ObserveOption
}

func newAttrs(kv ...attribute.KeyValue) *attrs {
	o := metric.WithAttributeSet(attribute.NewSet(kv...))
	return &attrs{add: []metric.AddOption{o}, rec: []metric.RecordOption{o}, obs: []metric.ObserveOption{o}}
}

// cache maps a label tuple to what was built for it. Reads load one
// atomic pointer and look in an immutable map: no lock, no allocation,
// no write to a shared cache line, which matters because every event of
// every goroutine reads it. A miss builds the value and publishes a new
// map with it under mu, copying the old one: misses happen once per
// tuple, and tuples are few (names, nodes, outcomes), so the copies cost
// less than a lock on every read would. The zero value is an empty cache.
type cache[K comparable, V any] struct {
	m  atomic.Pointer[map[K]V]
	mu sync.Mutex
}

// load returns the value of k, if it has one.
func (c *cache[K, V]) load(k K) (V, bool) {
	if m := c.m.Load(); m != nil {
		v, ok := (*m)[k]
		return v, ok
	}
	var zero V
	return zero, false
}

// add gives k the value v unless another goroutine gave it one first,
// and returns k's value. Callers build v after a load missed, without a
// lock: two goroutines may build the same tuple, and one value wins.
func (c *cache[K, V]) add(k K, v V) V {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil {
		if ov, ok := (*old)[k]; ok {
			return ov
		}
	}
	next := make(map[K]V, 1+lenOf(old))
	if old != nil {
		for ok, ov := range *old {
			next[ok] = ov
		}
	}
	next[k] = v
	c.m.Store(&next)
	return v
}

func lenOf[K comparable, V any](m *map[K]V) int {
	if m == nil {
		return 0
	}
	return len(*m)
}

// Values of error.type, one per floodgate error a caller can get, so that
// the attribute has a handful of values whatever the errors say.
const (
	errUnavailable  = "unavailable"
	errTimeout      = "timeout"
	errCanceled     = "canceled"
	errInvalidN     = "invalid_n"
	errExceedsLimit = "exceeds_limit"
	errInvalidDelay = "invalid_delay"
	errEmptyKey     = "empty_key"
	errKeyTooLong   = "key_too_long"
	errConfig       = "invalid_config"
	errWaitDeadline = "wait_exceeds_deadline"
	// errOther is the semantic conventions' value for an error the
	// instrumentation does not name.
	errOther = "_OTHER"
)

// errorType returns the error.type of err, "" for nil. ErrUnavailable
// comes first: a store that timed out is unavailable to the decision,
// and the store's own metrics say why.
func errorType(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, floodgate.ErrUnavailable):
		return errUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		return errTimeout
	case errors.Is(err, context.Canceled):
		return errCanceled
	case errors.Is(err, floodgate.ErrWaitExceedsDeadline):
		return errWaitDeadline
	case errors.Is(err, floodgate.ErrInvalidN):
		return errInvalidN
	case errors.Is(err, floodgate.ErrExceedsLimit):
		return errExceedsLimit
	case errors.Is(err, floodgate.ErrInvalidDelay):
		return errInvalidDelay
	case errors.Is(err, floodgate.ErrEmptyKey):
		return errEmptyKey
	case errors.Is(err, floodgate.ErrKeyTooLong):
		return errKeyTooLong
	case errors.Is(err, floodgate.ErrInvalidConfig):
		return errConfig
	}
	return errOther
}

// opName returns the value of floodgate.rate_limiting.op.
func opName(op floodgate.Op) string {
	switch op {
	case floodgate.OpTake:
		return "take"
	case floodgate.OpTakeUpTo:
		return "take_up_to"
	case floodgate.OpSettle:
		return "settle"
	}
	return "op_" + strconv.Itoa(int(op))
}

// serverAttrs returns server.address and, when node has one,
// server.port of a node's address ("host:port"); none for "".
func serverAttrs(node string) []attribute.KeyValue {
	if node == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(node)
	if err != nil {
		return []attribute.KeyValue{keyServerAddress.String(node)}
	}
	kv := []attribute.KeyValue{keyServerAddress.String(host)}
	if p, err := strconv.Atoi(port); err == nil {
		kv = append(kv, keyServerPort.Int(p))
	}
	return kv
}
