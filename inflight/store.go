package inflight

import (
	"context"
	"time"
)

// Store keeps the holds of keys: the slots taken by requests in flight.
// LocalStore and redisstore.Store are Stores; inflighttest checks a Store
// against this contract. Implementations are safe for concurrent use.
//
// The holds of a key belong to the key under one limiter name: every call
// takes the name of its Limiter (Options.Name, or the name derived from
// the limit), and the holds of (name, key) are apart from those of the
// same key under any other name, as floodgate's state identity keeps
// rate limits apart. Limiters of one name share a key's holds whatever
// their limits, on every store client of one backend (the processes of a
// fleet, and a rolling deploy that changes the limit under a kept name);
// limiters of different names on one store never see each other's holds.
// A store keeps any two names apart, whatever characters they hold
// (redisstore's Redis key ends with the name and a suffix of its own after
// the key's hash tag; LocalStore numbers the names).
type Store interface {
	// Acquire adds a hold to key under name if fewer than limit holds of
	// (name, key) are live, and reports the outcome. It is atomic: no
	// other Acquire or Release of (name, key) interleaves with it, so the
	// live holds of a key under a name never exceed the limit of the
	// Acquire that added the last of them. A denial changes nothing.
	//
	// name passes floodgate.CheckName, limit is at least 1 and ttl is
	// positive (the Limiter checks all three). ttl is how long the hold lives without a renewal on a store whose
	// holds expire (Hold.Expires): one shared by processes, where a hold
	// whose process died must free its slot. A store whose holds cannot
	// outlive their holder ignores it.
	//
	// Acquire returns an error only for bad arguments (floodgate.ErrEmptyKey,
	// floodgate.ErrKeyTooLong, floodgate.ErrInvalidConfig for a name, a
	// limit or a ttl out of range), for a failure of the backend (wrapping
	// floodgate.ErrUnavailable and the cause) or for an ended context. A
	// denial is not an error.
	Acquire(ctx context.Context, name, key string, limit int64, ttl time.Duration) (Result, error)

	// Renew extends the life of the hold h of key under name, which
	// Acquire granted with the same name and key, to ttl from the store's
	// current time, and reports whether h was still held. false means that
	// h expired or was released: its slot may be someone else's by now, so
	// a store must never bring an expired hold back. The Limiter calls it
	// only for holds with Expires.
	Renew(ctx context.Context, name, key string, h Hold, ttl time.Duration) (bool, error)

	// Release removes the hold h of key under name, which Acquire granted
	// with the same name and key, freeing its slot. Releasing a hold
	// that is no longer held (released before, expired, or granted without
	// a record by a failure policy) does nothing and returns nil, so that
	// Release is idempotent. A zero Hold is no hold. A Hold another store
	// granted is an error matching ErrInvalidHold.
	//
	// A request's context has often ended by the time its slot is
	// released, and a release that did not happen would keep the slot
	// taken until its TTL (or, in process, forever): Release must complete
	// whether or not ctx has ended, taking only its values (a store doing
	// I/O runs it on context.WithoutCancel(ctx) with a timeout of its own).
	Release(ctx context.Context, name, key string, h Hold) error
}

// Hold is a store's record of one held slot: Store.Acquire returns it, and
// Renew and Release take it back. Its fields are the store's: the Limiter
// copies a Hold and never looks inside, except at Expires. It is a value,
// so that a slot costs no allocation. The zero value is no hold.
type Hold struct {
	// ID tells the hold apart from the key's other holds, in the store's
	// terms: for LocalStore, the generation of a pooled holder, so that a
	// Hold released once is stale; for redisstore, the number of the hold
	// within its store.
	ID uint64

	// Ref is the store's own reference for the hold, such as a pointer to
	// its state (a pointer in an interface costs no allocation), or nil.
	Ref any

	// Expires reports that the hold lives the ttl of its Acquire unless it
	// is renewed: the Limiter then renews it every Options.RenewEvery
	// until it is released. The holds of an in-process store never expire.
	Expires bool
}

// Result is the outcome of Store.Acquire.
type Result struct {
	// Allowed reports whether a hold was added.
	Allowed bool
	// InFlight is the number of live holds of the key right after the
	// step, the new one included.
	InFlight int64
	// Hold is the new hold when Allowed; the zero Hold otherwise.
	Hold Hold
}
