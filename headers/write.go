package headers

import (
	"net/http"
	"strconv"
	"time"
)

// Style selects the rate-limit fields Write emits. Styles combine with |:
// StyleIETF|StyleX sends both the IETF fields and the X-RateLimit trio, which
// helps while clients migrate. The zero Style emits no rate-limit field
// (Retry-After is still written on a denial).
type Style uint8

const (
	// StyleIETF emits RateLimit-Policy and RateLimit as Structured Field
	// Lists (draft-ietf-httpapi-ratelimit-headers -10 and -11):
	//
	//	RateLimit-Policy: "default";q=100;w=60
	//	RateLimit: "default";r=42;t=17
	StyleIETF Style = 1 << iota

	// StyleDraft emits the trio of drafts -00 to -06, in delta seconds:
	//
	//	RateLimit-Limit: 100
	//	RateLimit-Remaining: 42
	//	RateLimit-Reset: 17
	StyleDraft

	// StyleX emits the X-RateLimit trio, with the reset as delta seconds or
	// as Unix epoch seconds (see ResetFormat):
	//
	//	X-RateLimit-Limit: 100
	//	X-RateLimit-Remaining: 42
	//	X-RateLimit-Reset: 17
	StyleX
)

// String returns the names of the styles in s, joined with "|".
func (s Style) String() string {
	if s == 0 {
		return "none"
	}
	var b []byte
	for _, n := range []struct {
		s    Style
		name string
	}{{StyleIETF, "ietf"}, {StyleDraft, "draft"}, {StyleX, "x"}} {
		if s&n.s != 0 {
			if len(b) > 0 {
				b = append(b, '|')
			}
			b = append(b, n.name...)
		}
	}
	if rest := s &^ (StyleIETF | StyleDraft | StyleX); rest != 0 {
		if len(b) > 0 {
			b = append(b, '|')
		}
		b = strconv.AppendUint(append(b, "0x"...), uint64(rest), 16)
	}
	return string(b)
}

// ResetFormat is how X-RateLimit-Reset carries the reset.
type ResetFormat uint8

const (
	// ResetAuto, the zero value, means delta seconds when writing, and a
	// guess from the magnitude when reading: at least 10^12 is Unix epoch
	// milliseconds, at least 10^9 is Unix epoch seconds (a delta that
	// large would exceed 31 years), anything smaller is delta seconds.
	ResetAuto ResetFormat = iota

	// ResetDelta is whole seconds from the response, rounded up.
	ResetDelta

	// ResetEpoch is the Unix time in whole seconds, rounded up, as GitHub
	// sends it. It depends on the client's clock agreeing with the
	// server's, which is why the IETF drafts use delta seconds. Because the
	// instant, not the delay, is rounded, it may lie up to a second after
	// the instant a delta Retry-After of the same response points to.
	ResetEpoch
)

// Report is the outcome of one rate-limit decision, in the terms the fields
// need. Build it from the limiter's decision; Write, NewErrorBody and
// NewProblem derive every value from it, so they always agree.
//
// The zero value reports an admitted request with nothing remaining under an
// unnamed quota of 0. A Report is a plain value, safe to copy and to share
// between goroutines as long as nobody modifies it.
type Report struct {
	// Policy is the policy the decision was taken under; its Quota is the
	// limit the fields advertise.
	Policy Policy

	// Remaining is the number of units left after the decision.
	Remaining int64

	// ResetAfter is the time until the quota is fully restored.
	ResetAfter time.Duration

	// Denied reports that the request was refused.
	Denied bool

	// RetryAfter is, for a denial, the time after which the same request
	// would be admitted. Ignored when Denied is false.
	RetryAfter time.Duration
}

// Reset returns the delay the reset fields advertise (t, RateLimit-Reset,
// X-RateLimit-Reset as a delta, and the body's reset): for an admitted
// request the time until the quota is fully restored, which is the
// conservative reading; for a denial the time until the denied request would
// be admitted, so that Retry-After never points before it (the drafts ask
// that it does not) and is not inflated to a whole window.
func (r Report) Reset() time.Duration {
	if r.Denied {
		return time.Duration(r.RetryAfterSeconds()) * time.Second
	}
	return r.ResetAfter
}

// ResetSeconds is Reset in whole seconds rounded up.
func (r Report) ResetSeconds() int64 {
	return Seconds(r.Reset())
}

