package headers_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate/headers"
)

// t0 is the reference instant of the date tests: the RFC 9110 example date.
var t0 = time.Date(1994, time.November, 6, 8, 49, 37, 0, time.UTC)

func TestFormatRetryAfter(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want string
	}{
		{0, "1"},
		{-time.Second, "1"},
		{time.Nanosecond, "1"},
		{time.Second, "1"},
		{1001 * time.Millisecond, "2"},
		{90 * time.Second, "90"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, headers.FormatRetryAfter(tt.in), "FormatRetryAfter(%v)", tt.in)
	}
}

func TestParseRetryAfter(t *testing.T) {
	tests := []struct {
		name string
		in   string
		now  time.Time
		want time.Duration
	}{
		{"delta", "120", t0, 2 * time.Minute},
		{"zero", "0", t0, 0},
		{"leading zeros", "007", t0, 7 * time.Second},
		{"surrounding whitespace", " 5\t", t0, 5 * time.Second},
		{"largest delta", "9223372036", t0, 9223372036 * time.Second},
		{"IMF-fixdate", "Sun, 06 Nov 1994 08:49:47 GMT", t0, 10 * time.Second},
		{"RFC 850", "Sunday, 06-Nov-94 08:50:37 GMT", t0, time.Minute},
		{"asctime", "Sun Nov  6 08:49:38 1994", t0, time.Second},
		{"asctime two-digit day", "Sun Nov 16 08:49:37 1994", t0, 10 * 24 * time.Hour},
		{"asctime single space", "Sun Nov 6 08:49:39 1994", t0, 2 * time.Second},
		{"date in the past clamps to 0", "Sun, 06 Nov 1994 08:49:36 GMT", t0, 0},
		{"names in any case", "sun, 06 nov 1994 08:49:40 gmt", t0, 3 * time.Second},
		{"leap second", "Sun, 06 Nov 1994 08:49:60 GMT", t0, 23 * time.Second},
		{"weekday not checked", "Mon, 06 Nov 1994 08:49:47 GMT", t0, 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := headers.ParseRetryAfter(tt.in, tt.now)
			require.NoError(t, err, "ParseRetryAfter(%q)", tt.in)
			assert.Equal(t, tt.want, got, "ParseRetryAfter(%q, %v) = %v, want %v", tt.in, tt.now, got, tt.want)
		})
	}
}

func TestParseRetryAfterErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want error
	}{
		{"empty", "", headers.ErrSyntax},
		{"blank", "  ", headers.ErrSyntax},
		{"negative", "-5", headers.ErrSyntax},
		{"plus sign", "+5", headers.ErrSyntax},
		{"fraction", "1.5", headers.ErrSyntax},
		{"words", "soon", headers.ErrSyntax},
		{"delta beyond time.Duration", "9223372037", headers.ErrRange},
		{"huge delta", "99999999999999999999999999", headers.ErrRange},
		{"date too far for time.Duration", "Fri, 31 Dec 9999 23:59:59 GMT", headers.ErrRange},
		{"not GMT", "Sun, 06 Nov 1994 08:49:37 PST", headers.ErrSyntax},
		{"numeric zone", "Sun, 06 Nov 1994 08:49:37 +0000", headers.ErrSyntax},
		{"31 February", "Thu, 31 Feb 1994 08:49:37 GMT", headers.ErrSyntax},
		{"hour 24", "Sun, 06 Nov 1994 24:00:00 GMT", headers.ErrSyntax},
		{"minute 60", "Sun, 06 Nov 1994 08:60:00 GMT", headers.ErrSyntax},
		{"day 0", "Sun, 00 Nov 1994 08:49:37 GMT", headers.ErrSyntax},
		{"bad month", "Sun, 06 Nob 1994 08:49:37 GMT", headers.ErrSyntax},
		{"one-digit day in IMF-fixdate", "Sun, 6 Nov 1994 08:49:37 GMT", headers.ErrSyntax},
		{"trailing garbage", "Sun, 06 Nov 1994 08:49:37 GMT x", headers.ErrSyntax},
		{"RFC 3339", "1994-11-06T08:49:37Z", headers.ErrSyntax},
		{"short day name with RFC 850 date", "Sun, 06-Nov-94 08:49:37 GMT", headers.ErrSyntax},
		{"asctime with zone", "Sun Nov  6 08:49:37 GMT 1994", headers.ErrSyntax},
		{"truncated", "Sun, 06 Nov 19", headers.ErrSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := headers.ParseRetryAfter(tt.in, t0)
			assert.ErrorIs(t, err, tt.want, "ParseRetryAfter(%q) = %v", tt.in, got)
		})
	}
}

func TestParseHTTPDateTwoDigitYear(t *testing.T) {
	// RFC 9110 5.6.7: a two-digit year more than 50 years in the future
	// means the most recent past year with those digits.
	now := time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want int
	}{
		{"Thursday, 01-Jan-26 00:00:00 GMT", 2026},
		{"Friday, 01-Jan-27 00:00:00 GMT", 2027},
		{"Saturday, 01-Jan-76 00:00:00 GMT", 2076},
		{"Sunday, 01-Jan-77 00:00:00 GMT", 1977},
		{"Sunday, 06-Nov-94 08:49:37 GMT", 1994},
		{"Monday, 01-Jan-00 00:00:00 GMT", 2000},
	}
	for _, tt := range tests {
		got, err := headers.ParseHTTPDate(tt.in, now)
		require.NoError(t, err, "ParseHTTPDate(%q)", tt.in)
		assert.Equal(t, tt.want, got.Year(), "ParseHTTPDate(%q) = %v", tt.in, got)
	}
}

func TestParseHTTPDateFormsAgree(t *testing.T) {
	want := t0
	for _, in := range []string{
		"Sun, 06 Nov 1994 08:49:37 GMT",
		"Sunday, 06-Nov-94 08:49:37 GMT",
		"Sun Nov  6 08:49:37 1994",
	} {
		got, err := headers.ParseHTTPDate(in, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		require.NoError(t, err, "ParseHTTPDate(%q)", in)
		assert.True(t, want.Equal(got), "ParseHTTPDate(%q) = %v, want %v", in, got, want)
	}
}
