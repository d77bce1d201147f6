package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate/adaptive"
)

// handlerTransport serves a client's requests with a handler, in the
// client's goroutine: the script without a network, so that it runs in a
// synctest bubble, on virtual time.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

// shedShare returns the part of the requests of r that reached tier 3
// (past tiers 1 and 2) that tiers 3 and 4 refused.
func shedShare(r *row) float64 {
	reached := r.sent - r.tier(1) - r.tier(2)
	if reached == 0 {
		return 0
	}
	return float64(r.tier(3)+r.tier(4)) / float64(reached)
}

// checkInvariants holds on any machine, however slow: they follow from the
// tiers' rules, not from timing. Critical requests are never shed by tiers
// 3 and 4 (their thresholds are Never, and the two critical clients fit in
// their 4 guaranteed workers); no API key ever has more than maxInFlight
// requests in the handler, and the abuser, who asks for twice as many, is
// refused by tier 2; every answer is a tier's or a 200.
//
// On Redis, a request whose Acquire Redis did not answer in time is
// counted in this process (FailLocal), apart from the slots Redis holds:
// a key may then have up to twice maxInFlight in flight, so that bound is
// checked only when no decision fell back.
func checkInvariants(t *testing.T, rep *report, srv *server) {
	t.Helper()
	crit := rep.byClass[adaptive.ClassCritical]
	assert.Positive(t, crit.sent, "critical requests sent")
	assert.Zero(t, crit.tier(3), "critical requests shed by tier 3")
	assert.Zero(t, crit.tier(4), "critical requests shed by tier 4")
	for _, g := range rep.groups {
		assert.Zero(t, rep.byGroup[g].outcomes[unexpected], "requests of %s answered by no tier", g)
	}
	bound := maxInFlight
	if n := srv.redisFallbacks.Load(); n > 0 {
		t.Logf("%d decisions fell back to this process: up to %d requests of a key in flight", n, 2*maxInFlight)
		bound = 2 * maxInFlight
	} else {
		assert.Equal(t, maxInFlight, srv.peaks.of("abuser"), "the abuser held its limit")
	}
	for _, user := range []string{"acme", "globex", "initech", "spammer", "abuser", "batch-0", "batch-9"} {
		assert.LessOrEqual(t, srv.peaks.of(user), bound, "most requests of %s in the handler at once", user)
	}
	assert.Positive(t, rep.byGroup["abuser"].tier(2), "the abuser's requests refused by tier 2")
	sum := 0
	for _, n := range rep.status {
		sum += n
	}
	all := rep.total()
	assert.Equal(t, all.sent, sum, "status codes counted")
}

