package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// inMemory serves requests with a handler directly, without a network, so
// that the example runs on synctest's virtual clock.
type inMemory struct{ h http.Handler }

func (m inMemory) RoundTrip(r *http.Request) (*http.Response, error) {
	req := r.Clone(r.Context())
	req.RemoteAddr = "192.0.2.1:40000"
	req.RequestURI = r.URL.RequestURI()
	rec := httptest.NewRecorder()
	m.h.ServeHTTP(rec, req)
	if r.Body != nil {
		_ = r.Body.Close()
	}
	return rec.Result(), nil
}

func TestRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, err := demoServer()
		require.NoError(t, err)
		var out bytes.Buffer
		require.NoError(t, run(context.Background(), &out, inMemory{h}, "http://demo/api/hello", 6, 1))
		rounds := strings.Split(out.String(), "round 2")
		require.Len(t, rounds, 2, "output:\n%s", out.String())

		// Round 1: the burst of 3 passes, the rest are retried after
		// Retry-After (1s) plus up to 500ms of jitter, and succeed.
		assert.Len(t, regexp.MustCompile(`: 200 after 1 attempt`).FindAllString(rounds[0], -1), 3, rounds[0])
		assert.Len(t, regexp.MustCompile(`: 200 after 2 attempt`).FindAllString(rounds[0], -1), 3, rounds[0])
		assert.Regexp(t, `6 requests in (3\.[0-9]|4\.[0-5])s`, rounds[0])
		// Round 2: the client paces itself; the server never refuses.
		assert.Len(t, regexp.MustCompile(`: 200 after 1 attempt`).FindAllString(rounds[1], -1), 6, rounds[1])
		assert.Contains(t, rounds[1], "6 requests in 5.0s")
	})
}

func TestSelfLimiterRejectsBadRates(t *testing.T) {
	for _, r := range []float64{0, -1, 1e9} {
		_, err := selfLimiter(r)
		assert.Error(t, err, "selfLimiter(%v)", r)
	}
}
