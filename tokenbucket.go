package floodgate

import (
	"fmt"
	"time"
)

// TokenBucket admits up to Burst units at once and refills at Rate units per
// Per. It is the usual choice for APIs: it allows short bursts and enforces
// a long-run rate.
//
// The state is one word, the theoretical arrival time of GCRA (the Generic
// Cell Rate Algorithm of ITU-T I.371): the instant at which the bucket would
// be full again. The emission interval Per/Rate is rounded up to a whole
// nanosecond, so the enforced rate is exact when Per is a multiple of Rate
// nanoseconds (100 per second, 1000 per minute) and otherwise lower by less
// than one nanosecond per unit (3 per second: 1 part in 10^9).
//
// Reserve may take units before they have refilled, putting the bucket in
// debt for up to maxDelay, as golang.org/x/time/rate does; later requests
// wait until the debt is repaid.
//
// The zero value is not usable; TokenBucket is a plain value, safe to copy
// and to share.
type TokenBucket struct {
	// Rate is the number of units restored per Per; at least 1.
	Rate int64
	// Per is the period of Rate; at least Rate nanoseconds.
	Per time.Duration
	// Burst is the bucket size: the most units admitted at once; at least
	// 1. Burst/Rate·Per must be at most MaxWindow.
	Burst int64
}

var _ Algorithm = TokenBucket{}

// Validate reports whether the configuration is usable; errors match
// ErrInvalidConfig.
func (a TokenBucket) Validate() error {
	_, _, err := emission(a.Rate, a.Per, a.Burst, "Burst")
	return err
}

// Policy returns Burst units restored in Burst/Rate·Per.
func (a TokenBucket) Policy() Policy {
	_, tau, err := emission(a.Rate, a.Per, a.Burst, "Burst")
	if err != nil {
		return Policy{}
	}
	return Policy{Quota: a.Burst, Window: time.Duration(tau)}
}

func (TokenBucket) algorithm() {}

// String describes the configuration, e.g. "TokenBucket{100 per 1s, burst 200}".
func (a TokenBucket) String() string {
	return fmt.Sprintf("TokenBucket{%d per %v, burst %d}", a.Rate, a.Per, a.Burst)
}
