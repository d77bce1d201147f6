// Package step is for the authors of floodgate stores: the reference
// transition of each algorithm, the state it keeps, and the checks a store
// makes on what reaches it.
//
// A transition is a pure function of (configuration, state, now, request)
// to (state', Result): no locks, no I/O, no clock. A store keeps the state
// per key and algorithm [Kind], applies the transition atomically at its
// own clock, and must produce exactly the Results the transition does; the
// conformance harness (package floodgatetest) holds a store to that.
// memstore applies these functions under compare-and-swap or a per-key
// mutex; redisstore's Lua scripts are their twins.
//
// # State
//
// States are storage formats, shared with the Lua scripts, so their
// instants are int64 nanoseconds since the Unix epoch rather than
// time.Time; 0 (the zero state) is a key never seen. The token bucket
// keeps one word, the theoretical arrival time of GCRA (ITU-T I.371): the
// instant at which the bucket is full again. The leaky bucket keeps its
// next departure slot. The windows keep the structs of this package.
//
// A state belongs to (key, Kind), not to a configuration: every
// configuration of one kind applied to a key reads and writes the same
// state, so a changed configuration continues from what the old one
// counted (a rolling deploy hands no key a fresh quota), and two limiters
// of one kind on one store must use different keys.
//
// # Time
//
// A store's clock must read between 1970 and 2262 (nanoseconds since the
// epoch in an int64, 0 meaning a new key); an instant outside is an error
// matching floodgate.ErrInvalidConfig. A clock that goes backwards is
// treated conservatively by every transition: the state stays ahead of it,
// which admits less, never more.
package step
