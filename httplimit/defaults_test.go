package httplimit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/headers"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/redisstore"
)

// The default answers when the middleware cannot decide (issue 14): a
// request without a key is the client's to fix (401), a store that fails is
// a temporary condition the client is told to wait out (503, Retry-After and
// the policy), and every such body is JSON.

// errorBody checks that rec carries an error body of the media type the
// options ask for, and returns the JSON error object's code (problem: the
// problem's status must be rec's).
func errorBody(t *testing.T, rec *httptest.ResponseRecorder, problem bool) headers.ErrorDetail {
	t.Helper()
	assert.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"))
	if problem {
		require.Equal(t, headers.ContentTypeProblem, rec.Header().Get("Content-Type"), "body %q", rec.Body.String())
		var p headers.Problem
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p), "body %q", rec.Body.String())
		assert.Equal(t, "about:blank", p.Type)
		assert.Equal(t, http.StatusText(rec.Code), p.Title)
		assert.Equal(t, rec.Code, p.Status)
		assert.NotEmpty(t, p.Detail)
		return headers.ErrorDetail{}
	}
	require.Equal(t, headers.ContentTypeJSON, rec.Header().Get("Content-Type"), "body %q", rec.Body.String())
	var b headers.ErrorBody
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &b), "body %q", rec.Body.String())
	assert.NotEmpty(t, b.Error.Message)
	return b.Error
}

// noFields asserts that rec carries no rate-limit field and no Retry-After.
func noFields(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	for _, f := range []string{
		headers.FieldRateLimitPolicy, headers.FieldRateLimit,
		headers.FieldRateLimitLimit, headers.FieldRateLimitRemaining, headers.FieldRateLimitReset,
		headers.FieldXRateLimitLimit, headers.FieldXRateLimitRemaining, headers.FieldXRateLimitReset,
		headers.FieldRetryAfter,
	} {
		assert.Empty(t, rec.Header().Values(f), "%s on a response without a decision", f)
	}
}

func TestMiddlewareMissingKeyIsUnauthorized(t *testing.T) {
	for _, problem := range []bool{false, true} {
		t.Run(fmt.Sprintf("problem=%v", problem), func(t *testing.T) {
			lim, fs := alwaysCounted(allowed42, nil)
			next := &okHandler{}
			h := newMW(t, lim, &httplimit.Options{
				Key:            httplimit.KeyByAPIKey("X-API-Key"),
				ProblemDetails: problem,
			})(next)

			rec := do(t, h, "192.0.2.1:1234")
			assert.Equal(t, http.StatusUnauthorized, rec.Code)
			assert.Equal(t, 0, next.served(), "a request without a key reached the handler")
			assert.Empty(t, fs.Calls(), "a request without a key was counted")
			noFields(t, rec)
			// The middleware does not know the application's scheme; see
			// Options.Challenge.
			assert.Empty(t, rec.Header().Values("WWW-Authenticate"))
			if e := errorBody(t, rec, problem); !problem {
				assert.Equal(t, "rate_limit_key_missing", e.Code)
			}

			rec = do(t, h, "192.0.2.1:1234", "X-API-Key", "k3y")
			assert.Equal(t, http.StatusOK, rec.Code)
			assert.Equal(t, []string{"key:pJsSh4cMEKdvH0ZVKspEMQ"}, keys(fs.Calls()))
		})
	}
}

type chainSubjectKey struct{}