// RetryAfterSeconds returns the Retry-After value of a denial in whole
// seconds: rounded up, at least 1. It is 0 when Denied is false.
func (r Report) RetryAfterSeconds() int64 {
	if !r.Denied {
		return 0
	}
	return retryAfterSeconds(r.RetryAfter)
}

// WriteOptions tunes Write. A nil *WriteOptions, like the zero value, means
// the defaults.
type WriteOptions struct {
	// XReset is how StyleX writes X-RateLimit-Reset. The default,
	// ResetAuto, writes delta seconds.
	XReset ResetFormat

	// Now is the instant an epoch reset is counted from. The zero value
	// means time.Now(). Only ResetEpoch uses it.
	Now time.Time
}

// Write sets on h the fields of style for rep, replacing any value they had,
// and Retry-After when rep is a denial. Seconds are rounded up everywhere;
// on a denial Retry-After equals the reset (t) it accompanies.
//
// Write fails, and leaves h unchanged, when rep cannot be expressed: a
// negative count, a count above MaxInteger (more than 15 digits), a policy
// name or unit outside printable ASCII (see FormatPolicy).
//
// Write is WriteReports with rep alone.
func Write(h http.Header, style Style, rep Report, opts *WriteOptions) error {
	return WriteReports(h, style, []Report{rep}, opts)
}

// WriteReports sets on h the fields of style for several limits that
// decided one request together (a floodgate.Limits), replacing any value
// they had. reps[0] is the limit that bound the decision: the IETF fields
// list every report, in the order given, so the binding one comes first,
// as the draft's examples do ("RateLimit: "day";r=100;t=36000" names the
// policy that binds):
//
//	RateLimit-Policy: "5-per-1s";q=5;w=1, "20-per-1m";q=20;w=60
//	RateLimit: "5-per-1s";r=0;t=1, "20-per-1m";r=14;t=60
//
// The trios, which carry one limit, report reps[0] only, and so does
// Retry-After, written when reps[0] is a denial. Each report's t follows
// its own Denied, as Write's does.
//
// WriteReports fails, and leaves h unchanged, when reps is empty or a
// report cannot be expressed (see Write). The policy names should differ:
// RateLimit refers to policies by name.
//
// Each field's value is a []string of its own, of length and capacity 1:
// a handler may Add to or modify one. WriteReports formats every policy on
// each call; a server that writes the same policies on every response
// formats them once with NewPolicySet and writes with its WriteReports,
// which writes the same bytes.
func WriteReports(h http.Header, style Style, reps []Report, opts *WriteOptions) error {
	return writeReports(h, style, reps, opts, nil)
}

// field is one field writeReports sets: its canonical name and its value,
// either val or, when inBuf, the bytes buf[start:end] of the buffer every
// varying value is appended to.
type field struct {
	key        string
	val        string
	inBuf      bool
	start, end int
}