// TestOverload runs the script on memstore in a synctest bubble: the
// stores, the limiter and the handler's work all run on the bubble's
// virtual clock, so the counts depend only on the script, up to the order
// in which requests at one instant are served. The bounds are the
// script's, with room for that order.
func TestOverload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := newServer(config{})
		require.NoError(t, err)
		rep := drive(context.Background(), &http.Client{Transport: handlerTransport{srv}}, "http://stripe.test", script())
		require.NoError(t, srv.Close())
		var out strings.Builder
		printReport(&out, rep, srv, "a synctest bubble")
		t.Logf("\n%s", out.String())

		checkInvariants(t, rep, srv)
		crit := rep.byClass[adaptive.ClassCritical]
		assert.Equal(t, crit.sent, crit.outcomes[served], "critical requests served")
		assert.InDelta(t, 2.45, rep.elapsed.Seconds(), 0.05, "the script's 2.4s and its last requests, on virtual time")

		// Tier 1: the spammer alone; its two goroutines send about 500
		// requests in 0.5s, of which a burst of 20 and 50 a second pass.
		spammer := rep.byGroup["spammer"]
		assert.Greater(t, spammer.sent, 300)
		assert.InDelta(t, 20+25, spammer.outcomes[served], 10, "the spammer's requests served")
		all := rep.total()
		assert.Equal(t, spammer.tier(1), all.tier(1), "tier 1 refused the spammer alone")

		// Tier 2: the abuser alone; three of its six goroutines hold its
		// three slots, 800ms at a time, and the other three are refused
		// every 100ms.
		abuser := rep.byGroup["abuser"]
		assert.InDelta(t, 6, abuser.outcomes[served], 3, "the abuser's requests served")
		assert.InDelta(t, 45, abuser.tier(2), 15, "the abuser's requests refused by tier 2")
		assert.Equal(t, abuser.tier(2), all.tier(2), "tier 2 refused the abuser alone")

		// Tiers 3 and 4: the burst. Each refuses requests, of the
		// non-critical classes only; most sheddable and background
		// requests are shed, few default ones. (Which of the two is shed
		// more depends on the order of requests at one instant: the
		// thresholds themselves are TestAnswers'.)
		burst := rep.byGroup["batch-0..9"]
		assert.Positive(t, all.tier(3), "tier 3 refused")
		assert.Positive(t, all.tier(4), "tier 4 refused")
		assert.Greater(t, burst.tier(3)+burst.tier(4), burst.sent/2, "most of the burst shed")
		def := rep.byClass[adaptive.ClassDefault]
		shd := rep.byClass[adaptive.ClassSheddable]
		bg := rep.byClass[adaptive.ClassBackground]
		assert.Less(t, shedShare(def), 0.35, "default requests shed")
		assert.Greater(t, shedShare(shd), 0.5, "sheddable requests shed")
		assert.Greater(t, shedShare(bg), 0.5, "background requests shed")
		// The burst's background and sheddable keys come first: tier 4
		// sheds them from 50% and 70% busy, before the fleet reaches tier
		// 3's 80%, where it sheds them and default requests.
		assert.Positive(t, bg.tier(4), "background requests shed by tier 4")
		assert.Positive(t, shd.tier(4), "sheddable requests shed by tier 4")
		assert.Positive(t, def.tier(3), "default requests shed by tier 3")
		// On one process, tier 3 (80%) comes to default requests before
		// tier 4's rule for them (90%) can: only a request that passes
		// tier 3 just before two others take workers meets it.
		assert.LessOrEqual(t, def.outcomes[byWorker], 3, "default requests shed by tier 4's utilization rule")
	})
}

// TestDemo runs the demo as `go run ./examples/stripe -demo` does, over
// loopback on real time, and checks what holds however loaded the machine
// is, and the tables' shape.
func TestDemo(t *testing.T) {
	t.Parallel() // the demo waits on its clock: 2.5 s, mostly idle
	srv, err := newServer(config{})
	require.NoError(t, err)
	defer srv.Close()
	rep, base, err := demo(context.Background(), srv)
	require.NoError(t, err)
	checkInvariants(t, rep, srv)
	var out strings.Builder
	printReport(&out, rep, srv, base)
	for _, want := range []string{"in this process (memstore)", "by priority", "critical", "background", "by user", "abuser", "status codes: 200: "} {
		assert.Contains(t, out.String(), want)
	}
}

// TestRedis runs the demo on redisstore and the Redis fleet exchange: the
// server REDIS_ADDR names, or an embedded miniredis.
func TestRedis(t *testing.T) {
	t.Parallel()
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = miniredis.RunT(t).Addr()
	}
	client := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = client.Close() })
	prefix := fmt.Sprintf("stripe-test-%d:", time.Now().UnixNano())
	srv, err := newServer(config{
		redis:  client,
		prefix: prefix, // the test never clears a server it did not start
		// The tiers' answers are the subject, not Redis' latency: a
		// loaded machine must not turn a 429 into a 503.
		redisTimeout: time.Second,
	})
	require.NoError(t, err)
	defer srv.Close()
	assert.Contains(t, srv.where, "on Redis")
	rep, _, err := demo(context.Background(), srv)
	require.NoError(t, err)
	require.NoError(t, srv.Close()) // the store reports its last failures
	checkInvariants(t, rep, srv)
	ctx := context.Background()
	keys, err := client.Keys(ctx, prefix+"*:if").Result()
	require.NoError(t, err)
	left := int64(0)
	for _, k := range keys {
		left += client.ZCard(ctx, k).Val()
	}
	// A Release that failed leaves its hold, and so may an Acquire that
	// timed out after Redis ran it: both expire at the TTL.
	if srv.redisFallbacks.Load() == 0 && srv.releaseErrors.Load() == 0 {
		assert.Zero(t, left, "holds left after every request ended")
	} else {
		t.Logf("%d holds left; %d fallbacks, %d failed releases", left, srv.redisFallbacks.Load(), srv.releaseErrors.Load())
	}
	assert.Equal(t, int64(1), client.Exists(ctx, prefix+"{fleet}:fleet").Val(), "the fleet's hash (Store.FleetKey)")
}

