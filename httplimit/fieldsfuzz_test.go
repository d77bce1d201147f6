package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/headers"
	"github.com/floodgate-go/floodgate/httplimit"
)

// FuzzMiddlewareFields hands the middleware arbitrary decisions, as a store
// of the user's may report them, under every policy floodgate accepts (a
// fixed window of any quota and window), in every header style. Every
// request is answered 200 or 429, never 500; the fields parse back with
// package headers; the counts are the decision's, clamped to [0,
// headers.MaxInteger]; and the body agrees with the fields. A policy
// floodgate.New refuses is ErrInvalidConfig there, before the middleware.
//
//	go test -run '^$' -fuzz FuzzMiddlewareFields -fuzztime 30s ./httplimit
func FuzzMiddlewareFields(f *testing.F) {
	const e15, p53 = 1_000_000_000_000_000, 1 << 53
	f.Add(true, int64(100), int64(42), int64(16500*time.Millisecond), int64(0), int64(100), int64(time.Minute), uint8(1), false, false)
	f.Add(false, int64(100), int64(0), int64(58*time.Second), int64(2100*time.Millisecond), int64(100), int64(time.Minute), uint8(7), true, false)
	f.Add(true, int64(e15), int64(e15-1), int64(time.Second), int64(0), int64(e15), int64(time.Minute), uint8(1), false, false)
	f.Add(false, int64(p53), int64(p53-1), int64(time.Minute), int64(time.Nanosecond), int64(p53), int64(time.Minute), uint8(2), false, true)
	f.Add(true, int64(0), int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), uint8(4), true, false)
	f.Add(false, int64(-1), int64(-5), int64(-time.Second), int64(-time.Second), int64(0), int64(0), uint8(0), false, true)
	f.Add(true, int64(1), int64(1), int64(0), int64(0), int64(-1), int64(time.Second), uint8(1), false, false)
	// The extreme decisions again, under a policy floodgate accepts.
	f.Add(true, int64(0), int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), int64(100), int64(time.Minute), uint8(4), true, false)
	f.Add(false, int64(-1), int64(-5), int64(-time.Second), int64(-time.Second), int64(1), int64(time.Nanosecond), uint8(7), false, true)
	f.Add(false, int64(math.MaxInt64), int64(0), int64(0), int64(math.MaxInt64), int64(1<<53), int64(floodgate.MaxWindow), uint8(3), true, false)
	now := time.Unix(1_700_000_000, 123_456_789)
	clock := func() time.Time { return now }
	f.Fuzz(func(t *testing.T, allowed bool, limit, remaining, resetAfter, retryAfter, quota, window int64, style uint8, epoch, problem bool) {
		d := floodgate.Decision{Allowed: allowed, Limit: limit, Remaining: remaining,
			ResetAfter: time.Duration(resetAfter), RetryAfter: time.Duration(retryAfter)}
		alg := floodgate.FixedWindow{Limit: quota, Window: time.Duration(window)}
		lim, err := floodgate.New(&fakeStore{decide: func(context.Context, string, int64, time.Duration) (floodgate.Decision, error) {
			return d, nil
		}}, alg, nil)
		if err != nil {
			if !errors.Is(err, floodgate.ErrInvalidConfig) || alg.Validate() == nil {
				t.Fatalf("floodgate.New(%v) = %v, want ErrInvalidConfig from Validate", alg, err)
			}
			return
		}
		pol := lim.Policy()
		want := headers.Style(style) & (headers.StyleIETF | headers.StyleDraft | headers.StyleX)
		opts := &httplimit.Options{Style: want, OmitFields: want == 0, ProblemDetails: problem, Now: clock}
		parse := &headers.ParseOptions{Now: clock, MaxRetryAfter: math.MaxInt64, XReset: headers.ResetDelta}
		if epoch {
			opts.XReset, parse.XReset = headers.ResetEpoch, headers.ResetEpoch
		}
		mw, err := httplimit.New(lim, opts)
		if err != nil {
			t.Fatalf("New with policy %+v: %v", pol, err)
		}

		rec := do(t, mw(&okHandler{}), "192.0.2.1:1")
		if wantCode := map[bool]int{true: http.StatusOK, false: http.StatusTooManyRequests}[allowed]; rec.Code != wantCode {
			t.Fatalf("decision %+v, policy %+v, style %v: status %d, want %d; body %q", d, pol, want, rec.Code, wantCode, rec.Body.String())
		}
		st, err := headers.Parse(rec.Header(), parse)
		if err != nil {
			t.Fatalf("decision %+v, policy %+v: Parse(%v): %v", d, pol, rec.Header(), err)
		}
		if st.Styles != want {
			t.Fatalf("decision %+v: styles %v sent, want %v: %v", d, st.Styles, want, rec.Header())
		}

		// What the fields can carry: counts up to MaxInteger, durations in
		// whole seconds that a time.Duration holds.
		clamp := func(n int64) int64 { return min(max(n, 0), headers.MaxInteger) }
		secs := func(d int64) int64 {
			return headers.Seconds(min(time.Duration(d), math.MaxInt64/time.Second*time.Second))
		}
		q := clamp(quota)
		if limit > 0 {
			q = clamp(limit)
		}
		r := clamp(remaining)
		retry := max(1, secs(retryAfter))
		if st.HasRetryAfter != !allowed {
			t.Fatalf("decision %+v: Retry-After present = %v", d, st.HasRetryAfter)
		}
		if !allowed && st.RetryAfter != time.Duration(retry)*time.Second {
			t.Fatalf("decision %+v: Retry-After %v, want %ds", d, st.RetryAfter, retry)
		}
		if want != 0 {
			if len(st.Policies) != 1 || len(st.Limits) != 1 {
				t.Fatalf("decision %+v: %d policies and %d limits: %v", d, len(st.Policies), len(st.Limits), rec.Header())
			}
			if st.Policies[0].Quota != q || st.Limits[0].Remaining != r {
				t.Fatalf("decision %+v, policy %+v: q=%d r=%d, want q=%d r=%d", d, pol, st.Policies[0].Quota, st.Limits[0].Remaining, q, r)
			}
			if w := time.Duration(secs(window)) * time.Second; want&headers.StyleIETF != 0 && st.Policies[0].Window != w {
				t.Fatalf("policy %+v: w = %v, want %v", pol, st.Policies[0].Window, w)
			}
			reset := secs(resetAfter)
			if !allowed {
				reset = retry
			}
			if got := st.Limits[0].Reset; !epoch && got != time.Duration(reset)*time.Second {
				t.Fatalf("decision %+v: reset %v, want %ds", d, got, reset)
			}
		}
		if !allowed && !problem {
			var body headers.ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("decision %+v: body %q: %v", d, rec.Body.String(), err)
			}
			if body.Error.Limit != q || body.Error.Remaining != r || body.Error.RetryAfter != retry {
				t.Fatalf("decision %+v: body %+v disagrees with q=%d r=%d Retry-After %d", d, body.Error, q, r, retry)
			}
		}
	})
}
