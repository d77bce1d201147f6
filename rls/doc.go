// Package rls is Envoy's rate limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) on a
// floodgate Store, configured by the YAML of envoyproxy/ratelimit, the
// service most Envoy, Istio and Contour users run. Command floodgate-rls
// (rls/cmd/floodgate-rls) serves it over gRPC.
//
//	cfg, err := rls.LoadConfig("/srv/runtime_data/current/config")
//	store, _ := memstore.New(nil)
//	svc, err := rls.New(store, cfg, nil)
//	pb.RegisterRateLimitServiceServer(grpcServer, svc)
//
// # Configuration
//
// ParseConfig and LoadConfig read envoyproxy/ratelimit's format: a domain,
// nested descriptors of key and value (a value ending in '*' matches by
// prefix), rate_limit{unit, requests_per_unit, unlimited, name, replaces},
// shadow_mode, quota_mode, detailed_metric, value_to_metric and
// share_threshold, and reject what the peer rejects, unknown keys included.
// A descriptor finds its limit as in the peer: at each level the
// key_value entry, else the first wildcard whose prefix matches, else the
// key alone; the limit applies at the depth of the descriptor's last entry.
// Units are the peer's fixed periods: MONTH is 30 days, counted in
// epoch-aligned windows as the peer counts them (not calendar months); YEAR
// (365 days) is longer than floodgate's longest fixed window and is refused
// unless the limit is a calendar one or a sliding window with sub-windows.
// Extensions in rate_limit: algorithm (fixed_window, the default;
// token_bucket, with burst defaulting to requests_per_unit;
// sliding_window, with sub_windows from 2 to 64 for a counter that never
// passes its limit in any window (floodgate.SlidingWindow's SubWindows);
// sliding_log; calendar, a
// floodgate.CalendarWindow of unit day, week, month or year with
// time_zone, an IANA name (default UTC), reset, a time of day such as
// "08:00" (default midnight), and week_start, a day (default monday)) and
// window, any Go duration in place of unit.
//
// # Decisions
//
// A request is admitted (overall_code OK) only if every descriptor is within
// its limit, and a denied request spends nothing: the descriptors are
// taken in order (with Options.Parallel, all at once), and on a denial the
// units already taken are given back (floodgate.OpSettle with a negative
// N). Between a take and its refund, another request may find those units
// spent and be denied; no request is ever admitted beyond a limit. The
// peer counts every descriptor of a denied request (envoyproxy/ratelimit
// #427): a 10/min group limit and a 3/min route limit leave the group 5
// after five calls to the route there, and 7 here. With Options.Joint,
// on a redisstore.Store, the descriptors of a call are one script call
// (on a single Redis, or keys of one Cluster slot): a denied request
// holds no units at any moment, at some cost in throughput.
//
// For fixed windows the answers are the peer's: the same overall_code, and
// per descriptor the same code, limit_remaining (0 when over) and
// duration_until_reset (whole seconds to the window's end), which the
// peertest module checks against envoyproxy/ratelimit itself. Where the
// peer counts a denied request's units (a hits_addend larger than what is
// left, or the other descriptors of a denied request), later answers
// differ, in that floodgate admits what is left. hits_addend 0 reports
// without spending, as in the peer. A limit override in the request is a
// fixed window of its unit whose count belongs to the descriptor and the
// unit, so a raised override continues from the count (and is not denied
// by a denial cached under a lower one, #1077).
//
// Every call's store work is bounded by Options.Timeout (8ms by default);
// a descriptor the store fails to decide in it counts as Options.OnStoreError
// says (FailOpen by default), so a reply comes inside Envoy's 20ms timeout
// whatever Redis does.
//
// The response carries the binding descriptor's IETF RateLimit and
// RateLimit-Policy fields (the denying one with the longest wait, or the
// one with the fewest units left) and Retry-After on OVER_LIMIT
// (Options.Headers adds the RateLimit-Limit/-Remaining/-Reset trio or the
// X-RateLimit-* one).
//
// # Stats and reloads
//
// Service.Stats counts as the peer does, under its names
// (ratelimit.service.rate_limit.<domain>.<key>.total_hits and so on), and
// is a prometheus.Collector with the names and labels of the peer's
// Prometheus mapping. Watch reloads a configuration file or directory when
// it changes, keeping every counter; a bad file keeps the configuration in
// force and Watcher.LastError says why.
package rls
