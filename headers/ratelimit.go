package headers

import (
	"math"
	"strconv"
	"time"
)

// Field names. Pass them to http.Header's methods (Set, Get, Values), which
// canonicalise them; net/http sends them as "Ratelimit-Policy" and so on,
// which is the same field: field names are case-insensitive.
const (
	// FieldRateLimitPolicy is the IETF field advertising quota policies.
	FieldRateLimitPolicy = "RateLimit-Policy"
	// FieldRateLimit is the IETF field carrying the current service limits.
	FieldRateLimit = "RateLimit"

	// FieldRateLimitLimit, FieldRateLimitRemaining and FieldRateLimitReset
	// are the trio of drafts -00 to -06 (StyleDraft).
	FieldRateLimitLimit     = "RateLimit-Limit"
	FieldRateLimitRemaining = "RateLimit-Remaining"
	FieldRateLimitReset     = "RateLimit-Reset"

	// FieldXRateLimitLimit, FieldXRateLimitRemaining and FieldXRateLimitReset
	// are the vendor trio most APIs send (StyleX).
	FieldXRateLimitLimit     = "X-RateLimit-Limit"
	FieldXRateLimitRemaining = "X-RateLimit-Remaining"
	FieldXRateLimitReset     = "X-RateLimit-Reset"

	// FieldRetryAfter is the Retry-After field of RFC 9110 section 10.2.3.
	FieldRetryAfter = "Retry-After"
)

// Policy is one quota policy, an item of the RateLimit-Policy field: Quota
// units per Window, for the partition PartitionKey.
//
// The zero value is a valid, if useless, policy (an unnamed quota of 0).
// A Policy is a plain value, safe to copy; its PartitionKey slice is shared
// by copies and must not be modified while in use.
type Policy struct {
	// Name identifies the policy; the RateLimit field refers to it. Written
	// as a String; read from a String or a Token. Policies of drafts -05 to
	// -07 have no name and read as "".
	Name string

	// Quota is the q parameter: the units the policy allocates per window.
	Quota int64

	// Window is the w parameter. It is written as whole seconds rounded up
	// (a 1.5s window is advertised as 2, never shorter than the truth) and
	// omitted when zero. Read as 0 when the field does not state it.
	Window time.Duration

	// QuotaUnit is the qu parameter: "requests" (the default when empty),
	// "content-bytes", "concurrent-requests". Omitted when empty.
	QuotaUnit string

	// PartitionKey is the pk parameter, a Byte Sequence; omitted when nil.
	PartitionKey []byte
}

// Limit is one service limit, an item of the RateLimit field: Remaining
// units of the policy Name are available, and Reset is the time within which
// the client should not expect more (the t parameter).
//
// The zero value is valid. A Limit is a plain value, safe to copy; its
// PartitionKey slice is shared by copies.
type Limit struct {
	// Name is the name of the policy this limit belongs to. Written as a
	// String; read from a String or a Token; "" for the nameless form of
	// draft -07.
	Name string

	// Remaining is the r parameter: the units still available. The draft
	// requires r; a field without it is read as 0, the conservative
	// reading (a client is promised nothing).
	Remaining int64

	// Reset is the t parameter, written as whole seconds rounded up so that
	// it is never earlier than the truth. A field without t reads as 0.
	Reset time.Duration

	// PartitionKey is the pk parameter, a Byte Sequence; omitted when nil.
	PartitionKey []byte
}

// MaxInteger is the largest count the rate-limit fields carry:
// 999,999,999,999,999, the largest Integer of Structured Fields (RFC 9651
// section 3.3.1 allows at most 15 digits). The trios are not Structured
// Fields, but keep to the same bound, as their parsers here do, so that a
// value reads the same in every style.
//
// Write, FormatPolicy and FormatRateLimit fail with ErrRange for a larger
// quota or remaining count. The quotas floodgate accepts reach 2^53, beyond
// it: a server sends such counts as MaxInteger (package httplimit does),
// which tells a client less than it may use, never more.
const MaxInteger = sfMaxInteger

// maxSeconds is the largest whole number of seconds a time.Duration holds.
const maxSeconds = math.MaxInt64 / int64(time.Second)