func TestClassOf(t *testing.T) {
	for in, want := range map[string]string{
		"critical": adaptive.ClassCritical, "CRITICAL": adaptive.ClassCritical,
		"sheddable": adaptive.ClassSheddable, "background": adaptive.ClassBackground,
		"default": adaptive.ClassDefault, "": adaptive.ClassDefault, "urgent": adaptive.ClassDefault,
	} {
		r := httptest.NewRequest(http.MethodGet, "/v1/charges", nil)
		r.Header.Set(priorityHeader, in)
		assert.Equal(t, want, classOf(r), "X-Priority: %q", in)
	}
}

// TestAnswers: each tier's refusal carries its status, Retry-After and
// code, and a request without an API key is the client's to fix.
func TestAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := newServer(config{})
		require.NoError(t, err)
		defer srv.Close()
		get := func(key, class, ms string) *httptest.ResponseRecorder {
			r := httptest.NewRequest(http.MethodGet, "/v1/charges?ms="+ms, nil)
			if key != "" {
				r.Header.Set(apiKeyHeader, key)
			}
			r.Header.Set(priorityHeader, class)
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, r)
			return rec
		}
		assert.Equal(t, http.StatusUnauthorized, get("", "", "0").Code, "no API key")
		assert.Equal(t, http.StatusBadRequest, get("k0", "", "x").Code, "a bad ?ms=")
		ok := get("k", "", "0")
		assert.Equal(t, http.StatusOK, ok.Code)
		assert.NotEmpty(t, ok.Header().Get("RateLimit"), "tier 1's fields")

		// Tier 1: a burst of 20, then 429.
		for range rateBurst - 1 {
			require.Equal(t, http.StatusOK, get("k", "", "0").Code)
		}
		rec := get("k", "", "0")
		assert.Equal(t, http.StatusTooManyRequests, rec.Code)
		assert.Contains(t, rec.Body.String(), codeRate)
		assert.Equal(t, "1", rec.Header().Get("Retry-After"))

		// Tier 2 and the shedders: requests held in the handler.
		hold := func(key, class string, n int) {
			for range n {
				go get(key, class, "1000")
			}
			synctest.Wait()
		}
		hold("slow", "", maxInFlight)
		rec = get("slow", "", "0")
		assert.Equal(t, http.StatusTooManyRequests, rec.Code)
		assert.Contains(t, rec.Body.String(), codeInflight)
		assert.NotEmpty(t, rec.Header().Get("Retry-After"))
		for i := range 3 { // 3 + 9 = 12 busy workers: 60%
			hold(fmt.Sprintf("busy-%d", i), "", maxInFlight)
		}
		rec = get("bg", adaptive.ClassBackground, "0")
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code, "background at 60%%")
		assert.Contains(t, rec.Body.String(), codeWorker)
		assert.Equal(t, "1", rec.Header().Get("Retry-After"))
		assert.Equal(t, http.StatusOK, get("s", adaptive.ClassSheddable, "0").Code, "sheddable at 60%%")
		hold("busy-3", "", maxInFlight)
		hold("busy-4", "", 1) // 16 busy: 80%
		rec = get("d", adaptive.ClassDefault, "0")
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code, "default at 80%%")
		assert.Contains(t, rec.Body.String(), codeFleet)
		assert.Equal(t, http.StatusOK, get("c", adaptive.ClassCritical, "0").Code, "critical at 80%%")
		time.Sleep(2 * time.Second) // every held request ends
	})
}
