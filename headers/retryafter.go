package headers

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// FormatRetryAfter returns the Retry-After value for a denial that may be
// retried after d: delta-seconds rounded up, and at least 1, because a
// denied client told "0" retries at once and is denied again.
func FormatRetryAfter(d time.Duration) string {
	return strconv.FormatInt(retryAfterSeconds(d), 10)
}

func retryAfterSeconds(d time.Duration) int64 {
	return max(1, Seconds(d))
}

// ParseRetryAfter parses a Retry-After value (RFC 9110 section 10.2.3): either
// delta-seconds or an HTTP-date in any of the three forms recipients must
// accept (IMF-fixdate, RFC 850, asctime). A date is measured from now, which
// should be the response's Date when it has one and the time the response
// was received otherwise; a date in the past gives 0.
//
// A value that is neither form fails with ErrSyntax; delta-seconds or a date
// too far ahead for a time.Duration fail with ErrRange. ParseRetryAfter puts
// no other bound on the result: Parse rejects absurd waits with its
// MaxRetryAfter option.
func ParseRetryAfter(value string, now time.Time) (time.Duration, error) {
	v := strings.Trim(value, " \t")
	if v == "" {
		return 0, fieldError(FieldRetryAfter, ErrSyntax, "empty value")
	}
	if isAllDigits(v) {
		var s int64
		for i := 0; i < len(v); i++ {
			if s > (maxSeconds-int64(v[i]-'0'))/10 {
				return 0, fieldError(FieldRetryAfter, ErrRange, "delay too long")
			}
			s = s*10 + int64(v[i]-'0')
		}
		return time.Duration(s) * time.Second, nil
	}
	t, err := ParseHTTPDate(v, now)
	if err != nil {
		return 0, fieldError(FieldRetryAfter, ErrSyntax, "neither delay-seconds nor an HTTP-date")
	}
	d := t.Sub(now)
	if d == math.MaxInt64 {
		// time.Time.Sub saturates instead of overflowing.
		return 0, fieldError(FieldRetryAfter, ErrRange, "date too far ahead")
	}
	return max(0, d), nil
}

func isAllDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return len(s) > 0
}

var (
	shortDays = [...]string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}
	longDays  = [...]string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
	months    = [...]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}
)

// ParseHTTPDate parses an HTTP-date (RFC 9110 section 5.6.7) in any of its
// three forms:
//
//	Sun, 06 Nov 1994 08:49:37 GMT   (IMF-fixdate, the only form to send)
//	Sunday, 06-Nov-94 08:49:37 GMT  (obsolete RFC 850 form)
//	Sun Nov  6 08:49:37 1994        (obsolete asctime form)
//
// The two-digit year of the RFC 850 form is resolved against now as RFC 9110
// requires: a year that would lie more than 50 years after now is taken to
// be in the previous century. Day and month names are matched without
// regard to case; the weekday is not checked against the date. A malformed
// or impossible date (31 Feb) fails with ErrSyntax.
func ParseHTTPDate(value string, now time.Time) (time.Time, error) {
	s := strings.Trim(value, " \t")
	var t time.Time
	var ok bool
	if i := strings.IndexByte(s, ','); i >= 0 {
		name, rest := s[:i], s[i+1:]
		switch {
		case matchName(name, shortDays[:]) >= 0:
			t, ok = parseIMFFixdate(rest)
		case matchName(name, longDays[:]) >= 0:
			t, ok = parseRFC850(rest, now)
		}
	} else {
		t, ok = parseASCTime(s)
	}
	if !ok {
		return time.Time{}, fieldError("HTTP-date", ErrSyntax, strconv.Quote(value))
	}
	return t, nil
}

// dateScanner reads the fixed-format pieces of an HTTP-date.
type dateScanner struct {
	s   string
	pos int
}

func (d *dateScanner) lit(l string) bool {
	if !strings.HasPrefix(d.s[d.pos:], l) {
		return false
	}
	d.pos += len(l)
	return true
}

// litFold is lit without regard to ASCII case.
func (d *dateScanner) litFold(l string) bool {
	if len(d.s)-d.pos < len(l) || !strings.EqualFold(d.s[d.pos:d.pos+len(l)], l) {
		return false
	}
	d.pos += len(l)
	return true
}