// Seconds returns d in whole seconds rounded up, the unit of every
// rate-limit field: a reset or a wait is never advertised earlier than the
// truth. Durations at or below zero give 0.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// secondsToDuration converts a count of seconds read from a field, or
// reports false when a time.Duration cannot hold it.
func secondsToDuration(s int64) (time.Duration, bool) {
	if s < 0 || s > maxSeconds {
		return 0, false
	}
	return time.Duration(s) * time.Second, true
}

// FormatPolicy returns the RateLimit-Policy field value for policies, in the
// strict form of draft-ietf-httpapi-ratelimit-headers -10 and -11: String
// names, q always present, w in seconds rounded up.
//
//	"default";q=100;w=60
//
// It fails with ErrRange when policies is empty, a quota or window is
// negative or a quota is above MaxInteger, and with ErrSyntax
// when a name or unit holds a character outside printable ASCII.
func FormatPolicy(policies ...Policy) (string, error) {
	if len(policies) == 0 {
		return "", fieldError(FieldRateLimitPolicy, ErrRange, "no policy to format")
	}
	var b []byte
	for i, p := range policies {
		if i > 0 {
			b = append(b, ", "...)
		}
		var err error
		if b, err = appendPolicy(b, p); err != nil {
			return "", err
		}
	}
	return string(b), nil
}

// appendPolicy appends p as an item of RateLimit-Policy; see FormatPolicy.
func appendPolicy(b []byte, p Policy) ([]byte, error) {
	var ok bool
	if b, ok = appendSFString(b, p.Name); !ok {
		return b, fieldError(FieldRateLimitPolicy, ErrSyntax, "policy name "+strconv.Quote(p.Name)+" is not printable ASCII")
	}
	if p.Quota < 0 {
		return b, fieldError(FieldRateLimitPolicy, ErrRange, "negative quota")
	}
	b = append(b, ";q="...)
	if b, ok = appendSFInteger(b, p.Quota); !ok {
		return b, fieldError(FieldRateLimitPolicy, ErrRange, "quota has more than 15 digits")
	}
	if p.QuotaUnit != "" {
		b = append(b, ";qu="...)
		if b, ok = appendSFString(b, p.QuotaUnit); !ok {
			return b, fieldError(FieldRateLimitPolicy, ErrSyntax, "quota unit is not printable ASCII")
		}
	}
	if p.Window < 0 {
		return b, fieldError(FieldRateLimitPolicy, ErrRange, "negative window")
	}
	if p.Window > 0 {
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, Seconds(p.Window), 10)
	}
	if p.PartitionKey != nil {
		b = append(b, ";pk="...)
		b = appendSFBytes(b, p.PartitionKey)
	}
	return b, nil
}

// FormatRateLimit returns the RateLimit field value for limits, in the strict
// form of drafts -10 and -11: String names, r always present, and t always
// present in seconds rounded up.
//
//	"default";r=42;t=17
//
// It fails with ErrRange when limits is empty, a value is negative or a
// remaining count is above MaxInteger, and with ErrSyntax when a name is not
// printable ASCII.
func FormatRateLimit(limits ...Limit) (string, error) {
	if len(limits) == 0 {
		return "", fieldError(FieldRateLimit, ErrRange, "no limit to format")
	}
	var b []byte
	for i, l := range limits {
		if i > 0 {
			b = append(b, ", "...)
		}
		var err error
		if b, err = appendLimit(b, l); err != nil {
			return "", err
		}
	}
	return string(b), nil
}

// appendLimit appends l as an item of RateLimit; see FormatRateLimit.
func appendLimit(b []byte, l Limit) ([]byte, error) {
	var ok bool
	if b, ok = appendSFString(b, l.Name); !ok {
		return b, fieldError(FieldRateLimit, ErrSyntax, "policy name "+strconv.Quote(l.Name)+" is not printable ASCII")
	}
	b = append(b, ";r="...)
	var err error
	if b, err = appendLimitCounts(b, l.Remaining, l.Reset); err != nil {
		return b, err
	}
	if l.PartitionKey != nil {
		b = append(b, ";pk="...)
		b = appendSFBytes(b, l.PartitionKey)
	}
	return b, nil
}

