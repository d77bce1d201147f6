package headers_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate/headers"
)

var minutePolicy = headers.Policy{Name: "default", Quota: 100, Window: time.Minute}

func TestWrite(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	allowed := headers.Report{Policy: minutePolicy, Remaining: 42, ResetAfter: 16500 * time.Millisecond}
	denied := headers.Report{Policy: minutePolicy, Remaining: 0, ResetAfter: 59 * time.Second, Denied: true, RetryAfter: 2100 * time.Millisecond}
	tests := []struct {
		name  string
		style headers.Style
		rep   headers.Report
		opts  *headers.WriteOptions
		want  http.Header
	}{
		{"ietf allowed", headers.StyleIETF, allowed, nil, http.Header{
			"Ratelimit-Policy": {`"default";q=100;w=60`},
			"Ratelimit":        {`"default";r=42;t=17`},
		}},
		{"ietf denied: t is the retry time, Retry-After equals it", headers.StyleIETF, denied, nil, http.Header{
			"Ratelimit-Policy": {`"default";q=100;w=60`},
			"Ratelimit":        {`"default";r=0;t=3`},
			"Retry-After":      {"3"},
		}},
		{"draft allowed", headers.StyleDraft, allowed, nil, http.Header{
			"Ratelimit-Limit":     {"100"},
			"Ratelimit-Remaining": {"42"},
			"Ratelimit-Reset":     {"17"},
		}},
		{"x delta denied", headers.StyleX, denied, nil, http.Header{
			"X-Ratelimit-Limit":     {"100"},
			"X-Ratelimit-Remaining": {"0"},
			"X-Ratelimit-Reset":     {"3"},
			"Retry-After":           {"3"},
		}},
		{"x epoch rounds up", headers.StyleX, allowed, &headers.WriteOptions{XReset: headers.ResetEpoch, Now: now}, http.Header{
			"X-Ratelimit-Limit":     {"100"},
			"X-Ratelimit-Remaining": {"42"},
			"X-Ratelimit-Reset":     {"1700000017"},
		}},
		{"combined styles", headers.StyleIETF | headers.StyleX, allowed, nil, http.Header{
			"Ratelimit-Policy":      {`"default";q=100;w=60`},
			"Ratelimit":             {`"default";r=42;t=17`},
			"X-Ratelimit-Limit":     {"100"},
			"X-Ratelimit-Remaining": {"42"},
			"X-Ratelimit-Reset":     {"17"},
		}},
		{"no style still sends Retry-After on a denial", 0, denied, nil, http.Header{
			"Retry-After": {"3"},
		}},
		{"denial with zero RetryAfter still waits one second", headers.StyleIETF,
			headers.Report{Policy: minutePolicy, Denied: true}, nil, http.Header{
				"Ratelimit-Policy": {`"default";q=100;w=60`},
				"Ratelimit":        {`"default";r=0;t=1`},
				"Retry-After":      {"1"},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			require.NoError(t, headers.Write(h, tt.style, tt.rep, tt.opts))
			assert.Equal(t, tt.want, h)
		})
	}
}

func TestWriteReplacesAndFailsAtomically(t *testing.T) {
	h := http.Header{}
	h.Add("RateLimit", `"old";r=1;t=1`)
	h.Add("RateLimit", `"older";r=1;t=1`)
	require.NoError(t, headers.Write(h, headers.StyleIETF, headers.Report{Policy: minutePolicy, Remaining: 5}, nil))
	assert.Equal(t, []string{`"default";r=5;t=0`}, h.Values("RateLimit"))

	before := h.Clone()
	bad := headers.Report{Policy: headers.Policy{Name: "ünicode", Quota: 1}, Denied: true}
	assert.ErrorIs(t, headers.Write(h, headers.StyleIETF|headers.StyleX, bad, nil), headers.ErrSyntax)
	assert.Equal(t, before, h, "a failed Write changed the header")

	neg := headers.Report{Policy: minutePolicy, Remaining: -1}
	assert.ErrorIs(t, headers.Write(h, headers.StyleX, neg, nil), headers.ErrRange)
	assert.Equal(t, before, h, "a failed Write changed the header")
}

