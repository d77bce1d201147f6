package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate/client"
)

// TestDefaultTransportRetryBudget is the bar of issue 14: 100 requests
// through a default Transport against a server that answers 503 to
// everything make at most 120 attempts, one after another or from 10
// goroutines at once. Without the budget they made 400 (4 each). The waits
// are recorded instead of slept; each must still honour Retry-After.
func TestDefaultTransportRetryBudget(t *testing.T) {
	const requests = 100
	for _, retryAfter := range []string{"", "0", "1"} {
		for _, workers := range []int{1, 10} {
			t.Run(fmt.Sprintf("Retry-After=%q/workers=%d", retryAfter, workers), func(t *testing.T) {
				var attempts atomic.Int64
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					attempts.Add(1)
					if retryAfter != "" {
						w.Header().Set("Retry-After", retryAfter)
					}
					w.WriteHeader(http.StatusServiceUnavailable)
				}))
				defer srv.Close()

				tr, err := client.NewTransport(srv.Client().Transport, nil)
				require.NoError(t, err)
				var mu sync.Mutex
				var waits []time.Duration
				client.SetSleep(tr, func(ctx context.Context, d time.Duration) error {
					mu.Lock()
					waits = append(waits, d)
					mu.Unlock()
					return ctx.Err()
				})
				c := &http.Client{Transport: tr}

				var wg sync.WaitGroup
				for w := range workers {
					wg.Go(func() {
						for i := w; i < requests; i += workers {
							resp, err := c.Get(srv.URL)
							if !assert.NoError(t, err, "request %d", i) {
								return
							}
							_, _ = io.Copy(io.Discard, resp.Body)
							_ = resp.Body.Close()
							assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "request %d", i)
						}
					})
				}
				wg.Wait()

				n := attempts.Load()
				assert.LessOrEqual(t, n, int64(120), "attempts of %d requests", requests)
				// A6's threshold: only a failure leaving more than 5 of the
				// 10 tokens (9, 8, 7 or 6) may be retried. One after
				// another, the first request fails at 9, 8, 7 and, on its
				// last attempt, 6: three retries. At once, up to four.
				if workers == 1 {
					assert.Equal(t, int64(requests+3), n, "attempts of %d requests", requests)
				}
				assert.GreaterOrEqual(t, n, int64(requests+1), "the first failure is always retried")
				assert.LessOrEqual(t, n, int64(requests+4), "attempts of %d requests", requests)
				assert.Len(t, waits, int(n-requests), "waits, one per retry")
				floor := time.Duration(0)
				if retryAfter == "1" {
					floor = time.Second
				}
				for _, d := range waits {
					assert.GreaterOrEqual(t, d, floor, "a wait shorter than Retry-After: %q", retryAfter)
				}
				assert.Equal(t, 0.0, tr.RetryTokens(), "tokens after %d straight failures", n)
			})
		}
	}
}

