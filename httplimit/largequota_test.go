package httplimit_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/headers"
	"github.com/floodgate-go/floodgate/httplimit"
)

// sfMaxInteger is the largest Integer of RFC 9651 (section 3.3.1): fifteen
// digits. The tests state it themselves rather than trust the constant of
// package headers.
const sfMaxInteger = 999_999_999_999_999

// largeQuotaAlgorithms are configurations at the quotas the fields cannot
// carry: 10^15, the first above sfMaxInteger; 2^52, the largest of the
// buckets (a restore time of at most MaxWindow at one unit per nanosecond)
// and of redisstore (scripts.MaxQuota); 2^53, the largest of the windows.
// Each "largest" is checked to be the largest: one more is refused.
func largeQuotaAlgorithms(t *testing.T) []floodgate.Algorithm {
	t.Helper()
	bucket := func(q int64) []floodgate.Algorithm {
		return []floodgate.Algorithm{
			floodgate.TokenBucket{Rate: 1_000_000_000, Per: time.Second, Burst: q},
			floodgate.LeakyBucket{Rate: 1_000_000_000, Per: time.Second, Capacity: q},
		}
	}
	window := func(q int64) []floodgate.Algorithm {
		return []floodgate.Algorithm{
			floodgate.FixedWindow{Limit: q, Window: time.Minute},
			floodgate.SlidingWindow{Limit: q, Window: time.Minute},
			floodgate.SlidingLog{Limit: q, Window: time.Minute},
		}
	}
	for _, a := range append(bucket(1<<52+1), window(1<<53+1)...) {
		require.ErrorIs(t, a.Validate(), floodgate.ErrInvalidConfig, "%v is valid: the largest quota is larger", a)
	}
	var algs []floodgate.Algorithm
	algs = append(algs, bucket(1e15)...)
	algs = append(algs, bucket(1<<52)...)
	algs = append(algs, window(1e15)...)
	algs = append(algs, window(1<<53)...)
	for _, a := range algs {
		require.NoError(t, a.Validate(), "%v", a)
	}
	return algs
}

// TestMiddlewareLargeQuotas: every quota the library accepts works behind
// the middleware, in every header style: admitted requests get 200, denied
// ones 429, and the fields parse back, with the counts above sfMaxInteger
// sent as sfMaxInteger.
func TestMiddlewareLargeQuotas(t *testing.T) {
	styles := []struct {
		name  string
		opts  httplimit.Options
		parse *headers.ParseOptions
		want  headers.Style
	}{
		{"ietf", httplimit.Options{}, nil, headers.StyleIETF},
		{"draft", httplimit.Options{Style: headers.StyleDraft}, nil, headers.StyleDraft},
		{"x delta", httplimit.Options{Style: headers.StyleX}, &headers.ParseOptions{XReset: headers.ResetDelta}, headers.StyleX},
		{"x epoch", httplimit.Options{Style: headers.StyleX, XReset: headers.ResetEpoch}, &headers.ParseOptions{XReset: headers.ResetEpoch}, headers.StyleX},
		{"all", httplimit.Options{Style: headers.StyleIETF | headers.StyleDraft | headers.StyleX}, nil,
			headers.StyleIETF | headers.StyleDraft | headers.StyleX},
		{"omitted", httplimit.Options{OmitFields: true}, nil, 0},
		{"omitted, problem details", httplimit.Options{OmitFields: true, ProblemDetails: true}, nil, 0},
	}
	for _, alg := range largeQuotaAlgorithms(t) {
		for _, s := range styles {
			t.Run(fmt.Sprintf("%v/%s", alg, s.name), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					largeQuota(t, alg, s.opts, s.parse, s.want)
				})
			})
		}
	}
}

func largeQuota(t *testing.T, alg floodgate.Algorithm, opts httplimit.Options, parse *headers.ParseOptions, want headers.Style) {
	lim, err := floodgate.New(newStore(t), alg, nil)
	require.NoError(t, err)
	quota := alg.Policy().Quota
	var last floodgate.Decision
	opts.OnDecision = func(_ *http.Request, _ string, d floodgate.Decision) { last = d }
	opts.Cost = func(r *http.Request) int64 {
		n, err := strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64)
		if err != nil {
			return 1
		}
		return n
	}
	_, err = httplimit.New(lim, &opts)
	require.NoError(t, err, "New refuses a configuration floodgate accepts")
	h := newMW(t, lim, &opts)(&okHandler{})
	if parse == nil {
		parse = &headers.ParseOptions{}
	}
	parse.Now = time.Now
	// A full leaky bucket's AllowN waits for its queue to empty: up to
	// MaxWindow, beyond Parse's default bound of a day.
	parse.MaxRetryAfter = floodgate.MaxWindow + time.Second

	for i, step := range []struct {
		addr    string
		cost    int64
		allowed bool
	}{
		{"192.0.2.1:1", 1, true},      // r = quota-1, above sfMaxInteger
		{"192.0.2.1:1", quota, false}, // one unit short
		{"192.0.2.2:1", quota, true},  // the whole quota on a fresh key: r = 0
		{"192.0.2.2:1", 1, false},
	} {
		rec := do(t, h, step.addr, "X-Cost", strconv.FormatInt(step.cost, 10))
		d := last
		name := fmt.Sprintf("request %d (cost %d)", i+1, step.cost)
		require.Equal(t, step.allowed, d.Allowed, "%s: decision %+v", name, d)
		if step.allowed {
			require.Equal(t, http.StatusOK, rec.Code, "%s: body %q", name, rec.Body.String())
		} else {
			require.Equal(t, http.StatusTooManyRequests, rec.Code, "%s: body %q", name, rec.Body.String())
		}

		st, err := headers.Parse(rec.Header(), parse)
		require.NoError(t, err, "%s: Parse(%v)", name, rec.Header())
		assert.Equal(t, want, st.Styles, "%s: styles sent: %v", name, rec.Header())
		assert.Equal(t, !d.Allowed, st.HasRetryAfter, "%s: Retry-After", name)
		if !d.Allowed {
			assert.GreaterOrEqual(t, st.RetryAfter, d.RetryAfter, "%s: Retry-After earlier than the truth", name)
		}
		if want != 0 {
			require.Len(t, st.Policies, 1, name)
			require.Len(t, st.Limits, 1, name)
			assert.EqualValues(t, min(quota, sfMaxInteger), st.Policies[0].Quota, "%s: q", name)
			assert.Equal(t, min(d.Remaining, sfMaxInteger), st.Limits[0].Remaining, "%s: r", name)
			assert.LessOrEqual(t, st.Limits[0].Remaining, st.Policies[0].Quota, "%s: r above q", name)
		}
		if !d.Allowed {
			var body headers.ErrorBody
			if opts.ProblemDetails {
				assert.Equal(t, headers.ContentTypeProblem, rec.Header().Get("Content-Type"), name)
				continue
			}
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), "%s: body %q", name, rec.Body.String())
			assert.EqualValues(t, min(quota, sfMaxInteger), body.Error.Limit, "%s: the body's limit agrees with the fields", name)
		}
	}
}
