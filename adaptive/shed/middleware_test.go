package shed

import (
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/headers"
)

func newMiddleware(t *testing.T, s *Shedder, o *MiddlewareOptions) http.Handler {
	t.Helper()
	mw, err := Middleware(s, o)
	require.NoError(t, err)
	return mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
}

// classHeader takes a request's class from its X-Class header.
func classHeader(r *http.Request) string { return r.Header.Get("X-Class") }

func serve(h http.Handler, class string) *http.Response {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-Class", class)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

func TestMiddleware(t *testing.T) {
	g := &level{}
	g.set(0.9)
	s := newShedder(t, g, nil)
	for _, tc := range []struct {
		name       string
		opts       *MiddlewareOptions
		class      string
		status     int
		retryAfter string
		body       string
	}{
		{"default class allowed at 90%", nil, adaptive.ClassSheddable, http.StatusNoContent, "", ""},
		{"sheddable shed at 90%", &MiddlewareOptions{Class: classHeader}, adaptive.ClassSheddable,
			http.StatusServiceUnavailable, "1", "overloaded: request shed\n"},
		{"critical allowed", &MiddlewareOptions{Class: classHeader}, adaptive.ClassCritical, http.StatusNoContent, "", ""},
		{"status and retry-after", &MiddlewareOptions{Class: classHeader, RejectStatus: http.StatusTooManyRequests, RetryAfter: 1500 * time.Millisecond},
			adaptive.ClassBackground, http.StatusTooManyRequests, "2", "overloaded: request shed\n"},
		{"a nanosecond is a second", &MiddlewareOptions{Class: classHeader, RetryAfter: time.Nanosecond},
			adaptive.ClassBackground, http.StatusServiceUnavailable, "1", "overloaded: request shed\n"},
		{"the largest Duration does not overflow", &MiddlewareOptions{Class: classHeader, RetryAfter: math.MaxInt64},
			adaptive.ClassBackground, http.StatusServiceUnavailable, "9223372037", "overloaded: request shed\n"},
		{"custom response", &MiddlewareOptions{Class: classHeader, Rejected: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusTeapot)
			_, _ = io.WriteString(w, "busy")
		})}, adaptive.ClassBackground, http.StatusTeapot, "1", "busy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := serve(newMiddleware(t, s, tc.opts), tc.class)
			assert.Equal(t, tc.status, resp.StatusCode)
			assert.Equal(t, tc.retryAfter, resp.Header.Get("Retry-After"))
			if tc.retryAfter != "" && (tc.opts == nil || tc.opts.Rejected == nil) {
				// The value package headers writes for every middleware.
				ra := time.Second
				if tc.opts != nil && tc.opts.RetryAfter != 0 {
					ra = tc.opts.RetryAfter
				}
				assert.Equal(t, headers.FormatRetryAfter(ra), resp.Header.Get("Retry-After"))
				assert.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"))
			}
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, tc.body, string(body))
		})
	}
}

func TestMiddlewareInvalid(t *testing.T) {
	_, err := Middleware(nil, nil)
	assert.ErrorIs(t, err, ErrInvalidOption)
	_, err = Middleware(&Shedder{}, nil)
	assert.ErrorIs(t, err, ErrInvalidOption, "a Shedder not made by New")
	s := newShedder(t, &level{}, nil)
	for name, o := range map[string]MiddlewareOptions{
		"2xx status":          {RejectStatus: http.StatusOK},
		"status 600":          {RejectStatus: 600},
		"negative retryAfter": {RetryAfter: -time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Middleware(s, &o)
			assert.ErrorIs(t, err, ErrInvalidOption)
		})
	}
}

// discardWriter is a ResponseWriter that keeps nothing, so that allocation
// counts are the middleware's own.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}

func TestMiddlewareAllocs(t *testing.T) {
	s := newShedder(t, &level{}, nil)
	h := newMiddleware(t, s, &MiddlewareOptions{Class: classHeader})
	w := &discardWriter{h: http.Header{}}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-Class", adaptive.ClassSheddable)
	assert.Zero(t, testing.AllocsPerRun(1000, func() { h.ServeHTTP(w, r) }), "allowed path")
}