// TestMiddlewareKeyChainFallsThrough: a key function of a chain that finds
// no key hands the request to the next one; only a request none of them
// keys is ErrNoKey, and 401.
func TestMiddlewareKeyChainFallsThrough(t *testing.T) {
	emptyKey := func(*http.Request) (string, bool) { return "", true } // "found" nothing: falls through too
	withIP := httplimit.KeyChain(nil, httplimit.KeyByAPIKey("X-API-Key"), emptyKey,
		httplimit.KeyBySubject(chainSubjectKey{}), httplimit.KeyByIP(nil))
	credentialsOnly := httplimit.KeyChain(httplimit.KeyByAPIKey("X-API-Key"), httplimit.KeyBySubject(chainSubjectKey{}))
	tests := []struct {
		name    string
		key     httplimit.KeyFunc
		remote  string
		apiKey  string
		subject string
		want    string // the key the limiter sees; "" for a 401
	}{
		{"api key first", withIP, "192.0.2.1:1", "k3y", "alice", "key:pJsSh4cMEKdvH0ZVKspEMQ"},
		{"no api key: subject", withIP, "192.0.2.1:1", "", "alice", "sub:alice"},
		{"neither: address", withIP, "192.0.2.1:1", "", "", "ip:192.0.2.1"},
		{"nothing at all", withIP, "@", "", "", ""}, // a Unix socket peer has no address
		{"credentials only: subject", credentialsOnly, "192.0.2.1:1", "", "bob", "sub:bob"},
		{"credentials only: none", credentialsOnly, "192.0.2.1:1", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim, fs := alwaysCounted(allowed42, nil)
			next := &okHandler{}
			h := newMW(t, lim, &httplimit.Options{Key: tt.key})(next)
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.RemoteAddr = tt.remote
			if tt.apiKey != "" {
				req.Header.Set("X-API-Key", tt.apiKey)
			}
			if tt.subject != "" {
				req = req.WithContext(context.WithValue(req.Context(), chainSubjectKey{}, tt.subject))
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if tt.want == "" {
				assert.Equal(t, http.StatusUnauthorized, rec.Code)
				assert.Empty(t, fs.Calls())
				assert.Equal(t, 0, next.served())
				return
			}
			assert.Equal(t, http.StatusOK, rec.Code)
			assert.Equal(t, []string{tt.want}, keys(fs.Calls()))
		})
	}
}

// unavailableStyles are the header styles a 503 is checked in.
var unavailableStyles = []struct {
	name string
	opts httplimit.Options
	// parse reads the fields back; want is the styles found.
	parse *headers.ParseOptions
	want  headers.Style
}{
	{"ietf", httplimit.Options{}, nil, headers.StyleIETF},
	{"draft", httplimit.Options{Style: headers.StyleDraft}, nil, headers.StyleDraft},
	{"x delta", httplimit.Options{Style: headers.StyleX}, &headers.ParseOptions{XReset: headers.ResetDelta}, headers.StyleX},
	{"x epoch", httplimit.Options{Style: headers.StyleX, XReset: headers.ResetEpoch, Now: fixedClock},
		&headers.ParseOptions{XReset: headers.ResetEpoch, Now: fixedClock}, headers.StyleX},
	{"all", httplimit.Options{Style: headers.StyleIETF | headers.StyleDraft | headers.StyleX}, nil,
		headers.StyleIETF | headers.StyleDraft | headers.StyleX},
	{"omitted", httplimit.Options{OmitFields: true}, nil, 0},
}

func fixedClock() time.Time { return time.Unix(1_700_000_000, 250_000_000) }

// checkUnavailable checks a 503 answer: Retry-After of retry seconds, the
// fields of a 100-per-minute policy with nothing promised until then, and a
// body that agrees.
func checkUnavailable(t *testing.T, rec *httptest.ResponseRecorder, problem bool, parse *headers.ParseOptions, want headers.Style, retry int64) {
	t.Helper()
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	st, err := headers.Parse(rec.Header(), parse)
	require.NoError(t, err, "Parse(%v)", rec.Header())
	require.True(t, st.HasRetryAfter, "a 503 without Retry-After: %v", rec.Header())
	assert.Equal(t, time.Duration(retry)*time.Second, st.RetryAfter)
	assert.Equal(t, want, st.Styles, "styles sent: %v", rec.Header())
	if want != 0 {
		require.Len(t, st.Policies, 1)
		require.Len(t, st.Limits, 1)
		assert.EqualValues(t, 100, st.Policies[0].Quota, "quota of the limiter's policy")
		if want&headers.StyleIETF != 0 {
			assert.Equal(t, "default", st.Policies[0].Name)
			assert.Equal(t, time.Minute, st.Policies[0].Window)
		}
		assert.EqualValues(t, 0, st.Limits[0].Remaining, "r promises nothing before Retry-After")
		if parse != nil && parse.XReset == headers.ResetEpoch {
			assert.GreaterOrEqual(t, st.Limits[0].Reset, time.Duration(retry)*time.Second)
			assert.LessOrEqual(t, st.Limits[0].Reset, time.Duration(retry+1)*time.Second)
		} else {
			assert.Equal(t, time.Duration(retry)*time.Second, st.Limits[0].Reset, "t equals Retry-After")
		}
	}
	if e := errorBody(t, rec, problem); !problem {
		assert.Equal(t, "rate_limit_unavailable", e.Code)
		assert.Equal(t, retry, e.RetryAfter)
		assert.EqualValues(t, 100, e.Limit)
		assert.EqualValues(t, 0, e.Remaining)
		assert.Equal(t, retry, e.Reset)
	}
}

