// Package httplimit limits a net/http server with a *floodgate.Limiter and
// tells every client where it stands, in the IETF RateLimit fields.
//
// Most users want [New] over a limiter, checked once at start-up, and its
// result wrapped around the handlers to limit. The middleware has the
// func(http.Handler) http.Handler shape that net/http and routers such as
// chi use as it is:
//
//	store, _ := memstore.New(nil)
//	lim, _ := floodgate.New(store, floodgate.TokenBucket{Rate: 10, Per: time.Minute, Burst: 5}, nil)
//	mw, err := httplimit.New(lim, &httplimit.Options{
//		Key: httplimit.KeyChain(
//			httplimit.KeyByAPIKey("X-API-Key"), // by API key when there is one
//			httplimit.KeyByIP(nil),             // else by client address
//		),
//	})
//	if err != nil {
//		log.Fatal(err) // the options cannot work: say so before serving
//	}
//	http.Handle("/api/", mw(api))
//
// A nil [*Options] means: one unit per request, keyed by the peer address
// (IPv6 grouped by /64, no proxy trusted), the IETF RateLimit-Policy and
// RateLimit fields on every response, and on denial 429 Too Many Requests
// with Retry-After and a JSON body. Each constructor ([New], [NewPlans],
// [NewInflight]) returns every configuration error at start-up; the
// middleware it returns never answers a request with one.
//
// # Decisions and fields
//
// Each request that [Options.Skip] does not exempt costs [Options.Cost]
// units (1 by default) of the quota its key names. The decision's
// Remaining, ResetAfter and RetryAfter become the fields of the response,
// in seconds rounded up, so a client that trusts them is never early:
// after a response with r = k, k more requests are admitted at that instant
// (for a leaky bucket, r is the free space of its queue); after waiting
// Retry-After, the refused request is admitted. [Options.Style] picks the
// IETF fields (the default), the RateLimit-Limit/-Remaining/-Reset trio or
// X-RateLimit-*, or several at once; package headers writes and parses
// them.
//
// The text of each limiter's policies (names, quotas, windows) is
// formatted once, when the middleware is built (headers.PolicySet); a
// response formats only its counts. An admitted request costs 2
// allocations for its fields in any style (more when the RateLimit
// items of many limits with long names pass 512 bytes; 8 limits named in
// 20 bytes fit), plus those of the key function (KeyByIP: 1) and of the
// limiter's store (memstore: none); see TestMiddlewareAdmittedAllocations
// and
//
//	go test ./httplimit -run '^$' -bench MiddlewareServeHTTP -benchmem
//
// Each response owns its fields' []string values, so a handler may change
// or add to them.
//
// Every quota floodgate accepts works, up to 2^53, but the fields carry
// at most 15 digits (a Structured Field Integer): a quota or a remaining
// count above headers.MaxInteger (999,999,999,999,999) is sent as
// headers.MaxInteger, in every style and in the body, which tells a client
// less than it may use, never more.
//
// # Several limits, and plans
//
// A limiter of a floodgate.Limits ("5 per second and 20 per minute") is
// decided as one: the request is admitted only if every limit admits it.
// The IETF fields then list every limit, the one that bound
// (Decision.Binding) first, and the trios, Retry-After and the body
// report that one:
//
//	RateLimit-Policy: "20-per-1m";q=20;w=60, "5-per-1s";q=5;w=1
//	RateLimit: "20-per-1m";r=0;t=37, "5-per-1s";r=4;t=1
//	Retry-After: 37
//
// Each limit's Decision comes from floodgate.Limiter.Apply into a pooled
// buffer, so listing them costs no allocation. Limits are named after
// their quota and window ("5-per-1s") unless [Options.PolicyNames] names
// them.
//
// [NewPlans] chooses the limiter per request among [Plan]s built at
// start-up ("free", "pro"), each with its own policy names; a plan name
// the plan function returns that no plan has is [ErrUnknownPlan], a 500.
// A key that changes plans keeps what its limits of a kind have counted
// only when the plans' limiters share one floodgate.Options.Name; under
// the names derived from different configurations it starts the new plan
// afresh. See NewPlans.
//
// # When no decision is made
//
// A request that no decision can be made for reaches
// [Options.ErrorHandler]. By default it is answered in the body style of
// the denials (JSON, or problem details with [Options.ProblemDetails]),
// never as text:
//
//   - a request without a key ([ErrNoKey]: no function of the [KeyChain]
//     found one) gets 401 Unauthorized, without rate-limit fields, and
//     with [Options.Challenge] as WWW-Authenticate when it is set;
//   - a limiter's failure (a store that is down and whose failure policy
//     returns the error rather than a decision, floodgate.ErrUnavailable)
//     and a request whose context ended get 503 Service Unavailable with
//     Retry-After ([Options.UnavailableRetryAfter], 1 second by default)
//     and the fields of the limiter's policy, promising nothing until
//     then ("default";r=0;t=1);
//   - anything else (an invalid cost, an unknown plan) is a fault of the
//     server: 500, without rate-limit fields.
//
// [Options.OnError] sees each of them, to log or count.
//
// # Keys
//
// A [KeyFunc] names the quota a request draws from. [KeyByAPIKey] keys by a
// header's value, hashed so that no store or log holds the credential;
// [KeyBySubject] by the authenticated subject an earlier middleware put in
// the request's context; [KeyByIP] by client address; [KeyChain] tries
// several in order, falling through past those that find no key. Each
// prefixes its keys ("key:", "sub:", "ip:") so that kinds never collide.
// Routes with separate quotas have limiters of their own: limiters with
// different names (floodgate.Options.Name, or the names derived from
// different configurations) never share state, on one store too.
//
// # Client addresses behind proxies
//
// [KeyByIP] and [ClientIP] use the peer address (RemoteAddr) unless the
// peer is one of [IPKeyOptions.TrustedProxies]. Only then is the forwarding
// field (X-Forwarded-For by default, or RFC 7239 Forwarded) read, from the
// right: trusted hops are skipped and the first untrusted address is the
// client. What lies left of it was written by the client and is ignored,
// so a forged X-Forwarded-For cannot choose a key. No proxy is trusted by
// default. The walk reads the field in place, at most 32 elements (over
// all lines of the field) of at most 1024 bytes each, so a hostile field
// costs the same small work whatever its length: past either bound, the
// last trusted address is the client, as for a malformed element.
//
// # Shaping and dry runs
//
// With [Options.MaxDelay] set, requests that the limiter can admit within
// that delay (and within the request's deadline) are held and then served
// instead of refused: a floodgate.LeakyBucket behind it spaces requests
// evenly. A request whose client goes away while it waits gives its units
// back where the algorithm allows. [Options.Shadow] decides and reports
// every request (fields, [Options.OnDecision]) but never denies or delays
// one, to see what a new limit would do before enforcing it. Nor does it
// answer a request it cannot decide (no key, a failed store): that one is
// reported to [Options.OnError] and served.
//
// The middleware takes a *floodgate.Limiter on any store, wrappers
// included (observe.Store, lease.New): what a store wrapper adds happens
// below the limiter, where the middleware needs nothing from it.
package httplimit
