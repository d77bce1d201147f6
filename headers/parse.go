package headers

import (
	"errors"
	"net/http"
	"strings"
	"time"
)

// DefaultMaxRetryAfter is the longest Retry-After Parse accepts unless
// ParseOptions says otherwise: a server asking for more than a day is
// misconfigured or hostile (draft section 8.5.1), and a client should not
// park a request on its word.
const DefaultMaxRetryAfter = 24 * time.Hour

// ParseOptions tunes Parse. A nil *ParseOptions, like the zero value, means
// the defaults.
type ParseOptions struct {
	// Now returns the time the response was received. An HTTP-date in
	// Retry-After and an epoch reset are measured from the response's Date
	// field when it has a valid one, and from Now otherwise. The default is
	// time.Now.
	Now func() time.Time

	// MaxRetryAfter bounds Retry-After: a longer wait is reported as
	// ErrRange and the field is ignored. Zero means DefaultMaxRetryAfter (24h).
	MaxRetryAfter time.Duration

	// XReset is how X-RateLimit-Reset is read. The default, ResetAuto,
	// tells delta seconds, epoch seconds and epoch milliseconds apart by
	// magnitude.
	XReset ResetFormat
}

// State is the rate-limit information of one response, gathered from
// whichever styles it uses.
//
// The zero value is an empty state (no field found). A State is a plain value,
// safe to copy and to share between goroutines as long as nobody modifies it.
type State struct {
	// Styles are the styles whose fields were present and well-formed.
	Styles Style

	// Policies and Limits come from the best style present: the IETF fields
	// first, then the RateLimit-* trio, then the X-RateLimit-* trio. A trio
	// gives one nameless Policy holding its limit (when sent) and one
	// nameless Limit. The draft -07 RateLimit dictionary's limit becomes a
	// nameless Policy when there is no RateLimit-Policy.
	Policies []Policy
	Limits   []Limit

	// RetryAfter is the Retry-After wait; HasRetryAfter reports that the
	// field was present, well-formed and within MaxRetryAfter (a present
	// "Retry-After: 0" is a real answer, unlike an absent field).
	RetryAfter    time.Duration
	HasRetryAfter bool

	// Date is the instant the delays above are counted from: the
	// response's Date when valid, otherwise its receive time.
	Date time.Time
}

// Wait returns how long a client should wait before sending again, on the
// response's word: Retry-After when present (the drafts make it take
// precedence over t), otherwise the longest reset among the limits with
// nothing remaining, otherwise 0.
func (s State) Wait() time.Duration {
	if s.HasRetryAfter {
		return s.RetryAfter
	}
	var w time.Duration
	for _, l := range s.Limits {
		if l.Remaining == 0 && l.Reset > w {
			w = l.Reset
		}
	}
	return w
}