// writeReports is WriteReports, with the text of the policies of s (nil or
// empty: none) taken from s instead of formatted; see PolicySet.
//
// It costs at most two allocations however many fields it sets, once the
// values fit its buffer: one string holding every value that varies, of
// which each such value is a substring, and one array of strings holding
// every value, of which each field's []string is a slice of length and
// capacity 1, so that a handler's Header.Add to one field reallocates it
// and never writes into another's. Nothing is shared between calls but
// immutable strings: each response owns its slices.
func writeReports(h http.Header, style Style, reps []Report, opts *WriteOptions, s *PolicySet) error {
	if len(reps) == 0 {
		return fieldError(FieldRateLimit, ErrRange, "no report to write")
	}
	var o WriteOptions
	if opts != nil {
		o = *opts
	}
	rep := reps[0]
	reset := rep.Reset()
	// The field names are given in their canonical form and set directly:
	// Header.Set would allocate each canonical name on every call.
	var out [9]field // 2 IETF, 3 per trio, Retry-After
	n := 0
	// One buffer, on the stack, holds the varying values while they are
	// built: 8 reports of names up to 20 bytes and 15-digit counts, and
	// every trio and Retry-After, fit.
	var buf [512]byte
	b := buf[:0]
	// span records the value appended to b since start as the next field.
	span := func(key string, start int) {
		out[n] = field{key: key, inBuf: true, start: start, end: len(b)}
		n++
	}
	var err error
	// The text of reps' policies comes from s when it holds them: at
	// best, in the order a middleware writes them, without a search.
	first, inOrder := s.match(reps)
	text := func(i int) *policyText {
		if inOrder {
			return &s.texts[s.nth(first, i)]
		}
		return s.text(reps[i].Policy)
	}
	if style&StyleIETF != 0 {
		v, ok := "", false
		if inOrder {
			v, ok = s.policyField(reps, first)
		}
		if ok {
			out[n] = field{key: canonRateLimitPolicy, val: v}
			n++
		} else {
			start := len(b)
			for i, r := range reps {
				if i > 0 {
					b = append(b, ", "...)
				}
				if t := text(i); t != nil {
					b = append(b, t.policy...)
				} else if b, err = appendPolicy(b, r.Policy); err != nil {
					return err
				}
			}
			span(canonRateLimitPolicy, start)
		}
		start := len(b)
		for i, r := range reps {
			if i > 0 {
				b = append(b, ", "...)
			}
			if t := text(i); t != nil {
				b = append(b, t.limitName...)
				if b, err = appendLimitCounts(b, r.Remaining, r.Reset()); err != nil {
					return err
				}
				b = append(b, t.limitPK...)
				continue
			}
			b, err = appendLimit(b, Limit{
				Name:         r.Policy.Name,
				Remaining:    r.Remaining,
				Reset:        r.Reset(),
				PartitionKey: r.Policy.PartitionKey,
			})
			if err != nil {
				return err
			}
		}
		span(canonRateLimit, start)
	}
	if style&(StyleDraft|StyleX) != 0 {
		if rep.Policy.Quota < 0 || rep.Policy.Quota > MaxInteger {
			return fieldError(FieldXRateLimitLimit, ErrRange, "quota negative or too large")
		}
		if rep.Remaining < 0 || rep.Remaining > MaxInteger {
			return fieldError(FieldXRateLimitRemaining, ErrRange, "remaining negative or too large")
		}
		if reset < 0 {
			return fieldError(FieldXRateLimitReset, ErrRange, "negative reset")
		}
		// Each value is appended once and, for both trios, set twice.
		var limit field
		if first >= 0 {
			limit.val = s.texts[first].quota
		} else {
			start := len(b)
			b = strconv.AppendInt(b, rep.Policy.Quota, 10)
			limit = field{inBuf: true, start: start, end: len(b)}
		}
		start := len(b)
		b = strconv.AppendInt(b, rep.Remaining, 10)
		remaining := field{inBuf: true, start: start, end: len(b)}
		start = len(b)
		b = strconv.AppendInt(b, Seconds(reset), 10)
		delta := field{inBuf: true, start: start, end: len(b)}
		set := func(key string, f field) {
			f.key = key
			out[n] = f
			n++
		}
		if style&StyleDraft != 0 {
			set(canonRateLimitLimit, limit)
			set(canonRateLimitRemaining, remaining)
			set(canonRateLimitReset, delta)
		}
		if style&StyleX != 0 {
			xreset := delta
			if o.XReset == ResetEpoch {
				now := o.Now
				if now.IsZero() {
					now = time.Now()
				}
				start := len(b)
				b = strconv.AppendInt(b, epochCeil(now.Add(reset)), 10)
				xreset = field{inBuf: true, start: start, end: len(b)}
			}
			set(canonXRateLimitLimit, limit)
			set(canonXRateLimitRemaining, remaining)
			set(canonXRateLimitReset, xreset)
		}
	}
	if rep.Denied {
		start := len(b)
		b = strconv.AppendInt(b, rep.RetryAfterSeconds(), 10)
		span(canonRetryAfter, start)
	}
	if n == 0 {
		return nil
	}
	varying := string(b)
	vals := make([]string, n)
	for i, f := range out[:n] {
		vals[i] = f.val
		if f.inBuf {
			vals[i] = varying[f.start:f.end]
		}
		h[f.key] = vals[i : i+1 : i+1]
	}
	return nil
}

// The canonical forms (textproto.CanonicalMIMEHeaderKey) of the field
// names; TestCanonicalFieldNames checks them.
const (
	canonRateLimitPolicy     = "Ratelimit-Policy"
	canonRateLimit           = "Ratelimit"
	canonRateLimitLimit      = "Ratelimit-Limit"
	canonRateLimitRemaining  = "Ratelimit-Remaining"
	canonRateLimitReset      = "Ratelimit-Reset"
	canonXRateLimitLimit     = "X-Ratelimit-Limit"
	canonXRateLimitRemaining = "X-Ratelimit-Remaining"
	canonXRateLimitReset     = "X-Ratelimit-Reset"
	canonRetryAfter          = "Retry-After"
)

// epochCeil returns t as Unix seconds rounded up.
func epochCeil(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}
