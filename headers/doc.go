// Package headers formats and parses the HTTP fields that carry rate-limit
// state: the IETF RateLimit and RateLimit-Policy fields, the older
// RateLimit-Limit/-Remaining/-Reset and X-RateLimit-* trios, Retry-After,
// and the JSON bodies of 429 responses.
//
// It holds pure functions and plain values, with no handler logic and no
// dependency on the rest of floodgate: the middleware in package httplimit
// writes with it, and package client reads with it.
//
// # Fields
//
// The current draft (draft-ietf-httpapi-ratelimit-headers, revisions -10 and
// -11 share the syntax) defines two Structured Field Lists (RFC 9651):
//
//	RateLimit-Policy: "default";q=100;w=60
//	RateLimit: "default";r=42;t=17
//
// RateLimit-Policy names a policy, its quota q and its window w in seconds;
// RateLimit gives, for a named policy, the remaining quota r and t, the
// seconds within which the client should expect no more than r. The older
// trios carry one unnamed policy:
//
//	RateLimit-Limit: 100      X-RateLimit-Limit: 100
//	RateLimit-Remaining: 42   X-RateLimit-Remaining: 42
//	RateLimit-Reset: 17       X-RateLimit-Reset: 17 (or 1767225600, Unix seconds)
//
// A denial adds Retry-After, in delta seconds.
//
// # Writing is strict, reading is lenient
//
// [Write], [FormatPolicy] and [FormatRateLimit] emit the strict form of the
// draft: String names, r always present, integers only. Every duration is
// rounded up to whole seconds ([Seconds]), so a client is never told to come
// back before it can be served. On a denial the reset (t) is the time until
// the denied request would be admitted, and Retry-After equals it; this is
// what the draft asks (Retry-After never earlier than t) without inflating
// Retry-After to a whole window, as some limiters do.
//
// A server that writes the fields of the same policies on every response
// formats their text once with [NewPolicySet] and writes with
// [PolicySet.WriteReports], which writes the same bytes as [WriteReports]
// and formats only the counts. Either costs at most two allocations per
// response, in any style, while the values it formats fit in 512 bytes.
//
// [Parse], [ParsePolicy] and [ParseRateLimit] also accept what real servers
// send: Token names, a RateLimit item without r, a list split over several
// field lines, the Dictionary form of draft -07 ("limit=100, remaining=50,
// reset=5") and the Integer policies of drafts -05 to -07 ("100;w=60"); X
// resets as delta seconds, Unix seconds or Unix milliseconds. [ParseRetryAfter]
// accepts delta-seconds and the three HTTP-date forms, measured from the
// response's Date. Field values come from the network: the parsers return
// errors wrapping [ErrSyntax] or [ErrRange] and never panic.
//
// # Bodies
//
// [NewErrorBody] and [NewProblem] build the 429 body, either floodgate's JSON
// error object or RFC 9457 problem details with the quota-exceeded type, from
// the same [Report] as the fields, so the numbers always agree.
package headers