// appendLimitCounts appends what follows `"name";r=` in an item of
// RateLimit up to its pk: the remaining count, ";t=" and the reset. It is
// apart from appendLimit so that PolicySet, which holds each name's text,
// writes the same bytes and fails with the same errors.
func appendLimitCounts(b []byte, remaining int64, reset time.Duration) ([]byte, error) {
	if remaining < 0 {
		return b, fieldError(FieldRateLimit, ErrRange, "negative remaining quota")
	}
	var ok bool
	if b, ok = appendSFInteger(b, remaining); !ok {
		return b, fieldError(FieldRateLimit, ErrRange, "remaining quota has more than 15 digits")
	}
	if reset < 0 {
		return b, fieldError(FieldRateLimit, ErrRange, "negative reset")
	}
	b = append(b, ";t="...)
	return strconv.AppendInt(b, Seconds(reset), 10), nil
}

// ParsePolicy parses the lines of a RateLimit-Policy field. It reads the
// strict form of drafts -08 to -11 and, leniently, Token names, the nameless
// Integer items of drafts -05 to -07 ("100;w=60"), and a list split over
// several field lines (pass them all, in order; Header.Values gives them).
//
// A field that does not parse as a Structured Field List, or whose items lack
// q or carry a value of the wrong type, fails with ErrSyntax; a negative
// quota or a window that is not positive fails with ErrRange. The draft asks
// clients to ignore such a field as a whole, so no partial result is
// returned. An absent or empty field gives an empty result and no error.
// Unknown parameters are ignored, as the draft allows.
func ParsePolicy(lines ...string) ([]Policy, error) {
	members, err := parseSFList(joinFieldLines(lines))
	if err != nil {
		return nil, fieldError(FieldRateLimitPolicy, ErrSyntax, err.Error())
	}
	policies := make([]Policy, 0, len(members))
	for i, m := range members {
		p, err := policyFromMember(&m)
		if err != nil {
			return nil, wrapItem(FieldRateLimitPolicy, i, err)
		}
		policies = append(policies, p)
	}
	return policies, nil
}

// itemError is a problem with one item, before the field name is known.
type itemError struct {
	sentinel error
	reason   string
}

func (e *itemError) Error() string { return e.reason }

func wrapItem(field string, i int, err error) error {
	ie, ok := err.(*itemError)
	if !ok {
		return fieldError(field, ErrSyntax, err.Error())
	}
	return fieldError(field, ie.sentinel, "item "+strconv.Itoa(i+1)+": "+ie.reason)
}

func badItem(sentinel error, reason string) error {
	return &itemError{sentinel: sentinel, reason: reason}
}

func policyFromMember(m *sfMember) (Policy, error) {
	if m.inner {
		return Policy{}, badItem(ErrSyntax, "inner list where a policy was expected")
	}
	var p Policy
	switch m.item.kind {
	case sfString, sfToken:
		p.Name = m.item.str
		q, ok := m.param("q")
		if !ok {
			return Policy{}, badItem(ErrSyntax, "missing q parameter")
		}
		if q.kind != sfInteger {
			return Policy{}, badItem(ErrSyntax, "q is not an integer")
		}
		p.Quota = q.num
	case sfInteger:
		// Drafts -05 to -07: the item is the quota itself.
		p.Quota = m.item.num
	default:
		return Policy{}, badItem(ErrSyntax, "policy name is neither a string nor a token")
	}
	if p.Quota < 0 {
		return Policy{}, badItem(ErrRange, "negative quota")
	}
	if w, ok := m.param("w"); ok {
		if w.kind != sfInteger {
			return Policy{}, badItem(ErrSyntax, "w is not an integer")
		}
		if w.num <= 0 {
			return Policy{}, badItem(ErrRange, "window is not positive")
		}
		d, ok := secondsToDuration(w.num)
		if !ok {
			return Policy{}, badItem(ErrRange, "window too long")
		}
		p.Window = d
	}
	if qu, ok := m.param("qu"); ok {
		if qu.kind != sfString && qu.kind != sfToken {
			return Policy{}, badItem(ErrSyntax, "qu is neither a string nor a token")
		}
		p.QuotaUnit = qu.str
	}
	if pk, ok := m.param("pk"); ok {
		if pk.kind != sfBytes {
			return Policy{}, badItem(ErrSyntax, "pk is not a byte sequence")
		}
		p.PartitionKey = pk.raw
	}
	return p, nil
}

