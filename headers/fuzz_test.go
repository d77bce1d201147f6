package headers

import (
	"net/http"
	"testing"
	"time"
)

// The fuzzers feed network-shaped input to every parser. Each checks that the
// parser never panics, that what it accepts satisfies the documented
// invariants, and that the strict writer can express it and reads back the
// same value. Seeds live in f.Add calls and in testdata/fuzz/<Name>.
//
//	go test -run '^$' -fuzz FuzzParsePolicy -fuzztime 30s ./headers

func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{
		`"default";q=100;w=60`,
		`"burst";q=100;w=60,"daily";q=1000;w=86400`,
		`"peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:`,
		`quota;q=100;w=1`,
		`10;w=1, 1000;w=3600`,
		`"a";q=1;acme-burst=?1;x=("y" 1.5);z=@12;d=%"%c3%bc"`,
		`"a";q=-1`, `"a";q=1;w=0`, `("a")`, `"a`, ``,
	} {
		f.Add(s, "")
	}
	f.Add(`"a";q=1`, `"b";q=2;w=2`)
	f.Fuzz(func(t *testing.T, line1, line2 string) {
		got, err := ParsePolicy(line1, line2)
		if err != nil {
			if got != nil {
				t.Fatalf("ParsePolicy(%q, %q) returned %+v with error %v", line1, line2, got, err)
			}
			return
		}
		for _, p := range got {
			if p.Quota < 0 || p.Window < 0 {
				t.Fatalf("ParsePolicy(%q, %q) = %+v: negative value", line1, line2, got)
			}
		}
		if len(got) == 0 {
			return
		}
		s, err := FormatPolicy(got...)
		if err != nil {
			t.Fatalf("FormatPolicy(%+v) of a parsed field failed: %v", got, err)
		}
		again, err := ParsePolicy(s)
		if err != nil {
			t.Fatalf("ParsePolicy(FormatPolicy(...) = %q) failed: %v", s, err)
		}
		if !equalPolicies(got, again) {
			t.Fatalf("round trip of %q, %q through %q = %+v, want %+v", line1, line2, s, again, got)
		}
	})
}

func FuzzParseRateLimit(f *testing.F) {
	for _, s := range []string{
		`"default";r=50;t=30`,
		`"default";r=999;pk=:dHJpYWwxMjEzMjM=:`,
		`quota;t=1`,
		`limit=100, remaining=50, reset=5`,
		`remaining=0, reset=9, x=?1`,
		`"a";r=-1`, `5;r=1`, `limit="1"`, `"a";r=1;t=1, b`, ``,
	} {
		f.Add(s, "")
	}
	f.Add(`"a";r=1;t=1`, `"b";r=2;t=2`)
	f.Fuzz(func(t *testing.T, line1, line2 string) {
		got, err := ParseRateLimit(line1, line2)
		if err != nil {
			if got != nil {
				t.Fatalf("ParseRateLimit(%q, %q) returned %+v with error %v", line1, line2, got, err)
			}
			return
		}
		for _, l := range got {
			if l.Remaining < 0 || l.Reset < 0 {
				t.Fatalf("ParseRateLimit(%q, %q) = %+v: negative value", line1, line2, got)
			}
		}
		if len(got) == 0 {
			return
		}
		s, err := FormatRateLimit(got...)
		if err != nil {
			t.Fatalf("FormatRateLimit(%+v) of a parsed field failed: %v", got, err)
		}
		again, err := ParseRateLimit(s)
		if err != nil {
			t.Fatalf("ParseRateLimit(FormatRateLimit(...) = %q) failed: %v", s, err)
		}
		if !equalLimits(got, again) {
			t.Fatalf("round trip of %q, %q through %q = %+v, want %+v", line1, line2, s, again, got)
		}
	})
}

func FuzzParseRetryAfter(f *testing.F) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).Unix()
	for _, s := range []string{
		"0", "120", "007", " 5\t", "9223372036", "9223372037", "-5", "1.5",
		"Sun, 06 Nov 1994 08:49:37 GMT",
		"Sunday, 06-Nov-94 08:49:37 GMT",
		"Sun Nov  6 08:49:37 1994",
		"Sun Nov 16 08:49:37 1994",
		"Fri, 31 Dec 9999 23:59:59 GMT",
		"Thu, 31 Feb 1994 08:49:37 GMT",
		"Sun, 06 Nov 1994 08:49:60 GMT",
		"", "soon",
	} {
		f.Add(s, now)
	}
	f.Fuzz(func(t *testing.T, value string, unix int64) {
		// Keep the reference instant within years 1 to 9999, like real clocks.
		nowT := time.Unix(unix%(250_000_000_000), 0).UTC()
		d, err := ParseRetryAfter(value, nowT)
		if err != nil {
			return
		}
		if d < 0 {
			t.Fatalf("ParseRetryAfter(%q, %v) = %v, negative", value, nowT, d)
		}
		// Writing the wait and reading it back never shortens it.
		again, err := ParseRetryAfter(FormatRetryAfter(d), nowT)
		if err != nil {
			t.Fatalf("ParseRetryAfter(FormatRetryAfter(%v)) failed: %v", d, err)
		}
		if want := time.Duration(max(1, Seconds(d))) * time.Second; again != want || again < d {
			t.Fatalf("FormatRetryAfter(%v) reads back as %v, want %v", d, again, want)
		}
	})
}

