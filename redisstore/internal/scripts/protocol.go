package scripts

import (
	"github.com/floodgate-go/floodgate/internal/timemath"
	"regexp"
	"strconv"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/step"
)

// This file is the protocol between redisstore and the scripts, and the
// only place it is written: the position of each argument in ARGV, the
// codes of the operations, and the bounds the scripts' arithmetic needs.
// The Lua files name these values (ARGV[ARG_N], OP_TAKE, MAX_UNIX), and
// Source writes each value in place of its name (see expand).

// Args are the arguments of one decision's script, by name.
type Args struct {
	// Op is the step: floodgate.OpTake, OpTakeUpTo or OpSettle.
	Op floodgate.Op
	// Check makes the step check-only: the script replies what the step
	// would do and writes nothing a decision can observe. ARGV carries it
	// in Op's code, plus checkCode, so that a check never takes a fast
	// path (they test for OP_TAKE).
	Check bool
	// N is the number of units; for OpSettle, the units charged
	// (positive) or given back (negative).
	N int64
	// MaxDelay is the longest delay of a take, in nanoseconds, at most
	// floodgate.MaxDelay.
	MaxDelay int64
	// MarginMs is the TTL margin, in milliseconds.
	MarginMs int64
	// Quota is the burst, the capacity or the limit, at most MaxQuota.
	Quota int64
	// Period is the emission interval (buckets) or the window (windows),
	// in nanoseconds.
	Period int64
	// Tau is the time to restore the full quota (buckets), in nanoseconds,
	// at most floodgate.MaxWindow; 0 for the windows.
	Tau int64
	// Bounds, for a calendar window, replaces Period in ARGV: the window
	// boundaries calendarwindow.lua reads, in decimal seconds separated by
	// spaces.
	Bounds string
	// Now is the decision's instant in decimal nanoseconds since the Unix
	// epoch (the client's clock), or "" for the Redis server's TIME.
	Now string
	// At is, for a settlement, the instant the units were admitted for,
	// in decimal nanoseconds since the Unix epoch; "" otherwise.
	At string
}

// Limit is one limit of a Limits decision (see Args.LimitsARGV): its
// algorithm's kind and the numbers Args gives a decision of that kind
// alone.
type Limit struct {
	Kind   step.Kind // KindCalendar for a calendar window
	Quota  int64
	Period int64
	Tau    int64
	Bounds string // as Args.Bounds
}

// KindCalendar is the code of a calendar window's script among the
// algorithms' (Source, and a limit's kind in a Limits): its kind,
// step.KindCalendarWindow, whose state is a fixed window's.
const KindCalendar = step.KindCalendarWindow

// arg is the position of an argument in ARGV, counted from 0 (Lua's
// ARGV[arg+1]). The optional arguments come last, so that a take on Redis
// TIME sends only the first seven.
type arg int

const (
	argOp arg = iota
	argN
	argMaxDelay
	argMargin
	argQuota
	argPeriod
	argTau
	argNow
	argAt
	numArgs
)

// The arguments of the limits of a Limits decision follow its numArgs
// arguments, limitArgs for each limit, in this order, counted from 0 in
// each limit's part.
const (
	limitKind = iota
	limitQuota
	limitPeriod
	limitTau
	limitArgs
)

// checkCode is added to the code of a check-only step's Op in ARGV.
const checkCode = 16

// argNames are the names by which the scripts read the arguments:
// ARGV[ARG_N] is n.
var argNames = [numArgs]string{
	argOp:       "ARG_OP",
	argN:        "ARG_N",
	argMaxDelay: "ARG_MAXDELAY",
	argMargin:   "ARG_MARGIN",
	argQuota:    "ARG_QUOTA",
	argPeriod:   "ARG_PERIOD",
	argTau:      "ARG_TAU",
	argNow:      "ARG_NOW",
	argAt:       "ARG_AT",
}

// ARGV returns the arguments in the order the scripts read them: the
// first seven always, Now when it is set or At is, and At when it is set.
// go-redis sends the integers in decimal.
func (a Args) ARGV() []any {
	n := argNow
	switch {
	case a.At != "":
		n = numArgs
	case a.Now != "":
		n = argAt
	}
	argv := make([]any, n)
	a.fill(argv)
	if n > argNow {
		argv[argNow] = a.Now
	}
	if n > argAt {
		argv[argAt] = a.At
	}
	return argv
}

