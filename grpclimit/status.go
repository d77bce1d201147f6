package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ErrNoKey reports a call for which the interceptor's key function found no
// key. The call is refused with codes.Unauthenticated: a call without its
// credential is the client's to fix, not a server error.
var ErrNoKey = errors.New("grpclimit: no rate-limit key for the call")

// RetryDelay returns d rounded up to a whole millisecond, the resolution of
// grpc-retry-pushback-ms, and the RetryInfo.retry_delay and the pushback of
// a denial whose Decision.RetryAfter is d: a client that waits it is never
// early. A d at or below 0 gives 0; a d within a millisecond of the largest
// Duration gives the largest whole millisecond.
func RetryDelay(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	const ms = time.Millisecond
	if d > math.MaxInt64/ms*ms {
		return math.MaxInt64 / ms * ms
	}
	return (d + ms - 1) / ms * ms
}

// pushback returns the grpc-retry-pushback-ms trailer of a wait of d (a
// whole number of milliseconds, from RetryDelay).
func pushback(d time.Duration) metadata.MD {
	return metadata.MD{MetadataRetryPushback: {strconv.FormatInt(d.Milliseconds(), 10)}}
}

// denial returns the status of a refused call: code, msg, a
// google.rpc.RetryInfo whose retry_delay is wait (from RetryDelay), and a
// google.rpc.QuotaFailure whose one violation names the policy: its
// subject is the policy's name in the ratelimit fields, its quota_id the
// limiter's name, its quota_value the quota and its description the
// message.
func denial(code codes.Code, msg string, wait time.Duration, policy, quotaID string, quota int64) *status.Status {
	st := status.New(code, msg)
	details := []*errdetails.QuotaFailure_Violation{{
		Subject:     policy,
		Description: msg,
		QuotaId:     quotaID,
		QuotaValue:  quota,
	}}
	withDetails, err := st.WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)},
		&errdetails.QuotaFailure{Violations: details},
	)
	if err != nil {
		// Unreachable: the details are well-formed messages, and the
		// code is not OK. The status without them still refuses.
		return st
	}
	return withDetails
}

// errorStatus returns the status of a call that no decision could be made
// for, given the interceptor's answer to unavailability: no key is
// Unauthenticated; a failing store (floodgate.ErrUnavailable) is
// Unavailable with a RetryInfo of unavailableWait; an ended context is the
// context's status (Canceled, DeadlineExceeded); anything else (a cost
// out of range, a key too long) is Internal, without the error's text,
// which may name internal hosts.
func errorStatus(err error, unavailableWait time.Duration) *status.Status {
	switch {
	case errors.Is(err, ErrNoKey):
		return status.New(codes.Unauthenticated, "grpclimit: the call carries no credential to rate-limit it by")
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err)
	case errors.Is(err, floodgate.ErrUnavailable):
		st := status.New(codes.Unavailable, "grpclimit: the rate limit could not be decided; retry after "+unavailableWait.String())
		if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(unavailableWait)}); err == nil {
			return withInfo
		}
		return st
	default:
		return status.New(codes.Internal, "grpclimit: the rate limit could not be applied")
	}
}

// rejectCode returns the code of a rejection configured as c: def for the
// zero value (codes.OK), c for codes.ResourceExhausted and
// codes.Unavailable, and an error matching floodgate.ErrInvalidConfig for
// any other code.
func rejectCode(c, def codes.Code) (codes.Code, error) {
	switch c {
	case codes.OK:
		return def, nil
	case codes.ResourceExhausted, codes.Unavailable:
		return c, nil
	}
	return 0, fmt.Errorf("%w: rejection code %v, want ResourceExhausted or Unavailable", floodgate.ErrInvalidConfig, c)
}

// unavailableRetryAfter validates an UnavailableRetryAfter option and
// returns it with its default, rounded up as RetryInfo carries it.
func unavailableRetryAfter(d time.Duration) (time.Duration, error) {
	switch {
	case d < 0:
		return 0, fmt.Errorf("%w: negative UnavailableRetryAfter %v", floodgate.ErrInvalidConfig, d)
	case d == 0:
		d = defaultUnavailableRetryAfter
	}
	return RetryDelay(d), nil
}

// unavailableWait returns the wait of the RetryInfo of the status
// errorStatus gives err: d for a failed store, 0 for the others, which
// carry none.
func unavailableWait(err error, d time.Duration) time.Duration {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, floodgate.ErrUnavailable) {
		return 0
	}
	return d
}