// TestWriteParseRoundTrip writes a report in every style and reads it back:
// the client side must see what the server meant, in whole seconds rounded up.
func TestWriteParseRoundTrip(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 250_000_000, time.UTC)
	reports := map[string]headers.Report{
		"fresh":             {Policy: minutePolicy, Remaining: 99, ResetAfter: 600 * time.Millisecond},
		"spent":             {Policy: minutePolicy, Remaining: 0, ResetAfter: 59*time.Second + time.Millisecond},
		"denied":            {Policy: minutePolicy, Remaining: 0, ResetAfter: time.Minute, Denied: true, RetryAfter: 12300 * time.Millisecond},
		"full":              {Policy: minutePolicy, Remaining: 100},
		"unnamed no window": {Policy: headers.Policy{Quota: 7}, Remaining: 3, ResetAfter: time.Hour},
	}
	styles := []struct {
		style headers.Style
		wopts *headers.WriteOptions
		popts *headers.ParseOptions
	}{
		{headers.StyleIETF, nil, nil},
		{headers.StyleDraft, nil, nil},
		{headers.StyleX, nil, &headers.ParseOptions{XReset: headers.ResetDelta}},
		{headers.StyleX, &headers.WriteOptions{XReset: headers.ResetEpoch, Now: now},
			&headers.ParseOptions{XReset: headers.ResetEpoch, Now: func() time.Time { return now }}},
		{headers.StyleX, &headers.WriteOptions{XReset: headers.ResetEpoch, Now: now},
			&headers.ParseOptions{Now: func() time.Time { return now }}}, // auto-detected
	}
	for name, rep := range reports {
		for _, s := range styles {
			t.Run(name+"/"+s.style.String(), func(t *testing.T) {
				h := http.Header{}
				require.NoError(t, headers.Write(h, s.style, rep, s.wopts))
				st, err := headers.Parse(h, s.popts)
				require.NoError(t, err, "Parse(%v)", h)
				assert.Equal(t, s.style, st.Styles)
				require.Len(t, st.Limits, 1)
				require.Len(t, st.Policies, 1)

				wantReset := time.Duration(headers.Seconds(rep.Reset())) * time.Second
				if s.wopts != nil && s.wopts.XReset == headers.ResetEpoch {
					// Epoch seconds round the instant up, not the delay.
					at := now.Add(rep.Reset())
					sec := at.Unix()
					if at.Nanosecond() > 0 {
						sec++
					}
					wantReset = time.Unix(sec, 0).Sub(now)
				}
				assert.Equal(t, rep.Remaining, st.Limits[0].Remaining, "remaining")
				assert.Equal(t, wantReset, st.Limits[0].Reset, "reset")
				assert.GreaterOrEqual(t, st.Limits[0].Reset, rep.Reset(), "reset earlier than the truth")
				assert.Equal(t, rep.Policy.Quota, st.Policies[0].Quota, "quota")
				if s.style == headers.StyleIETF {
					assert.Equal(t, rep.Policy.Name, st.Policies[0].Name)
					assert.Equal(t, rep.Policy.Name, st.Limits[0].Name)
					assert.Equal(t, rep.Policy.Window, st.Policies[0].Window)
				}
				assert.Equal(t, rep.Denied, st.HasRetryAfter, "Retry-After present")
				if rep.Denied {
					assert.Equal(t, time.Duration(rep.RetryAfterSeconds())*time.Second, st.RetryAfter)
					assert.GreaterOrEqual(t, st.RetryAfter, rep.RetryAfter, "Retry-After earlier than the truth")
					if s.wopts == nil {
						assert.GreaterOrEqual(t, st.RetryAfter, st.Limits[0].Reset, "Retry-After earlier than t")
					} else {
						// An epoch reset rounds the instant up to a whole
						// Unix second, which may fall up to 1s after the
						// delta Retry-After (see ResetEpoch).
						assert.GreaterOrEqual(t, st.RetryAfter+time.Second, st.Limits[0].Reset)
					}
					assert.Equal(t, st.RetryAfter, st.Wait())
				}
			})
		}
	}
}

