// Package peertest runs envoyproxy/ratelimit, the rate limit service most
// Envoy users run, as the reference for floodgate's: the same configuration
// and the same requests, on one virtual clock, must give the same answers
// for fixed windows. It is a module of its own so that the peer's
// dependencies stay out of rls/go.mod. The peer has no in-memory backend,
// so the comparison needs a Redis: REDIS_ADDR (standalone); without it the
// tests skip.
package peertest