// TestTransportRetryBudgetRefills drains the budget, then checks that
// successes earn retries back, to the token: a success gives back 0.1 of a
// token, and a failure is retried only if it leaves more than 5 of 10.
func TestTransportRetryBudgetRefills(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var outage, fail atomic.Bool // every attempt fails; the next one does
		outage.Store(true)
		b := &backend{reply: func(_ int, r *http.Request) (*http.Response, error) {
			if outage.Load() || fail.Swap(false) {
				return response(r, http.StatusServiceUnavailable), nil
			}
			return response(r, http.StatusOK), nil
		}}
		tr := newTransport(t, b, nil)
		assert.Equal(t, 10.0, tr.RetryTokens(), "a budget starts full")

		// An outage: the first request uses all 4 attempts (10 → 6), the
		// next two none of their retries (→ 5, → 4).
		for i, want := range []int{4, 1, 1} {
			before := b.attempts()
			resp, err := get(t, tr)
			require.NoError(t, err)
			assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
			assert.Equal(t, want, b.attempts()-before, "attempts of request %d in the outage", i)
		}
		assert.Equal(t, 4.0, tr.RetryTokens())

		// The backend recovers. 20 successes bring the budget to 6.0; a
		// failure then leaves 5.0, which is not above half: no retry.
		outage.Store(false)
		for range 20 {
			_, err := get(t, tr)
			require.NoError(t, err)
		}
		assert.Equal(t, 6.0, tr.RetryTokens())
		fail.Store(true)
		before := b.attempts()
		resp, err := get(t, tr)
		require.NoError(t, err)
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "retried at the threshold")
		assert.Equal(t, 1, b.attempts()-before)
		assert.Equal(t, 5.0, tr.RetryTokens())

		// 11 more bring it to 6.1: the failure leaves 5.1, and is retried.
		for range 11 {
			_, err := get(t, tr)
			require.NoError(t, err)
		}
		fail.Store(true)
		before = b.attempts()
		resp, err = get(t, tr)
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode, "not retried above the threshold")
		assert.Equal(t, 2, b.attempts()-before)
		assert.Equal(t, 5.2, tr.RetryTokens(), "5.1 after the failure, 5.2 after the retry's success")

		// The budget never exceeds MaxTokens.
		for range 100 {
			_, err := get(t, tr)
			require.NoError(t, err)
		}
		assert.Equal(t, 10.0, tr.RetryTokens())
	})
}

// TestTransportRetryBudgetCounts checks what each outcome does to the budget,
// from 9 tokens (after one 503): a success gives back 0.1, a failure the
// backend could be spared takes 1, anything else (a 429 that names a wait
// among them) leaves it alone.
func TestTransportRetryBudgetCounts(t *testing.T) {
	connErr := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	ok := func(status int, kv ...string) func(*http.Request) (*http.Response, error) {
		return func(r *http.Request) (*http.Response, error) { return response(r, status, kv...), nil }
	}
	exhausted := []string{"RateLimit-Policy", `"default";q=5;w=1`, "RateLimit", `"default";r=0;t=1`}
	tests := []struct {
		name   string
		method string
		body   io.Reader
		cancel bool
		reply  func(r *http.Request) (*http.Response, error)
		want   float64
	}{
		{"200 is a success", http.MethodGet, nil, false, ok(200), 9.1},
		{"404 is a success: the backend answered", http.MethodGet, nil, false, ok(404), 9.1},
		{"500 is neither", http.MethodGet, nil, false, ok(500), 9},
		{"502 is neither", http.MethodGet, nil, false, ok(502), 9},
		{"429 is a failure", http.MethodGet, nil, false, ok(429), 8},
		{"429 with Retry-After: 0 is a failure: it names no wait", http.MethodGet, nil, false, ok(429, "Retry-After", "0"), 8},
		{"429 with a RateLimit policy not exhausted is a failure", http.MethodGet, nil, false,
			ok(429, "RateLimit", `"default";r=3;t=1`), 8},
		{"429 with Retry-After is neither: the server paces", http.MethodGet, nil, false, ok(429, "Retry-After", "1"), 9},
		{"429 with an exhausted RateLimit policy is neither", http.MethodGet, nil, false, ok(429, exhausted...), 9},
		{"429 with an absurd Retry-After is neither", http.MethodGet, nil, false, ok(429, "Retry-After", "172800"), 9},
		{"429 with Retry-After to a request that cannot be retried is neither", http.MethodPost, body("x"), false,
			ok(429, "Retry-After", "1"), 9},
		{"503 is a failure", http.MethodGet, nil, false, ok(503), 8},
		{"503 with Retry-After is a failure all the same", http.MethodGet, nil, false, ok(503, "Retry-After", "1"), 8},
		{"503 with an exhausted RateLimit policy is a failure all the same", http.MethodGet, nil, false, ok(503, exhausted...), 8},
		{"503 to a request that cannot be retried is a failure all the same", http.MethodPost, body("x"), false, ok(503), 8},
		{"a broken connection is a failure", http.MethodGet, nil, false, fails(connErr), 8},
		{"another error is neither", http.MethodGet, nil, false, fails(errors.New("unsupported protocol scheme")), 9},
		{"a cancelled request is neither", http.MethodGet, nil, true,
			func(r *http.Request) (*http.Response, error) { return nil, r.Context().Err() }, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &backend{reply: func(i int, r *http.Request) (*http.Response, error) {
				if i == 0 {
					return response(r, http.StatusServiceUnavailable), nil
				}
				return tt.reply(r)
			}}
			tr := newTransport(t, b, &client.Options{MaxAttempts: 1})
			_, err := get(t, tr)
			require.NoError(t, err)
			require.Equal(t, 9.0, tr.RetryTokens())

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancel {
				cancel()
			}
			req, err := http.NewRequestWithContext(ctx, tt.method, "http://api.example/", tt.body)
			require.NoError(t, err)
			if resp, err := tr.RoundTrip(req); err == nil {
				_ = resp.Body.Close()
			}
			assert.Equal(t, 2, b.attempts())
			assert.InDelta(t, tt.want, tr.RetryTokens(), 1e-9)
		})
	}
}

