package headers_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate/headers"
)

func fixedNow(t time.Time) *headers.ParseOptions {
	return &headers.ParseOptions{Now: func() time.Time { return t }}
}

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestParse(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		h    http.Header
		opts *headers.ParseOptions
		want headers.State
	}{
		{"nothing", header(), fixedNow(now), headers.State{Date: now}},
		{"ietf", header(
			"RateLimit-Policy", `"hour";q=1000;w=3600, "day";q=5000;w=86400`,
			"RateLimit", `"day";r=100;t=36000`,
		), fixedNow(now), headers.State{
			Styles: headers.StyleIETF,
			Policies: []headers.Policy{
				{Name: "hour", Quota: 1000, Window: time.Hour},
				{Name: "day", Quota: 5000, Window: 24 * time.Hour},
			},
			Limits: []headers.Limit{{Name: "day", Remaining: 100, Reset: 10 * time.Hour}},
			Date:   now,
		}},
		{"ietf wins over the trios, which are still reported", header(
			"RateLimit", `"a";r=1;t=2`,
			"X-RateLimit-Limit", "9", "X-RateLimit-Remaining", "9", "X-RateLimit-Reset", "9",
			"RateLimit-Remaining", "8",
		), fixedNow(now), headers.State{
			Styles: headers.StyleIETF | headers.StyleDraft | headers.StyleX,
			Limits: []headers.Limit{{Name: "a", Remaining: 1, Reset: 2 * time.Second}},
			Date:   now,
		}},
		{"draft -07", header(
			"RateLimit", `limit=100, remaining=50, reset=5`,
			"RateLimit-Policy", `100;w=10`,
		), fixedNow(now), headers.State{
			Styles:   headers.StyleIETF,
			Policies: []headers.Policy{{Quota: 100, Window: 10 * time.Second}},
			Limits:   []headers.Limit{{Remaining: 50, Reset: 5 * time.Second}},
			Date:     now,
		}},
		{"draft -07 without policy field", header("RateLimit", `limit=100, remaining=50, reset=5`), fixedNow(now), headers.State{
			Styles:   headers.StyleIETF,
			Policies: []headers.Policy{{Quota: 100}},
			Limits:   []headers.Limit{{Remaining: 50, Reset: 5 * time.Second}},
			Date:     now,
		}},
		{"draft trio with old policy suffix", header(
			"RateLimit-Limit", "10, 10;w=1, 50;w=60", "RateLimit-Remaining", "9", "RateLimit-Reset", "1",
		), fixedNow(now), headers.State{
			Styles:   headers.StyleDraft,
			Policies: []headers.Policy{{Quota: 10}},
			Limits:   []headers.Limit{{Remaining: 9, Reset: time.Second}},
			Date:     now,
		}},
		{"x epoch seconds, auto-detected, measured from Date", header(
			"Date", "Sun, 01 Mar 2026 11:59:00 GMT",
			"X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "0",
			"X-RateLimit-Reset", "1772366400", // 2026-03-01T12:00:00Z
		), fixedNow(now), headers.State{
			Styles:   headers.StyleX,
			Policies: []headers.Policy{{Quota: 5000}},
			Limits:   []headers.Limit{{Remaining: 0, Reset: time.Minute}},
			Date:     now.Add(-time.Minute),
		}},
		{"x epoch milliseconds", header("X-RateLimit-Remaining", "1", "X-RateLimit-Reset", "1772366430000"), fixedNow(now), headers.State{
			Styles: headers.StyleX,
			Limits: []headers.Limit{{Remaining: 1, Reset: 30 * time.Second}},
			Date:   now,
		}},
		{"x epoch in the past clamps to 0", header("X-RateLimit-Reset", "1772366000"), fixedNow(now), headers.State{
			Styles: headers.StyleX,
			Limits: []headers.Limit{{}},
			Date:   now,
		}},
		{"x fractional delta rounds up", header("X-RateLimit-Remaining", "3", "X-RateLimit-Reset", "1.2"), fixedNow(now), headers.State{
			Styles: headers.StyleX,
			Limits: []headers.Limit{{Remaining: 3, Reset: 2 * time.Second}},
			Date:   now,
		}},
		{"x forced delta reads an epoch-sized value as delta", header("X-RateLimit-Reset", "1000000000"),
			&headers.ParseOptions{Now: func() time.Time { return now }, XReset: headers.ResetDelta}, headers.State{
				Styles: headers.StyleX,
				Limits: []headers.Limit{{Reset: 1e9 * time.Second}},
				Date:   now,
			}},
		{"x limit only", header("X-RateLimit-Limit", "60"), fixedNow(now), headers.State{
			Styles:   headers.StyleX,
			Policies: []headers.Policy{{Quota: 60}},
			Date:     now,
		}},
		{"retry-after delta", header("Retry-After", "120"), fixedNow(now), headers.State{
			RetryAfter: 2 * time.Minute, HasRetryAfter: true, Date: now,
		}},
		{"retry-after zero is an answer", header("Retry-After", "0"), fixedNow(now), headers.State{
			HasRetryAfter: true, Date: now,
		}},
		{"retry-after date measured from Date, not from receipt", header(
			"Date", "Sun, 01 Mar 2026 11:00:00 GMT",
			"Retry-After", "Sun, 01 Mar 2026 11:00:30 GMT",
		), fixedNow(now), headers.State{
			RetryAfter: 30 * time.Second, HasRetryAfter: true, Date: now.Add(-time.Hour),
		}},
		{"retry-after date without Date uses receipt", header("Retry-After", "Sunday, 01-Mar-26 12:00:05 GMT"), fixedNow(now), headers.State{
			RetryAfter: 5 * time.Second, HasRetryAfter: true, Date: now,
		}},
		{"malformed Date is ignored", header("Date", "yesterday", "Retry-After", "Sun, 01 Mar 2026 12:00:05 GMT"), fixedNow(now), headers.State{
			RetryAfter: 5 * time.Second, HasRetryAfter: true, Date: now,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := headers.Parse(tt.h, tt.opts)
			require.NoError(t, err, "Parse(%v)", tt.h)
			assert.Equal(t, tt.want, got, "Parse(%v)", tt.h)
		})
	}
}