// ParseRateLimit parses the lines of a RateLimit field. It reads the strict
// form of drafts -08 to -11 and, leniently, Token names, items without r
// (read as Remaining 0), a list split over several field lines, and the
// Dictionary form of draft -07 ("limit=100, remaining=50, reset=5"), which
// gives one nameless Limit.
//
// Errors follow ParsePolicy: ErrSyntax or ErrRange for the field as a whole,
// no partial result; an absent or empty field gives an empty result.
func ParseRateLimit(lines ...string) ([]Limit, error) {
	limits, _, err := parseRateLimit(lines)
	return limits, err
}

// parseRateLimit also returns the quota of the draft -07 form (its limit
// key), which has no place in Limit; it is nil when the field has none.
func parseRateLimit(lines []string) (limits []Limit, quota07 *int64, err error) {
	joined := joinFieldLines(lines)
	members, listErr := parseSFList(joined)
	if listErr != nil {
		// Not a List: perhaps the Dictionary of draft -07.
		l, q, ok, err := parseRateLimit07(joined)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			return nil, nil, fieldError(FieldRateLimit, ErrSyntax, listErr.Error())
		}
		return []Limit{l}, q, nil
	}
	limits = make([]Limit, 0, len(members))
	for i, m := range members {
		l, err := limitFromMember(&m)
		if err != nil {
			return nil, nil, wrapItem(FieldRateLimit, i, err)
		}
		limits = append(limits, l)
	}
	return limits, nil, nil
}

func limitFromMember(m *sfMember) (Limit, error) {
	if m.inner {
		return Limit{}, badItem(ErrSyntax, "inner list where a limit was expected")
	}
	if m.item.kind != sfString && m.item.kind != sfToken {
		return Limit{}, badItem(ErrSyntax, "policy name is neither a string nor a token")
	}
	l := Limit{Name: m.item.str}
	if r, ok := m.param("r"); ok {
		if r.kind != sfInteger {
			return Limit{}, badItem(ErrSyntax, "r is not an integer")
		}
		if r.num < 0 {
			return Limit{}, badItem(ErrRange, "negative remaining quota")
		}
		l.Remaining = r.num
	}
	if t, ok := m.param("t"); ok {
		if t.kind != sfInteger {
			return Limit{}, badItem(ErrSyntax, "t is not an integer")
		}
		d, ok := secondsToDuration(t.num)
		if !ok {
			return Limit{}, badItem(ErrRange, "t is negative or too long")
		}
		l.Reset = d
	}
	if pk, ok := m.param("pk"); ok {
		if pk.kind != sfBytes {
			return Limit{}, badItem(ErrSyntax, "pk is not a byte sequence")
		}
		l.PartitionKey = pk.raw
	}
	return l, nil
}

// parseRateLimit07 reads "limit=100, remaining=50, reset=5". ok is false when
// s is not a Dictionary with at least one of those keys, so the caller
// reports the original List error instead.
func parseRateLimit07(s string) (l Limit, quota *int64, ok bool, err error) {
	entries, derr := parseSFDictionary(s)
	if derr != nil {
		return Limit{}, nil, false, nil
	}
	seen := false
	for _, e := range entries {
		switch e.key {
		case "limit", "remaining", "reset":
		default:
			continue
		}
		seen = true
		if e.member.inner || e.member.item.kind != sfInteger {
			return Limit{}, nil, false, fieldError(FieldRateLimit, ErrSyntax, e.key+" is not an integer")
		}
		v := e.member.item.num
		if v < 0 {
			return Limit{}, nil, false, fieldError(FieldRateLimit, ErrRange, e.key+" is negative")
		}
		switch e.key {
		case "limit":
			q := v
			quota = &q
		case "remaining":
			l.Remaining = v
		case "reset":
			d, ok := secondsToDuration(v)
			if !ok {
				return Limit{}, nil, false, fieldError(FieldRateLimit, ErrRange, "reset too long")
			}
			l.Reset = d
		}
	}
	return l, quota, seen, nil
}
