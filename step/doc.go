// Package step is for the authors of floodgate stores: the reference
// transition of each algorithm, the state it keeps, and the checks a store
// makes on what reaches it.
//
// A transition is a pure function of (configuration, state, now, request)
// to (state', Result): no locks, no I/O, no clock. A store keeps the state
// per (name, key, [Kind]) as floodgate.Store says, applies the transition
// atomically at its
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
// A state is a function of the algorithm's kind, not of one
// configuration: every configuration of one kind reads and writes the
// same state words, so a configuration changed under one limiter name
// continues from what the old one counted (a rolling deploy hands no key
// a fresh quota).
//
// # Time
//
// A store's clock must read from 1970 to before 2255
// (floodgate.CheckTime); an instant outside is an error matching
// floodgate.ErrInvalidConfig, and the arguments of a step are checked by
// floodgate.CheckKey and floodgate.CheckRequest. A clock that goes
// backwards is
// treated conservatively by every transition: the state stays ahead of it,
// which admits less, never more.
package step