// Parse reads the rate-limit fields of a response in every style Write knows
// (and the draft -07 forms), plus Retry-After.
//
// Malformed fields are ignored, as the drafts require of clients: Parse
// returns the State built from the well-formed ones together with an error
// joining one ErrSyntax or ErrRange error per ignored field. The State is
// usable even when the error is not nil; the error is nil when every field
// present was well-formed.
//
// Parse does not look at Age: the drafts advise ignoring the rate-limit
// fields of a response served from a cache (current_age > 0); that is the
// caller's decision.
func Parse(h http.Header, opts *ParseOptions) (State, error) {
	var o ParseOptions
	if opts != nil {
		o = *opts
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxRetryAfter <= 0 {
		o.MaxRetryAfter = DefaultMaxRetryAfter
	}
	var st State
	var errs []error

	now := o.Now()
	st.Date = now
	if d := h.Get("Date"); d != "" {
		if t, err := ParseHTTPDate(d, now); err == nil {
			st.Date = t
		}
	}

	// IETF fields.
	var ietfPolicies []Policy
	var ietfLimits []Limit
	var quota07 *int64
	ietfOK := false
	if v := h.Values(FieldRateLimitPolicy); len(v) > 0 {
		p, err := ParsePolicy(v...)
		if err != nil {
			errs = append(errs, err)
		} else if len(p) > 0 {
			ietfPolicies, ietfOK = p, true
		}
	}
	if v := h.Values(FieldRateLimit); len(v) > 0 {
		l, q, err := parseRateLimit(v)
		if err != nil {
			errs = append(errs, err)
		} else if len(l) > 0 {
			ietfLimits, quota07, ietfOK = l, q, true
		}
	}
	if ietfOK {
		st.Styles |= StyleIETF
		st.Policies, st.Limits = ietfPolicies, ietfLimits
		if st.Policies == nil && quota07 != nil {
			st.Policies = []Policy{{Quota: *quota07}}
		}
	}

	// The trios.
	trios := []struct {
		style                   Style
		limit, remaining, reset string
		format                  ResetFormat
	}{
		{StyleDraft, FieldRateLimitLimit, FieldRateLimitRemaining, FieldRateLimitReset, ResetDelta},
		{StyleX, FieldXRateLimitLimit, FieldXRateLimitRemaining, FieldXRateLimitReset, o.XReset},
	}
	for _, tr := range trios {
		pol, lim, found, err := parseTrio(h, tr.limit, tr.remaining, tr.reset, tr.format, st.Date)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !found {
			continue
		}
		st.Styles |= tr.style
		if st.Policies == nil && st.Limits == nil {
			st.Policies, st.Limits = pol, lim
		}
	}

	if v, ok := headerValue(h, FieldRetryAfter); ok {
		d, err := ParseRetryAfter(v, st.Date)
		switch {
		case err != nil:
			errs = append(errs, err)
		case d > o.MaxRetryAfter:
			errs = append(errs, fieldError(FieldRetryAfter, ErrRange, "longer than "+o.MaxRetryAfter.String()))
		default:
			st.RetryAfter, st.HasRetryAfter = d, true
		}
	}
	return st, errors.Join(errs...)
}

// parseTrio reads one of the three-field styles. found is false when none of
// the three fields is present. Any malformed member makes the whole style
// malformed.
func parseTrio(h http.Header, limitName, remainingName, resetName string, format ResetFormat, ref time.Time) (pol []Policy, lim []Limit, found bool, err error) {
	limitV, hasLimit := headerValue(h, limitName)
	remV, hasRem := headerValue(h, remainingName)
	resetV, hasReset := headerValue(h, resetName)
	if !hasLimit && !hasRem && !hasReset {
		return nil, nil, false, nil
	}
	if hasLimit {
		// Drafts -01 to -03 could append quota policies to the limit
		// ("10, 10;w=1"); the first number is the limit.
		if i := strings.IndexAny(limitV, ",;"); i >= 0 {
			limitV = strings.TrimRight(limitV[:i], " \t")
		}
		q, ok := parseCount(limitV)
		if !ok {
			return nil, nil, false, fieldError(limitName, ErrSyntax, "not a non-negative integer")
		}
		pol = []Policy{{Quota: q}}
	}
	var l Limit
	if hasRem {
		r, ok := parseCount(remV)
		if !ok {
			return nil, nil, false, fieldError(remainingName, ErrSyntax, "not a non-negative integer")
		}
		l.Remaining = r
	}
	if hasReset {
		d, err := parseReset(resetName, resetV, format, ref)
		if err != nil {
			return nil, nil, false, err
		}
		l.Reset = d
	}
	if hasRem || hasReset {
		lim = []Limit{l}
	}
	return pol, lim, true, nil
}

// headerValue returns the first line of a field, trimmed, and whether the
// field is present at all.
func headerValue(h http.Header, name string) (string, bool) {
	v := h.Values(name)
	if len(v) == 0 {
		return "", false
	}
	return strings.Trim(v[0], " \t"), true
}

// parseCount reads a non-negative decimal integer that fits an sf-integer.
func parseCount(s string) (int64, bool) {
	if !isAllDigits(s) || len(strings.TrimLeft(s, "0")) > 15 {
		return 0, false
	}
	var v int64
	for i := 0; i < len(s); i++ {
		v = v*10 + int64(s[i]-'0')
	}
	return v, true
}

// parseLegacySeconds reads "17" or "17.25" (some vendors send fractions) and
// rounds up to whole units.
func parseLegacySeconds(s string) (int64, bool) {
	intPart, frac, hasFrac := strings.Cut(s, ".")
	v, ok := parseCount(intPart)
	if !ok {
		return 0, false
	}
	if hasFrac {
		if !isAllDigits(frac) {
			return 0, false
		}
		if strings.TrimRight(frac, "0") != "" {
			v++
		}
	}
	return v, true
}

// parseReset converts a reset field to a delay from ref, the response time.
func parseReset(name, s string, format ResetFormat, ref time.Time) (time.Duration, error) {
	v, ok := parseLegacySeconds(s)
	if !ok {
		return 0, fieldError(name, ErrSyntax, "not a non-negative number")
	}
	if format == ResetAuto {
		switch {
		case v >= 1e12:
			return max(0, time.UnixMilli(v).Sub(ref)), nil
		case v >= 1e9:
			format = ResetEpoch
		default:
			format = ResetDelta
		}
	}
	if format == ResetEpoch {
		return max(0, time.Unix(v, 0).Sub(ref)), nil
	}
	d, ok := secondsToDuration(v)
	if !ok {
		return 0, fieldError(name, ErrRange, "reset too long")
	}
	return d, nil
}