func TestMiddlewareStoreFailureAnswers503(t *testing.T) {
	storeDown := fmt.Errorf("%w: dial tcp 10.0.0.1:6379: connect: connection refused", floodgate.ErrUnavailable)
	for _, s := range unavailableStyles {
		for _, problem := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/problem=%v", s.name, problem), func(t *testing.T) {
				next := &okHandler{}
				opts := s.opts
				opts.ProblemDetails = problem
				rec := do(t, newMW(t, always(floodgate.Decision{}, storeDown), &opts)(next), "192.0.2.1:1234")
				assert.Equal(t, 0, next.served())
				checkUnavailable(t, rec, problem, s.parse, s.want, 1)
				assert.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
			})
		}
	}
}

// TestMiddlewareEndedContextAnswers503: a request whose context ends before
// the limiter decides is answered as a store failure is (no status says
// "the client went away"; to a client whose deadline passed, the limiter
// did not answer in time).
func TestMiddlewareEndedContextAnswers503(t *testing.T) {
	for _, err := range []error{context.Canceled, context.DeadlineExceeded,
		fmt.Errorf("%w: %w", floodgate.ErrUnavailable, context.DeadlineExceeded)} {
		t.Run(err.Error(), func(t *testing.T) {
			rec := do(t, newMW(t, always(floodgate.Decision{}, err), nil)(&okHandler{}), "192.0.2.1:1234")
			checkUnavailable(t, rec, false, nil, headers.StyleIETF, 1)
		})
	}
}

// TestMiddlewareRedisOutage is the measured case of issue 14: a Redis store
// with its default failure policy (FailError) loses its server. The
// timeout is generous so that the decision before the outage cannot time
// out on a loaded machine; the outage (a closed server) fails at once.
func TestMiddlewareRedisOutage(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	store, err := redisstore.New(client, &redisstore.Options{Timeout: 10 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	lim, err := floodgate.New(store, floodgate.FixedWindow{Limit: 100, Window: time.Minute}, nil)
	require.NoError(t, err)
	next := &okHandler{}
	h := newMW(t, lim, nil)(next)

	rec := do(t, h, "192.0.2.1:1234")
	require.Equal(t, http.StatusOK, rec.Code)
	m.Close()
	rec = do(t, h, "192.0.2.1:1234")
	checkUnavailable(t, rec, false, nil, headers.StyleIETF, 1)
	assert.Equal(t, 1, next.served())
}

// TestMiddlewareErrorBodiesAreJSON: whatever stops a request, the default
// answer is JSON or problem details, never text/plain.
func TestMiddlewareErrorBodiesAreJSON(t *testing.T) {
	storeDown := fmt.Errorf("%w: i/o timeout", floodgate.ErrUnavailable)
	tests := []struct {
		name   string
		lim    *floodgate.Limiter
		opts   httplimit.Options
		status int
		code   string
	}{
		{"no key", always(allowed42, nil), httplimit.Options{Key: httplimit.KeyByAPIKey("X-API-Key")},
			http.StatusUnauthorized, "rate_limit_key_missing"},
		{"store down", always(floodgate.Decision{}, storeDown), httplimit.Options{},
			http.StatusServiceUnavailable, "rate_limit_unavailable"},
		{"context ended", always(floodgate.Decision{}, context.Canceled), httplimit.Options{},
			http.StatusServiceUnavailable, "rate_limit_unavailable"},
		{"other error", always(floodgate.Decision{}, floodgate.ErrKeyTooLong), httplimit.Options{},
			http.StatusInternalServerError, "rate_limit_error"},
		{"invalid cost", always(allowed42, nil), httplimit.Options{Cost: func(*http.Request) int64 { return 0 }},
			http.StatusInternalServerError, "rate_limit_error"},
		{"cost above the quota", always(allowed42, nil), httplimit.Options{Cost: func(*http.Request) int64 { return 101 }},
			http.StatusInternalServerError, "rate_limit_error"},
		{"denied", always(denied, nil), httplimit.Options{}, http.StatusTooManyRequests, headers.ErrorCode},
	}
	for _, tt := range tests {
		for _, problem := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/problem=%v", tt.name, problem), func(t *testing.T) {
				opts := tt.opts
				opts.ProblemDetails = problem
				rec := do(t, newMW(t, tt.lim, &opts)(&okHandler{}), "192.0.2.1:1234")
				assert.Equal(t, tt.status, rec.Code)
				if problem && tt.status == http.StatusTooManyRequests {
					assert.Equal(t, headers.ContentTypeProblem, rec.Header().Get("Content-Type"))
					return // the quota-exceeded problem: TestMiddlewareProblemDetails
				}
				if e := errorBody(t, rec, problem); !problem {
					assert.Equal(t, tt.code, e.Code)
				}
			})
		}
	}
}