func TestTransportRetryBudgetOptions(t *testing.T) {
	b := &backend{reply: script(503)}
	tr := newTransport(t, b, &client.Options{
		MaxAttempts: 1,
		RetryBudget: &client.RetryBudget{MaxTokens: 100, TokenRatio: 0.5},
	})
	assert.Equal(t, 100.0, tr.RetryTokens())
	for _, want := range []float64{99, 99.5, 100} {
		_, err := get(t, tr)
		require.NoError(t, err)
		assert.Equal(t, want, tr.RetryTokens())
	}
	// Three decimals, as gRFC A6 has it.
	tr = newTransport(t, b, &client.Options{RetryBudget: &client.RetryBudget{TokenRatio: 0.12345}})
	_, err := get(t, tr) // 200: the script is spent
	require.NoError(t, err)
	assert.Equal(t, 10.0, tr.RetryTokens())
}

// TestTransportRetryBudgetDisabled checks the opt-out: every request uses all
// its attempts again, as before the budget.
func TestTransportRetryBudgetDisabled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{reply: func(_ int, r *http.Request) (*http.Response, error) {
			return response(r, http.StatusServiceUnavailable, "Retry-After", "0"), nil
		}}
		tr := newTransport(t, b, &client.Options{DisableRetryBudget: true})
		for range 100 {
			resp, err := get(t, tr)
			require.NoError(t, err)
			require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		}
		assert.Equal(t, 400, b.attempts())
		assert.Equal(t, math.Inf(1), tr.RetryTokens())
	})
}

func TestNewTransportRetryBudgetValidation(t *testing.T) {
	for _, o := range []client.Options{
		{RetryBudget: &client.RetryBudget{MaxTokens: -1}},
		{RetryBudget: &client.RetryBudget{MaxTokens: 1001}},
		{RetryBudget: &client.RetryBudget{TokenRatio: -0.1}},
		{RetryBudget: &client.RetryBudget{TokenRatio: 0.0004}}, // 0 in thousandths
		{RetryBudget: &client.RetryBudget{TokenRatio: math.NaN()}},
		{RetryBudget: &client.RetryBudget{TokenRatio: math.Inf(1)}},
		{RetryBudget: &client.RetryBudget{MaxTokens: 1, TokenRatio: 1.5}},
		{RetryBudget: &client.RetryBudget{}, DisableRetryBudget: true},
	} {
		_, err := client.NewTransport(nil, &o)
		assert.Error(t, err, "NewTransport(%+v)", o)
		if o.RetryBudget != nil {
			assert.True(t, strings.HasPrefix(err.Error(), "client: "), "error %q without the package prefix", err)
		}
	}
	for _, b := range []client.RetryBudget{{MaxTokens: 1000, TokenRatio: 0.001}, {MaxTokens: 1, TokenRatio: 1}} {
		_, err := client.NewTransport(nil, &client.Options{RetryBudget: &b})
		assert.NoError(t, err, "NewTransport(RetryBudget: %+v)", b)
	}
}
