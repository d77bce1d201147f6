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
		"policy":"default","limit":100,"remaining":0,"reset":2,"retry_after":2}}`, string(body))

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

func TestWriteReports(t *testing.T) {
	second := headers.Policy{Name: "5-per-1s", Quota: 5, Window: time.Second}
	minute := headers.Policy{Name: "20-per-1m", Quota: 20, Window: time.Minute}
	hour := headers.Policy{Name: "hourly", Quota: 100, Window: time.Hour, PartitionKey: []byte("p")}
	tests := []struct {
		name  string
		style headers.Style
		reps  []headers.Report
		want  http.Header
	}{
		{"admitted: every policy, the binding one first", headers.StyleIETF, []headers.Report{
			{Policy: second, Remaining: 0, ResetAfter: time.Second},
			{Policy: minute, Remaining: 15, ResetAfter: 59500 * time.Millisecond},
			{Policy: hour, Remaining: 95, ResetAfter: time.Hour},
		}, http.Header{
			"Ratelimit-Policy": {`"5-per-1s";q=5;w=1, "20-per-1m";q=20;w=60, "hourly";q=100;w=3600;pk=:cA==:`},
			"Ratelimit":        {`"5-per-1s";r=0;t=1, "20-per-1m";r=15;t=60, "hourly";r=95;t=3600;pk=:cA==:`},
		}},
		{"denied: each t follows its own report, Retry-After the first", headers.StyleIETF | headers.StyleDraft, []headers.Report{
			{Policy: minute, Denied: true, RetryAfter: 36500 * time.Millisecond, ResetAfter: time.Minute},
			{Policy: second, Denied: true, RetryAfter: 200 * time.Millisecond, ResetAfter: time.Second},
			{Policy: hour, Remaining: 80, ResetAfter: 30 * time.Minute},
		}, http.Header{
			"Ratelimit-Policy":    {`"20-per-1m";q=20;w=60, "5-per-1s";q=5;w=1, "hourly";q=100;w=3600;pk=:cA==:`},
			"Ratelimit":           {`"20-per-1m";r=0;t=37, "5-per-1s";r=0;t=1, "hourly";r=80;t=1800;pk=:cA==:`},
			"Ratelimit-Limit":     {"20"},
			"Ratelimit-Remaining": {"0"},
			"Ratelimit-Reset":     {"37"},
			"Retry-After":         {"37"},
		}},
		{"the trio is the first report's alone", headers.StyleX, []headers.Report{
			{Policy: minute, Remaining: 3, ResetAfter: 50 * time.Second},
			{Policy: second, Remaining: 4, ResetAfter: 200 * time.Millisecond},
		}, http.Header{
			"X-Ratelimit-Limit":     {"20"},
			"X-Ratelimit-Remaining": {"3"},
			"X-Ratelimit-Reset":     {"50"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			require.NoError(t, headers.WriteReports(h, tt.style, tt.reps, nil))
			assert.Equal(t, tt.want, h)

			// A client reads back every policy and limit, in order.
			st, err := headers.Parse(h, nil)
			require.NoError(t, err)
			if tt.style&headers.StyleIETF != 0 {
				require.Len(t, st.Policies, len(tt.reps))
				require.Len(t, st.Limits, len(tt.reps))
				for i, r := range tt.reps {
					assert.Equal(t, r.Policy.Name, st.Policies[i].Name, "policy %d", i)
					assert.Equal(t, r.Policy.Name, st.Limits[i].Name, "limit %d", i)
					assert.Equal(t, r.Remaining, st.Limits[i].Remaining, "limit %d", i)
				}
			}
		})
	}
}

func TestWriteReportsFailsAtomically(t *testing.T) {
	h := http.Header{"Ratelimit": {"old"}}
	err := headers.WriteReports(h, headers.StyleIETF, nil, nil)
	assert.ErrorIs(t, err, headers.ErrRange)
	err = headers.WriteReports(h, headers.StyleIETF, []headers.Report{
		{Policy: minutePolicy},
		{Policy: headers.Policy{Name: "bad\n", Quota: 1}},
	}, nil)
	assert.ErrorIs(t, err, headers.ErrSyntax)
	err = headers.WriteReports(h, headers.StyleIETF, []headers.Report{
		{Policy: minutePolicy},
		{Policy: headers.Policy{Name: "second"}, Remaining: headers.MaxInteger + 1},
	}, nil)
	assert.ErrorIs(t, err, headers.ErrRange)
	assert.Equal(t, http.Header{"Ratelimit": {"old"}}, h)
}

// TestWriteSetsCanonicalNames: Write sets the fields under their canonical
// names directly rather than through Header.Set, so they must be the names
// Header.Get looks up.
func TestWriteSetsCanonicalNames(t *testing.T) {
	h := http.Header{}
	rep := headers.Report{Policy: minutePolicy, Denied: true, RetryAfter: time.Second}
	require.NoError(t, headers.Write(h, headers.StyleIETF|headers.StyleDraft|headers.StyleX, rep, nil))
	for _, f := range []string{
		headers.FieldRateLimitPolicy, headers.FieldRateLimit,
		headers.FieldRateLimitLimit, headers.FieldRateLimitRemaining, headers.FieldRateLimitReset,
		headers.FieldXRateLimitLimit, headers.FieldXRateLimitRemaining, headers.FieldXRateLimitReset,
		headers.FieldRetryAfter,
	} {
		assert.NotEmpty(t, h.Get(f), "%s", f)
		assert.Contains(t, h, http.CanonicalHeaderKey(f))
	}
	assert.Len(t, h, 9)
}

// TestWriteAllocations: the fields of any number of reports, in every
// style, cost one string for the values and one array for the fields'
// []string values.
func TestWriteAllocations(t *testing.T) {
	reps := []headers.Report{
		{Policy: headers.Policy{Name: "5-per-1s", Quota: 5, Window: time.Second}, Remaining: 3, ResetAfter: time.Second},
		{Policy: headers.Policy{Name: "20-per-1m", Quota: 20, Window: time.Minute}, Remaining: 15, ResetAfter: time.Minute},
	}
	h := http.Header{}
	opts := &headers.WriteOptions{XReset: headers.ResetEpoch, Now: time.Unix(1_700_000_000, 0)}
	for style := headers.Style(0); style <= headers.StyleIETF|headers.StyleDraft|headers.StyleX; style++ {
		for n := 1; n <= len(reps); n++ {
			for _, denied := range []bool{false, true} {
				reps[0].Denied, reps[0].RetryAfter = denied, 1500*time.Millisecond
				allocs := testing.AllocsPerRun(100, func() {
					clear(h)
					_ = headers.WriteReports(h, style, reps[:n], opts)
				})
				assert.LessOrEqual(t, allocs, 2.0, "style %v, %d reports, denied %v", style, n, denied)
			}
		}
	}
}
