package httplimit_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/headers"
	"github.com/floodgate-go/floodgate/httplimit"
)

// TestMiddlewareFieldsRoundTrip runs every algorithm behind the middleware in
// every header style, reads each response back with headers.Parse, and checks
// that the fields say exactly what the decision said (in whole seconds,
// rounded up) and that a client which trusts them is right to:
//
//   - r: after a response with r = k, exactly k more requests are admitted
//     at that instant, then one is denied (except for the leaky bucket, whose
//     r is free queue space and AllowN admits only an empty queue);
//   - Retry-After: waiting it, the denied request is admitted, and it is
//     never shorter than the decision's RetryAfter nor than t;
//   - t of an admitted request: waiting it restores the whole quota.
//
// The sliding window counter's r and Retry-After come from its weighted
// estimate; the checks hold for it as for the exact algorithms.
func TestMiddlewareFieldsRoundTrip(t *testing.T) {
	algs := []floodgate.Algorithm{
		floodgate.TokenBucket{Rate: 2, Per: time.Second, Burst: 5},
		floodgate.LeakyBucket{Rate: 2, Per: time.Second, Capacity: 5},
		floodgate.FixedWindow{Limit: 5, Window: 10 * time.Second},
		floodgate.SlidingWindow{Limit: 5, Window: 10 * time.Second},
		floodgate.SlidingLog{Limit: 5, Window: 10 * time.Second},
	}
	styles := []struct {
		name  string
		style headers.Style
		reset headers.ResetFormat
	}{
		{"ietf", headers.StyleIETF, headers.ResetAuto},
		{"draft", headers.StyleDraft, headers.ResetAuto},
		{"x-delta", headers.StyleX, headers.ResetDelta},
		{"x-epoch", headers.StyleX, headers.ResetEpoch},
	}
	for _, alg := range algs {
		for _, s := range styles {
			t.Run(fmt.Sprintf("%v/%s", alg, s.name), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					roundTrip(t, alg, s.style, s.reset)
				})
			})
		}
	}
}

func roundTrip(t *testing.T, alg floodgate.Algorithm, style headers.Style, reset headers.ResetFormat) {
	lim, err := floodgate.New(newStore(t), alg, nil)
	require.NoError(t, err)
	var last floodgate.Decision
	h := newMW(t, lim, &httplimit.Options{
		Style:      style,
		XReset:     reset,
		OnDecision: func(_ *http.Request, _ string, d floodgate.Decision) { last = d },
	})(&okHandler{})
	policy := alg.Policy()
	_, leaky := alg.(floodgate.LeakyBucket)
	parseOpts := &headers.ParseOptions{XReset: reset}

	// send makes one request, checks its fields against its decision and
	// returns both.
	send := func(step string) (floodgate.Decision, headers.State) {
		t.Helper()
		rec := do(t, h, "192.0.2.1:1234")
		d := last
		st, err := headers.Parse(rec.Header(), parseOpts)
		require.NoError(t, err, "%s: Parse(%v)", step, rec.Header())
		require.Len(t, st.Limits, 1, step)
		require.Len(t, st.Policies, 1, step)
		l, p := st.Limits[0], st.Policies[0]

		assert.Equal(t, d.Limit, p.Quota, "%s: quota", step)
		assert.Equal(t, policy.Quota, d.Limit, "%s: Decision.Limit vs Policy.Quota", step)
		assert.Equal(t, d.Remaining, l.Remaining, "%s: remaining", step)
		if style == headers.StyleIETF {
			assert.Equal(t, time.Duration(headers.Seconds(policy.Window))*time.Second, p.Window, "%s: w", step)
		}
		want := d.ResetAfter
		if !d.Allowed {
			want = max(time.Second, d.RetryAfter)
		}
		wantT := time.Duration(headers.Seconds(want)) * time.Second
		if reset == headers.ResetEpoch {
			// The epoch is the rounded-up instant: up to 1s later.
			assert.GreaterOrEqual(t, l.Reset, want, "%s: reset earlier than the truth", step)
			assert.LessOrEqual(t, l.Reset, wantT+time.Second, "%s: reset", step)
		} else {
			assert.Equal(t, wantT, l.Reset, "%s: reset", step)
		}

		if d.Allowed {
			assert.Equal(t, http.StatusOK, rec.Code, step)
			assert.False(t, st.HasRetryAfter, "%s: Retry-After on an admitted request", step)
			return d, st
		}
		assert.Equal(t, http.StatusTooManyRequests, rec.Code, step)
		require.True(t, st.HasRetryAfter, "%s: no Retry-After on a denial", step)
		assert.Equal(t, time.Duration(headers.Seconds(max(time.Second, d.RetryAfter)))*time.Second, st.RetryAfter, "%s: Retry-After", step)
		assert.GreaterOrEqual(t, st.RetryAfter, d.RetryAfter, "%s: Retry-After earlier than the truth", step)
		if reset != headers.ResetEpoch {
			assert.GreaterOrEqual(t, st.RetryAfter, l.Reset, "%s: Retry-After earlier than t", step)
		}
		var body headers.ErrorBody
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), step)
		assert.Equal(t, headers.Seconds(st.RetryAfter), body.Error.RetryAfter, "%s: body retry_after", step)
		assert.Equal(t, d.Limit, body.Error.Limit, "%s: body limit", step)
		return d, st
	}

	gaps := []time.Duration{0, 300 * time.Millisecond, 1700 * time.Millisecond, 4 * time.Second, 50 * time.Millisecond}
	for cycle := range 12 {
		// A burst: the first response's r promises exactly that many more.
		d, st := send(fmt.Sprintf("cycle %d first", cycle))
		if d.Allowed && !leaky {
			promised := st.Limits[0].Remaining
			for i := range promised {
				d2, _ := send(fmt.Sprintf("cycle %d promised %d/%d", cycle, i+1, promised))
				require.True(t, d2.Allowed, "cycle %d: request %d of the %d promised by r was denied", cycle, i+1, promised)
			}
			d, st = send(fmt.Sprintf("cycle %d beyond r", cycle))
			require.False(t, d.Allowed, "cycle %d: admitted beyond the %d promised by r", cycle, promised)
		}
		for !d.Allowed {
			// Retry-After is truthful: waiting it is enough.
			time.Sleep(st.Wait())
			d, st = send(fmt.Sprintf("cycle %d after Retry-After", cycle))
			require.True(t, d.Allowed, "cycle %d: denied again after waiting Retry-After", cycle)
		}
		if cycle%3 == 2 {
			// t of an admitted request restores the whole quota.
			time.Sleep(st.Limits[0].Reset)
			d, _ = send(fmt.Sprintf("cycle %d after t", cycle))
			require.True(t, d.Allowed)
			assert.Equal(t, policy.Quota-1, d.Remaining, "cycle %d: quota not restored after t", cycle)
		}
		time.Sleep(gaps[cycle%len(gaps)])
	}
}