func TestErrorBodyMatchesFields(t *testing.T) {
	rep := headers.Report{Policy: minutePolicy, Remaining: 0, ResetAfter: time.Minute, Denied: true, RetryAfter: 1500 * time.Millisecond}
	body, err := json.Marshal(headers.NewErrorBody(rep))
	require.NoError(t, err)
	assert.JSONEq(t, `{"error":{"code":"rate_limit_exceeded","message":"Rate limit exceeded; retry after 2 seconds.",
		"limit":100,"remaining":0,"reset":2,"retry_after":2}}`, string(body))

	h := http.Header{}
	require.NoError(t, headers.Write(h, headers.StyleDraft, rep, nil))
	var got headers.ErrorBody
	require.NoError(t, json.Unmarshal(body, &got))
	assert.Equal(t, h.Get("Retry-After"), itoa(got.Error.RetryAfter))
	assert.Equal(t, h.Get("RateLimit-Reset"), itoa(got.Error.Reset))
	assert.Equal(t, h.Get("RateLimit-Limit"), itoa(got.Error.Limit))
}

func TestProblem(t *testing.T) {
	rep := headers.Report{Policy: minutePolicy, Denied: true, RetryAfter: time.Second}
	body, err := json.Marshal(headers.NewProblem(rep))
	require.NoError(t, err)
	assert.JSONEq(t, `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
		"title":"Quota Exceeded","status":429,"detail":"Rate limit exceeded; retry after 1 second.",
		"violated-policies":["default"]}`, string(body))
}

func TestStyleString(t *testing.T) {
	assert.Equal(t, "none", headers.Style(0).String())
	assert.Equal(t, "ietf", headers.StyleIETF.String())
	assert.Equal(t, "ietf|draft|x", (headers.StyleIETF | headers.StyleDraft | headers.StyleX).String())
	assert.Equal(t, "x|0x80", (headers.StyleX | 0x80).String())
}

func itoa(v int64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestWriteMaxInteger: MaxInteger is the largest count every style writes
// and reads back; one more is refused, whole, by Write and the formatters.
func TestWriteMaxInteger(t *testing.T) {
	assert.Len(t, itoa(headers.MaxInteger), 15, "an sf-integer has at most 15 digits")
	all := headers.StyleIETF | headers.StyleDraft | headers.StyleX
	at := headers.Report{Policy: headers.Policy{Name: "big", Quota: headers.MaxInteger, Window: time.Minute}, Remaining: headers.MaxInteger}
	h := http.Header{}
	require.NoError(t, headers.Write(h, all, at, nil))
	st, err := headers.Parse(h, &headers.ParseOptions{XReset: headers.ResetDelta})
	require.NoError(t, err, "Parse(%v)", h)
	assert.Equal(t, all, st.Styles)
	require.Len(t, st.Policies, 1)
	require.Len(t, st.Limits, 1)
	assert.EqualValues(t, headers.MaxInteger, st.Policies[0].Quota)
	assert.EqualValues(t, headers.MaxInteger, st.Limits[0].Remaining)

	for _, style := range []headers.Style{headers.StyleIETF, headers.StyleDraft, headers.StyleX} {
		for name, rep := range map[string]headers.Report{
			"quota":     {Policy: headers.Policy{Quota: headers.MaxInteger + 1}},
			"remaining": {Policy: headers.Policy{Quota: headers.MaxInteger}, Remaining: headers.MaxInteger + 1},
		} {
			h := http.Header{}
			assert.ErrorIs(t, headers.Write(h, style, rep, nil), headers.ErrRange, "%v: %s above MaxInteger", style, name)
			assert.Empty(t, h, "%v: a failed Write changed the header", style)
		}
	}
	_, err = headers.FormatPolicy(headers.Policy{Quota: headers.MaxInteger + 1})
	assert.ErrorIs(t, err, headers.ErrRange)
	_, err = headers.FormatRateLimit(headers.Limit{Remaining: headers.MaxInteger + 1})
	assert.ErrorIs(t, err, headers.ErrRange)
}