func FuzzParseHTTPDate(f *testing.F) {
	for _, s := range []string{
		"Sun, 06 Nov 1994 08:49:37 GMT",
		"Sunday, 06-Nov-94 08:49:37 GMT",
		"Sun Nov  6 08:49:37 1994",
		"Mon, 01 Jan 0001 00:00:00 GMT",
		"Fri, 31 Dec 9999 23:59:60 GMT",
		"sat, 29 feb 2000 12:00:00 gmt",
		"Sun, 29 Feb 2001 12:00:00 GMT",
	} {
		f.Add(s)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, value string) {
		got, err := ParseHTTPDate(value, now)
		if err != nil {
			return
		}
		if got.Location() != time.UTC || got.Nanosecond() != 0 {
			t.Fatalf("ParseHTTPDate(%q) = %v, want a whole second in UTC", value, got)
		}
		// The preferred form of what was read reads back the same.
		if got.Year() < 10000 {
			s := got.Format(http.TimeFormat)
			again, err := ParseHTTPDate(s, now)
			if err != nil || !again.Equal(got) {
				t.Fatalf("ParseHTTPDate(%q) = %v; its IMF-fixdate %q reads as %v, %v", value, got, s, again, err)
			}
		}
	})
}

// FuzzParse runs the whole-response parser over arbitrary values of every
// field it reads.
func FuzzParse(f *testing.F) {
	f.Add(`"default";q=100;w=60`, `"default";r=42;t=17`, "100", "42", "17", "Sun, 06 Nov 1994 08:49:37 GMT", "3", uint8(0))
	f.Add("", `limit=100, remaining=50, reset=5`, "", "", "", "", "", uint8(0))
	f.Add("", "", "5000", "0", "1772366400", "Sun, 01 Mar 2026 11:59:00 GMT", "", uint8(0))
	f.Add("", "", "5000", "1", "1772366430000", "", "Sun, 01 Mar 2026 12:00:30 GMT", uint8(2))
	f.Add("", "", "1", "x", "1.5", "yesterday", "-1", uint8(1))
	f.Fuzz(func(t *testing.T, policy, limit, xlimit, xremaining, xreset, date, retryAfter string, format uint8) {
		h := http.Header{}
		set := func(k, v string) {
			if v != "" {
				h.Set(k, v)
			}
		}
		set(FieldRateLimitPolicy, policy)
		set(FieldRateLimit, limit)
		set(FieldXRateLimitLimit, xlimit)
		set(FieldXRateLimitRemaining, xremaining)
		set(FieldXRateLimitReset, xreset)
		set(FieldRateLimitReset, xreset)
		set("Date", date)
		set(FieldRetryAfter, retryAfter)
		now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		st, _ := Parse(h, &ParseOptions{Now: func() time.Time { return now }, XReset: ResetFormat(format % 3)})
		if st.RetryAfter < 0 || st.RetryAfter > DefaultMaxRetryAfter || (!st.HasRetryAfter && st.RetryAfter != 0) {
			t.Fatalf("Parse(%v): RetryAfter = %v (present %v)", h, st.RetryAfter, st.HasRetryAfter)
		}
		for _, l := range st.Limits {
			if l.Remaining < 0 || l.Reset < 0 {
				t.Fatalf("Parse(%v): limit %+v", h, l)
			}
		}
		for _, p := range st.Policies {
			if p.Quota < 0 || p.Window < 0 {
				t.Fatalf("Parse(%v): policy %+v", h, p)
			}
		}
		if w := st.Wait(); w < 0 {
			t.Fatalf("Parse(%v).Wait() = %v", h, w)
		}
	})
}

func equalPolicies(a, b []Policy) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Name != y.Name || x.Quota != y.Quota || x.Window != y.Window || x.QuotaUnit != y.QuotaUnit ||
			!equalKeys(x.PartitionKey, y.PartitionKey) {
			return false
		}
	}
	return true
}

func equalLimits(a, b []Limit) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Name != y.Name || x.Remaining != y.Remaining || x.Reset != y.Reset || !equalKeys(x.PartitionKey, y.PartitionKey) {
			return false
		}
	}
	return true
}

// equalKeys compares partition keys; nil (no pk) differs from empty (pk=::).
func equalKeys(a, b []byte) bool {
	return (a == nil) == (b == nil) && string(a) == string(b)
}