// fill writes the first seven arguments into argv.
func (a Args) fill(argv []any) {
	argv[argOp] = int64(a.Op)
	if a.Check {
		argv[argOp] = int64(a.Op) + checkCode
	}
	argv[argN] = a.N
	argv[argMaxDelay] = a.MaxDelay
	argv[argMargin] = a.MarginMs
	argv[argQuota] = a.Quota
	argv[argPeriod] = a.Period
	if a.Bounds != "" {
		argv[argPeriod] = a.Bounds
	}
	argv[argTau] = a.Tau
}

// LimitsARGV returns the arguments of a Limits decision's script
// (LimitsSource): all of a's, Now and At "" when unset (its Quota, Period
// and Tau are not read), then each limit's kind, quota, period and tau, in
// the order of the Limits and of KEYS. limits.lua gives each limit a's
// arguments with the limit's numbers in place of a's.
func (a Args) LimitsARGV(limits []Limit) []any {
	argv := make([]any, int(numArgs)+limitArgs*len(limits))
	a.fill(argv)
	argv[argNow], argv[argAt] = a.Now, a.At
	for i, l := range limits {
		part := argv[int(numArgs)+limitArgs*i:]
		part[limitKind] = int64(l.Kind)
		part[limitQuota] = l.Quota
		part[limitPeriod] = l.Period
		if l.Bounds != "" {
			part[limitPeriod] = l.Bounds
		}
		part[limitTau] = l.Tau
	}
	return argv
}

// MaxUnix bounds the instants of decisions on Redis: the scripts decide
// only at instants before MaxUnix seconds since the Unix epoch (in 2255),
// since they compute window starts from the instant in microseconds,
// which doubles hold exactly only below 2^53. It is the clock bound of
// every store (floodgate.CheckTime), defined once in internal/timemath.
const MaxUnix = timemath.MaxUnix

// MaxQuota is the largest quota the scripts count exactly: a count of at
// most MaxQuota plus a request of at most MaxQuota units stays within
// 2^53, where doubles still tell integers apart.
const MaxQuota = 1 << 52

// names are the protocol's names in the scripts, each with the Lua literal
// that expand writes in its place.
var names = func() map[string]string {
	m := map[string]string{
		"OP_TAKE":          opLiteral(floodgate.OpTake),
		"OP_TAKE_UP_TO":    opLiteral(floodgate.OpTakeUpTo),
		"OP_SETTLE":        opLiteral(floodgate.OpSettle),
		"CHECK_CODE":       strconv.Itoa(checkCode),
		"MAX_UNIX":         strconv.FormatInt(MaxUnix, 10),
		"MAX_QUOTA":        strconv.FormatInt(MaxQuota, 10),
		"ARG_LIMITS":       strconv.Itoa(int(numArgs) + 1),
		"LIMIT_ARGS":       strconv.Itoa(limitArgs),
		"LIMIT_KIND":       strconv.Itoa(limitKind),
		"LIMIT_QUOTA":      strconv.Itoa(limitQuota),
		"LIMIT_PERIOD":     strconv.Itoa(limitPeriod),
		"LIMIT_TAU":        strconv.Itoa(limitTau),
		"KIND_SLIDING_LOG": kindLiteral(step.KindSlidingLog),
	}
	for a, name := range argNames {
		m[name] = strconv.Itoa(a + 1)
	}
	inflightNames(m)
	return m
}()

// kindLiteral returns the Lua string ARGV holds for a limit's kind.
func kindLiteral(k step.Kind) string {
	return "'" + strconv.Itoa(int(k)) + "'"
}

// opLiteral returns the Lua string ARGV holds for op: the scripts compare
// ARGV[ARG_OP] as a string, as Redis hands it over.
func opLiteral(op floodgate.Op) string {
	return "'" + strconv.Itoa(int(op)) + "'"
}

// name matches the words the scripts use for the protocol's values: upper
// case with an underscore, which no other word in them is.
var name = regexp.MustCompile(`\b[A-Z][A-Z0-9]*(_[A-Z0-9]+)+\b`)

// expand returns src with each protocol name replaced by its value, in
// code and comments alike, so that a script carries the values as literals
// and reads as Redis runs it. A word it does not know stays, and the
// script fails where it reads it (an undefined global); TestProtocolNames
// checks that no script holds one.
func expand(src string) string {
	return name.ReplaceAllStringFunc(src, func(w string) string {
		if v, ok := names[w]; ok {
			return v
		}
		return w
	})
}