func (d *dateScanner) digits(n int) (int, bool) {
	if len(d.s)-d.pos < n {
		return 0, false
	}
	v := 0
	for i := 0; i < n; i++ {
		c := d.s[d.pos+i]
		if !isDigit(c) {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	d.pos += n
	return v, true
}

func (d *dateScanner) month() (time.Month, bool) {
	if len(d.s)-d.pos < 3 {
		return 0, false
	}
	i := matchName(d.s[d.pos:d.pos+3], months[:])
	if i < 0 {
		return 0, false
	}
	d.pos += 3
	return time.Month(i + 1), true
}

// clock reads "HH:MM:SS".
func (d *dateScanner) clock() (h, m, s int, ok bool) {
	var ok1, ok2, ok3 bool
	h, ok1 = d.digits(2)
	ok = ok1 && d.lit(":")
	m, ok2 = d.digits(2)
	ok = ok && ok2 && d.lit(":")
	s, ok3 = d.digits(2)
	return h, m, s, ok && ok3
}

func (d *dateScanner) done() bool { return d.pos == len(d.s) }

func matchName(s string, names []string) int {
	for i, n := range names {
		if strings.EqualFold(s, n) {
			return i
		}
	}
	return -1
}

// parseIMFFixdate reads " 06 Nov 1994 08:49:37 GMT".
func parseIMFFixdate(rest string) (time.Time, bool) {
	d := &dateScanner{s: rest}
	ok := d.lit(" ")
	day, ok1 := d.digits(2)
	ok = ok && ok1 && d.lit(" ")
	mon, ok2 := d.month()
	ok = ok && ok2 && d.lit(" ")
	year, ok3 := d.digits(4)
	ok = ok && ok3 && d.lit(" ")
	h, m, s, ok4 := d.clock()
	ok = ok && ok4 && d.lit(" ") && d.litFold("GMT") && d.done()
	if !ok {
		return time.Time{}, false
	}
	return makeDate(year, mon, day, h, m, s)
}

// parseRFC850 reads " 06-Nov-94 08:49:37 GMT".
func parseRFC850(rest string, now time.Time) (time.Time, bool) {
	d := &dateScanner{s: rest}
	ok := d.lit(" ")
	day, ok1 := d.digits(2)
	ok = ok && ok1 && d.lit("-")
	mon, ok2 := d.month()
	ok = ok && ok2 && d.lit("-")
	yy, ok3 := d.digits(2)
	ok = ok && ok3 && d.lit(" ")
	h, m, s, ok4 := d.clock()
	ok = ok && ok4 && d.lit(" ") && d.litFold("GMT") && d.done()
	if !ok {
		return time.Time{}, false
	}
	nowYear := now.UTC().Year()
	year := nowYear - nowYear%100 + yy
	if year > nowYear+50 {
		year -= 100
	}
	return makeDate(year, mon, day, h, m, s)
}

// parseASCTime reads "Sun Nov  6 08:49:37 1994"; the day may also be
// written with two digits or a single space, which some senders do.
func parseASCTime(s string) (time.Time, bool) {
	d := &dateScanner{s: s}
	if len(s) < 3 || matchName(s[:3], shortDays[:]) < 0 {
		return time.Time{}, false
	}
	d.pos = 3
	ok := d.lit(" ")
	mon, ok1 := d.month()
	ok = ok && ok1 && d.lit(" ")
	d.lit(" ") // the padding of a one-digit day
	day, ok2 := d.digits(2)
	if !ok2 {
		day, ok2 = d.digits(1)
	}
	ok = ok && ok2 && d.lit(" ")
	h, m, sec, ok3 := d.clock()
	ok = ok && ok3 && d.lit(" ")
	year, ok4 := d.digits(4)
	ok = ok && ok4 && d.done()
	if !ok {
		return time.Time{}, false
	}
	return makeDate(year, mon, day, h, m, sec)
}

// makeDate builds the UTC instant, rejecting impossible fields instead of
// letting time.Date normalise them. A leap second (60) is accepted and
// lands on the next minute.
func makeDate(year int, mon time.Month, day, h, m, s int) (time.Time, bool) {
	if day < 1 || h > 23 || m > 59 || s > 60 {
		return time.Time{}, false
	}
	t := time.Date(year, mon, day, h, m, 0, 0, time.UTC)
	if t.Day() != day || t.Month() != mon {
		return time.Time{}, false
	}
	return t.Add(time.Duration(s) * time.Second), true
}