func TestParseIgnoresMalformedFields(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	h := header(
		"RateLimit-Policy", `"a";q=-1`, // out of range
		"RateLimit", `"a";r=5;t=6`,
		"X-RateLimit-Remaining", "lots", // syntax
		"Retry-After", "172801", // beyond the default day
	)
	got, err := headers.Parse(h, fixedNow(now))
	require.Error(t, err)
	assert.ErrorIs(t, err, headers.ErrRange)
	assert.ErrorIs(t, err, headers.ErrSyntax)
	assert.Contains(t, err.Error(), "RateLimit-Policy")
	assert.Contains(t, err.Error(), "X-RateLimit-Remaining")
	assert.Contains(t, err.Error(), "Retry-After")
	assert.Equal(t, headers.State{
		Styles: headers.StyleIETF,
		Limits: []headers.Limit{{Name: "a", Remaining: 5, Reset: 6 * time.Second}},
		Date:   now,
	}, got)
}

func TestParseMaxRetryAfter(t *testing.T) {
	h := header("Retry-After", "3601")
	st, err := headers.Parse(h, &headers.ParseOptions{MaxRetryAfter: time.Hour})
	assert.ErrorIs(t, err, headers.ErrRange)
	assert.False(t, st.HasRetryAfter)

	st, err = headers.Parse(header("Retry-After", "3600"), &headers.ParseOptions{MaxRetryAfter: time.Hour})
	require.NoError(t, err)
	assert.True(t, st.HasRetryAfter)
	assert.Equal(t, time.Hour, st.RetryAfter)

	st, err = headers.Parse(header("Retry-After", "86400"), nil)
	require.NoError(t, err, "the default bound is one day")
	assert.Equal(t, 24*time.Hour, st.RetryAfter)
}

func TestStateWait(t *testing.T) {
	tests := []struct {
		name string
		st   headers.State
		want time.Duration
	}{
		{"empty", headers.State{}, 0},
		{"quota left", headers.State{Limits: []headers.Limit{{Remaining: 1, Reset: time.Minute}}}, 0},
		{"longest exhausted limit", headers.State{Limits: []headers.Limit{
			{Remaining: 0, Reset: 5 * time.Second},
			{Remaining: 3, Reset: time.Hour},
			{Remaining: 0, Reset: 9 * time.Second},
		}}, 9 * time.Second},
		{"Retry-After wins over t, even when shorter", headers.State{
			Limits:     []headers.Limit{{Remaining: 0, Reset: time.Minute}},
			RetryAfter: 2 * time.Second, HasRetryAfter: true,
		}, 2 * time.Second},
		{"Retry-After 0 wins too", headers.State{
			Limits:        []headers.Limit{{Remaining: 0, Reset: time.Minute}},
			HasRetryAfter: true,
		}, 0},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.st.Wait(), tt.name)
	}
}
