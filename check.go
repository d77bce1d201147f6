package floodgate

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/floodgate-go/floodgate/internal/timemath"
)

// The argument rules of every step, written once: the Limiter, the stores
// and package step call these functions. ValidTake is the test of the hot
// path (a take of n units), which inlines; the Check functions return the
// error of an invalid argument, or nil.

// MaxKeyLen is the longest key a step accepts, in bytes.
const MaxKeyLen = 1024

// MaxNameLen is the longest name a Limiter or a component accepts, in
// bytes.
const MaxNameLen = 1024

// MaxWindow is the longest window, and the longest time to restore a full
// quota, that an algorithm accepts: 2^52 ns, about 52 days. The bound keeps
// every time difference exact in Redis' Lua, whose numbers are doubles.
const MaxWindow = time.Duration(timemath.MaxWindow)

// MaxDelay is the longest delay a Reserve or Wait can be admitted with:
// 2^52 ns, about 52 days. Larger maxDelay arguments are treated as MaxDelay.
const MaxDelay = time.Duration(1 << 52)

// ValidTake reports whether a take of n units of key, under a quota of
// quota units, passes CheckKey and CheckRequest: the test of a hot path,
// which calls them only to build the error of an invalid take.
func ValidTake(key string, n, quota int64) bool {
	return uint(len(key))-1 < MaxKeyLen && uint64(n-1) < uint64(quota)
}

// CheckKey returns nil for a key a step accepts, and otherwise an error
// matching ErrEmptyKey or ErrKeyTooLong.
func CheckKey(key string) error {
	switch {
	case key == "":
		return ErrEmptyKey
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrKeyTooLong, len(key), MaxKeyLen)
	}
	return nil
}

// CheckRequest returns nil for a request a step accepts under a valid
// configuration of quota units (its Policy().Quota), whatever the state,
// and otherwise the error every store returns for it: a cost below 1, or
// 0 for OpSettle (ErrInvalidN), a negative MaxDelay (ErrInvalidDelay), an
// unknown Op (ErrInvalidConfig), or an OpTake above the quota
// (ErrExceedsLimit).
func CheckRequest(req Request, quota int64) error {
	if (req.N >= 1 || req.N != 0 && req.Op == OpSettle) && req.MaxDelay >= 0 && req.Op <= OpSettle &&
		(req.N <= quota || req.Op != OpTake) {
		return nil
	}
	switch {
	case req.N == 0 || req.N < 0 && req.Op != OpSettle:
		return fmt.Errorf("%w: got %d", ErrInvalidN, req.N)
	case req.MaxDelay < 0:
		return fmt.Errorf("%w: got %v", ErrInvalidDelay, req.MaxDelay)
	case req.Op > OpSettle:
		return fmt.Errorf("%w: unknown Op %d", ErrInvalidConfig, req.Op)
	}
	return fmt.Errorf("%w: n=%d, limit %d", ErrExceedsLimit, req.N, quota)
}

// CheckTime returns nil for an instant a store's clock may read, and
// otherwise an error matching ErrInvalidConfig: a step is decided only
// from the Unix epoch to before 9·10^9 seconds after it (in the year
// 2255). State words hold nanoseconds since the epoch in an int64, 0
// meaning a key never seen, and Redis' scripts compute window starts in
// microseconds, which doubles hold exactly only below 2^53.
func CheckTime(t time.Time) error {
	if uint64(t.Unix()) < timemath.MaxUnix {
		return nil
	}
	// Seconds, not a formatted instant: formatting a time.Time links the
	// time package's layouts and zone database into every binary, a
	// twentieth of a small program's size.
	return fmt.Errorf("%w: the store's clock reads %d s since the Unix epoch, outside 0 to %d (1970 to 2255)",
		ErrInvalidConfig, t.Unix(), int64(timemath.MaxUnix))
}

// CheckName returns nil for a name a Limiter or a component accepts, and
// otherwise an error matching ErrInvalidConfig. A name is 1 to MaxNameLen
// bytes of UTF-8 without '{' or '}': it is part of the limiter's keys in
// a store (where Redis reads braces as a Cluster hash tag) and the value
// of a label in the metrics adapters (where Prometheus refuses a value
// that is not UTF-8).
func CheckName(name string) error {
	if uint(len(name))-1 < MaxNameLen && utf8.ValidString(name) && !strings.ContainsAny(name, "{}") {
		return nil
	}
	switch {
	case name == "":
		return fmt.Errorf("%w: empty name", ErrInvalidConfig)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: name of %d bytes, at most %d", ErrInvalidConfig, len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: name %q is not UTF-8", ErrInvalidConfig, name)
	}
	return fmt.Errorf("%w: name %q holds a brace", ErrInvalidConfig, name)
}
