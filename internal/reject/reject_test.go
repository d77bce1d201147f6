package reject

import (
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAnswer(t *testing.T) {
	teapot := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	for _, tc := range []struct {
		name       string
		status     int
		retryAfter time.Duration
		body       http.Handler
		wantStatus int
		wantRetry  string
		wantBody   string
	}{
		{"defaults", 0, 0, nil, http.StatusServiceUnavailable, "1", "busy\n"},
		{"429, 1.5s", http.StatusTooManyRequests, 1500 * time.Millisecond, nil, http.StatusTooManyRequests, "2", "busy\n"},
		{"a nanosecond is a second", 0, time.Nanosecond, nil, http.StatusServiceUnavailable, "1", "busy\n"},
		{"whole seconds stay", 0, 3 * time.Second, nil, http.StatusServiceUnavailable, "3", "busy\n"},
		{"the largest Duration does not overflow", 0, math.MaxInt64, nil, http.StatusServiceUnavailable, "9223372037", "busy\n"},
		{"own body", 0, 0, teapot, http.StatusTeapot, "1", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := New(tc.status, tc.retryAfter, tc.body, "busy")
			require.NoError(t, err)
			rec := httptest.NewRecorder()
			a.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
			assert.Equal(t, tc.wantStatus, rec.Code)
			assert.Equal(t, tc.wantRetry, rec.Header().Get("Retry-After"))
			assert.Equal(t, tc.wantBody, rec.Body.String())
		})
	}
}

func TestNewInvalid(t *testing.T) {
	for _, tc := range []struct {
		status     int
		retryAfter time.Duration
		want       string
	}{
		{http.StatusOK, 0, "MiddlewareOptions.RejectStatus 200 is not a 4xx or 5xx code"},
		{600, 0, "MiddlewareOptions.RejectStatus 600 is not a 4xx or 5xx code"},
		{0, -time.Second, "MiddlewareOptions.RetryAfter -1s is negative"},
	} {
		_, err := New(tc.status, tc.retryAfter, nil, "busy")
		assert.EqualError(t, err, tc.want, "New(%d, %v)", tc.status, tc.retryAfter)
	}
}
