package scripts

import (
	_ "embed"
	"strconv"
)

// This file is the protocol of inflight.lua, the script of package
// inflight's holds on Redis, as protocol.go is the algorithms': the
// position of each argument in ARGV and the codes of the operations,
// written once, which expand writes in place of their names.

//go:embed inflight.lua
var inflightLua string

// InflightOp is an operation of inflight.lua.
type InflightOp uint8

// The operations of inflight.lua.
const (
	// InflightAcquire adds a hold if the key has fewer live holds than the
	// limit.
	InflightAcquire InflightOp = iota + 1
	// InflightRenew moves a live hold's expiry to a TTL from now.
	InflightRenew
	// InflightRelease removes a hold.
	InflightRelease
	// InflightCancel removes the hold of an acquire that failed, or marks
	// its holder id so that the acquire adds nothing if it runs later.
	InflightCancel
)

// InflightArgs are the arguments of one call of inflight.lua, by name.
type InflightArgs struct {
	// Op is the operation.
	Op InflightOp
	// Holder is the hold's member in the key's sorted set.
	Holder string
	// Limit is the limit of an acquire, at least 1; 0 otherwise.
	Limit int64
	// TTL is how long an acquired or renewed hold lives unless renewed, in
	// whole microseconds, at least 1000.
	TTL int64
	// MarginMs is the key's TTL margin, in milliseconds.
	MarginMs int64
	// Now is the instant in whole microseconds since the Unix epoch (the
	// client's clock), or "" for the Redis server's TIME.
	Now string
	// More are further holder ids of a cancel, sent after the others: one
	// call cancels them all.
	More []string
}

// The positions of inflight.lua's arguments in ARGV, counted from 0.
const (
	infArgOp = iota
	infArgHolder
	infArgLimit
	infArgTTL
	infArgMargin
	infArgNow
	infNumArgs
)

// infArgNames are the names by which inflight.lua reads its arguments.
var infArgNames = [infNumArgs]string{
	infArgOp:     "ARG_INF_OP",
	infArgHolder: "ARG_INF_HOLDER",
	infArgLimit:  "ARG_INF_LIMIT",
	infArgTTL:    "ARG_INF_TTL",
	infArgMargin: "ARG_INF_MARGIN",
	infArgNow:    "ARG_INF_NOW",
}

// ARGV returns the arguments in the order inflight.lua reads them. A
// release sends only the first two.
func (a InflightArgs) ARGV() []any {
	if a.Op == InflightRelease {
		return []any{int64(a.Op), a.Holder}
	}
	argv := make([]any, infNumArgs, infNumArgs+len(a.More))
	argv[infArgOp] = int64(a.Op)
	argv[infArgHolder] = a.Holder
	argv[infArgLimit] = a.Limit
	argv[infArgTTL] = a.TTL
	argv[infArgMargin] = a.MarginMs
	argv[infArgNow] = a.Now
	for _, h := range a.More {
		argv = append(argv, h)
	}
	return argv
}

// inflightNames are the names of inflight.lua's protocol, for names.
func inflightNames(m map[string]string) {
	for a, name := range infArgNames {
		m[name] = strconv.Itoa(a + 1)
	}
	for op, name := range map[InflightOp]string{
		InflightAcquire: "INF_OP_ACQUIRE",
		InflightRenew:   "INF_OP_RENEW",
		InflightRelease: "INF_OP_RELEASE",
		InflightCancel:  "INF_OP_CANCEL",
	} {
		m[name] = "'" + strconv.Itoa(int(op)) + "'"
	}
}

// InflightSource returns the script of package inflight's holds:
// time.lua, then inflight.lua.
func InflightSource() string { return inflightSource }

var inflightSource = expand(timeLua) + "\n" + expand(inflightLua)