func TestMiddlewareChallenge(t *testing.T) {
	h := newMW(t, always(allowed42, nil), &httplimit.Options{
		Key:       httplimit.KeyByAPIKey("X-API-Key"),
		Challenge: `APIKey header="X-API-Key"`,
	})(&okHandler{})
	rec := do(t, h, "192.0.2.1:1234")
	assert.Equal(t, http.StatusUnauthorized, rec.Code)
	assert.Equal(t, []string{`APIKey header="X-API-Key"`}, rec.Header().Values("WWW-Authenticate"))

	// Only the 401 carries it.
	rec = do(t, h, "192.0.2.1:1234", "X-API-Key", "k3y")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Empty(t, rec.Header().Values("WWW-Authenticate"))

	for _, bad := range []string{"Bearer\r\nSet-Cookie: x=1", "Bearer realm=\"ünicode\"", "\x00"} {
		_, err := httplimit.New(always(allowed42, nil), &httplimit.Options{Challenge: bad})
		assert.ErrorIs(t, err, floodgate.ErrInvalidConfig, "Challenge %q", bad)
	}
}

func TestMiddlewareUnavailableRetryAfter(t *testing.T) {
	storeDown := fmt.Errorf("%w: i/o timeout", floodgate.ErrUnavailable)
	for _, tt := range []struct {
		set  time.Duration
		want int64
	}{{0, 1}, {time.Nanosecond, 1}, {1500 * time.Millisecond, 2}, {30 * time.Second, 30}} {
		t.Run(tt.set.String(), func(t *testing.T) {
			h := newMW(t, always(floodgate.Decision{}, storeDown), &httplimit.Options{UnavailableRetryAfter: tt.set})(&okHandler{})
			checkUnavailable(t, do(t, h, "192.0.2.1:1234"), false, nil, headers.StyleIETF, tt.want)
		})
	}
	_, err := httplimit.New(always(allowed42, nil), &httplimit.Options{UnavailableRetryAfter: -time.Second})
	assert.ErrorIs(t, err, floodgate.ErrInvalidConfig)
}

// TestMiddlewareCustomErrorHandlerGetsNoFields: the fields of a 503 are the
// default answer's; a handler of the user's starts from a clean header.
func TestMiddlewareCustomErrorHandlerGetsNoFields(t *testing.T) {
	storeDown := fmt.Errorf("%w: i/o timeout", floodgate.ErrUnavailable)
	var seen http.Header
	h := newMW(t, always(floodgate.Decision{}, storeDown), &httplimit.Options{
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			seen = w.Header().Clone()
			w.WriteHeader(http.StatusBadGateway)
		},
	})(&okHandler{})
	rec := do(t, h, "192.0.2.1:1234")
	assert.Equal(t, http.StatusBadGateway, rec.Code)
	assert.Empty(t, seen)
}
