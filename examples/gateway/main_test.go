package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
)

func get(t *testing.T, h http.Handler, apiKey string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/api/hello", nil)
	req.Header.Set("X-API-Key", apiKey)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestQuotaAcrossInstances runs two gateway instances on one embedded Redis
// with a quota of 100 per caller: together they admit exactly 100 requests
// of a caller, and after one instance stops, the units it held serve the
// other.
func TestQuotaAcrossInstances(t *testing.T) {
	alg := floodgate.FixedWindow{Limit: 100, Window: 30 * 24 * time.Hour}
	a, err := newGateway(config{alg: alg, minBatch: 5, timeout: 10 * time.Second})
	require.NoError(t, err)
	defer func() { assert.NoError(t, a.Close()) }()
	b, err := newGateway(config{redisAddr: a.redisAddr, alg: alg, timeout: 10 * time.Second})
	require.NoError(t, err)

	// Instance a leases a batch of 5 and serves 1.
	require.Equal(t, http.StatusOK, get(t, a.handler, "k").Code)
	held := a.leases.Stats().Leased - 1
	require.EqualValues(t, 4, held)
	// Instance b takes the rest of the quota, then is denied: a holds units.
	ok := 0
	for range 200 {
		rec := get(t, b.handler, "k")
		if rec.Code == http.StatusOK {
			ok++
			continue
		}
		require.Equal(t, http.StatusTooManyRequests, rec.Code)
		assert.NotEmpty(t, rec.Header().Get("Retry-After"))
		assert.NotEmpty(t, rec.Header().Get("RateLimit"))
	}
	assert.EqualValues(t, 100-1-held, ok)
	// Closing b returns nothing it holds (it ran out); closing a returns
	// its units, which b can then admit.
	require.NoError(t, b.Close())
	b, err = newGateway(config{redisAddr: a.redisAddr, alg: alg, timeout: 10 * time.Second})
	require.NoError(t, err)
	defer func() { assert.NoError(t, b.Close()) }()
	require.NoError(t, a.leases.Close())
	for range held {
		assert.Equal(t, http.StatusOK, get(t, b.handler, "k").Code)
	}
	assert.Equal(t, http.StatusTooManyRequests, get(t, b.handler, "k").Code)
}

// TestDrive runs the -load mode briefly, with callers well under their
// quota (in-process load runs at tens of thousands of requests per second):
// all are admitted, and most decisions need no round trip to Redis. (A test
// on a loaded machine allows Redis more time than the gateway's 100ms.)
func TestDrive(t *testing.T) {
	alg := floodgate.TokenBucket{Rate: 1_000_000, Per: time.Second, Burst: 1_000_000}
	g, err := newGateway(config{alg: alg, timeout: 10 * time.Second})
	require.NoError(t, err)
	res := drive(g.handler, 8, 8, 300*time.Millisecond)
	require.NoError(t, g.Close())
	s := g.leases.Stats()
	t.Log(describe(s))
	t.Logf("%+v", res)
	assert.Positive(t, res.ok)
	assert.Zero(t, res.denied+res.other)
	assert.Equal(t, res.ok, s.Local+s.Waited+s.Forwarded)
	assert.Greater(t, s.Local, s.Waited+s.Forwarded, "most decisions are local")
}
