package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate/headers"
)

func serve(t *testing.T, h http.Handler, path, remote string, kv ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.RemoteAddr = remote
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestHello(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := newHandler(config{})
		require.NoError(t, err)
		for i := range 5 {
			rec := serve(t, h, "/api/hello", "192.0.2.1:5000", "X-Forwarded-For", "203.0.113.1") // not trusted
			require.Equal(t, http.StatusOK, rec.Code, "request %d", i)
			assert.Equal(t, `"default";q=5;w=30`, rec.Header().Get("RateLimit-Policy"))
			assert.Regexp(t, `^"default";r=`+string(rune('4'-i))+`;t=\d+$`, rec.Header().Get("RateLimit"))
		}
		rec := serve(t, h, "/api/hello", "192.0.2.1:5001")
		assert.Equal(t, http.StatusTooManyRequests, rec.Code)
		assert.Equal(t, "6", rec.Header().Get("Retry-After"), "one unit refills every 6s")
		assert.Equal(t, `"default";r=0;t=6`, rec.Header().Get("RateLimit"))
		var body headers.ErrorBody
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
		assert.Equal(t, "rate_limit_exceeded", body.Error.Code)
		assert.Equal(t, int64(6), body.Error.RetryAfter)

		// Another caller, and the same address with an API key, have
		// their own quota; health checks are never limited.
		assert.Equal(t, http.StatusOK, serve(t, h, "/api/hello", "192.0.2.2:5000").Code)
		assert.Equal(t, http.StatusOK, serve(t, h, "/api/hello", "192.0.2.1:5000", "X-API-Key", "k").Code)
		health := serve(t, h, "/healthz", "192.0.2.1:5000")
		assert.Equal(t, http.StatusOK, health.Code)
		assert.Empty(t, health.Header().Get("RateLimit"))

		time.Sleep(6 * time.Second)
		assert.Equal(t, http.StatusOK, serve(t, h, "/api/hello", "192.0.2.1:5000").Code, "Retry-After was enough")
	})
}

func TestReportSharesTheQuota(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := newHandler(config{})
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, serve(t, h, "/api/hello", "192.0.2.1:1").Code)
		rec := serve(t, h, "/api/report", "192.0.2.1:1") // costs 5, only 4 left
		assert.Equal(t, http.StatusTooManyRequests, rec.Code)
		assert.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
		assert.Equal(t, "6", rec.Header().Get("Retry-After"))
	})
}

func TestTrustedProxy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := newHandler(config{trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
		require.NoError(t, err)
		for range 5 {
			require.Equal(t, http.StatusOK, serve(t, h, "/api/hello", "10.0.0.1:1", "X-Forwarded-For", "203.0.113.1").Code)
		}
		assert.Equal(t, http.StatusTooManyRequests, serve(t, h, "/api/hello", "10.0.0.1:1", "X-Forwarded-For", "6.6.6.6, 203.0.113.1").Code)
		assert.Equal(t, http.StatusOK, serve(t, h, "/api/hello", "10.0.0.1:1", "X-Forwarded-For", "203.0.113.2").Code)
	})
}

func TestExportIsShaped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := newHandler(config{})
		require.NoError(t, err)
		start := time.Now()
		var mu sync.Mutex
		var done []time.Duration
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				rec := serve(t, h, "/api/export", "192.0.2.1:1")
				assert.Equal(t, http.StatusOK, rec.Code)
				assert.NotEmpty(t, rec.Header().Get("X-RateLimit-Remaining"))
				mu.Lock()
				done = append(done, time.Since(start))
				mu.Unlock()
			})
			synctest.Wait()
		}
		wg.Wait()
		assert.Equal(t, []time.Duration{0, 500 * time.Millisecond, time.Second}, done)
	})
}

func TestShadow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := newHandler(config{shadow: true})
		require.NoError(t, err)
		for range 20 {
			rec := serve(t, h, "/api/hello", "192.0.2.1:1")
			require.Equal(t, http.StatusOK, rec.Code)
		}
	})
}
