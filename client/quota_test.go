package client_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/client"
	"github.com/floodgate-go/floodgate/headers"
	"github.com/floodgate-go/floodgate/memstore"
)

// quotaServer is an API limited by a quota, as issue 23 measured the client
// against: every request decides on a floodgate token bucket under one key
// (all callers share the quota), every answer carries the IETF RateLimit
// fields, and a refusal is a 429 with Retry-After. It counts the attempts
// it receives.
type quotaServer struct {
	lim      *floodgate.Limiter
	attempts atomic.Int64
}

func newQuotaServer(t *testing.T, alg floodgate.TokenBucket) *quotaServer {
	t.Helper()
	store, err := memstore.New(nil)
	require.NoError(t, err)
	lim, err := floodgate.New(store, alg, nil)
	require.NoError(t, err)
	return &quotaServer{lim: lim}
}

func (s *quotaServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.attempts.Add(1)
	d, err := s.lim.Allow(r.Context(), "client")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	pol := s.lim.Policy()
	rep := headers.Report{
		Policy:    headers.Policy{Name: "default", Quota: pol.Quota, Window: pol.Window},
		Remaining: d.Remaining, ResetAfter: d.ResetAfter,
		Denied: !d.Allowed, RetryAfter: d.RetryAfter,
	}
	if err := headers.Write(w.Header(), headers.StyleIETF, rep, nil); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if !d.Allowed {
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	_, _ = io.WriteString(w, "ok")
}

// inMemory serves requests with a handler directly, without a network, so
// that server and client run on synctest's virtual clock.
type inMemory struct{ h http.Handler }

func (m inMemory) RoundTrip(r *http.Request) (*http.Response, error) {
	req := r.Clone(r.Context())
	req.RequestURI = r.URL.RequestURI()
	rec := httptest.NewRecorder()
	m.h.ServeHTTP(rec, req)
	if r.Body != nil {
		_ = r.Body.Close()
	}
	resp := rec.Result()
	resp.Request = r
	return resp, nil
}

// fanOut sends n GET requests to url through c at once and returns how many
// came back with each status.
func fanOut(t *testing.T, c *http.Client, url string, n int) map[int]int {
	t.Helper()
	var mu sync.Mutex
	statuses := make(map[int]int)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := c.Get(url)
			if !assert.NoError(t, err, "request %d", i) {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			mu.Lock()
			statuses[resp.StatusCode]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return statuses
}

// TestDefaultTransportQuotaServer is the measurement of issue 23: 20
// requests sent at once through a default Transport to a server whose quota
// is a token bucket of 5 per second with a burst of 5. The server answers
// the 15 it cannot serve yet with 429, Retry-After: 1 and an exhausted
// RateLimit policy; retried no sooner than that, every one of them is served
// within three rounds, well inside the default caps (4 attempts, 30s of
// waiting). The default retry budget used to hand most of them back: 15
// refusals at once drained its 10 tokens, and only the 4 that left more
// than 5 were retried. Server and client run on synctest's clock; the
// seeds vary the jitter.
func TestDefaultTransportQuotaServer(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := newQuotaServer(t, floodgate.TokenBucket{Rate: 5, Per: time.Second, Burst: 5})
				tr, err := client.NewTransport(inMemory{srv}, &client.Options{Rand: rand.New(rand.NewPCG(seed, 23))})
				require.NoError(t, err)
				start := time.Now()
				statuses := fanOut(t, &http.Client{Transport: tr}, "http://api.example/items", 20)
				assert.Equal(t, map[int]int{http.StatusOK: 20}, statuses,
					"statuses of 20 requests (%d attempts)", srv.attempts.Load())
				assert.LessOrEqual(t, srv.attempts.Load(), int64(20*4), "attempts")
				assert.LessOrEqual(t, time.Since(start), 4*30*time.Second, "time")
				assert.Equal(t, 10.0, tr.RetryTokens(), "a paced 429 costs no retry token")
			})
		})
	}
}

// TestDefaultTransportQuotaServerNetwork is TestDefaultTransportQuotaServer
// over a real connection and the real clock, with a quota of 10 per second
// and a burst of 10, so that the 10 refused requests are all served on
// their first retry, a second or so later. It asserts counts only: a loaded
// machine slows the requests down, which leaves the quota more time to
// refill, never less.
func TestDefaultTransportQuotaServerNetwork(t *testing.T) {
	srv := newQuotaServer(t, floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	tr, err := client.NewTransport(ts.Client().Transport, nil)
	require.NoError(t, err)
	c := &http.Client{Transport: tr}
	defer c.CloseIdleConnections()

	statuses := fanOut(t, c, ts.URL, 20)
	assert.Equal(t, map[int]int{http.StatusOK: 20}, statuses,
		"statuses of 20 requests (%d attempts)", srv.attempts.Load())
	assert.LessOrEqual(t, srv.attempts.Load(), int64(20*4), "attempts")
}

// TestDefaultTransportFailingServerBudget is the other side of the quota
// tests: a server failing with 503 still drains the retry budget, Retry-After
// and an exhausted RateLimit policy notwithstanding. 20 requests at once make
// at most 24 attempts (the first four refusals leave more than 5 of the 10
// tokens, the others do not), where the quota server's 429s were all retried.
// The waits are recorded instead of slept.
func TestDefaultTransportFailingServerBudget(t *testing.T) {
	var attempts atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempts.Add(1)
		w.Header().Set("RateLimit-Policy", `"default";q=5;w=1`)
		w.Header().Set("RateLimit", `"default";r=0;t=1`)
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer ts.Close()
	tr, err := client.NewTransport(ts.Client().Transport, nil)
	require.NoError(t, err)
	var waits atomic.Int64
	client.SetSleep(tr, func(ctx context.Context, d time.Duration) error {
		waits.Add(1)
		return ctx.Err()
	})
	c := &http.Client{Transport: tr}
	defer c.CloseIdleConnections()

	statuses := fanOut(t, c, ts.URL, 20)
	assert.Equal(t, map[int]int{http.StatusServiceUnavailable: 20}, statuses)
	n := attempts.Load()
	assert.GreaterOrEqual(t, n, int64(21), "the first failure is retried")
	assert.LessOrEqual(t, n, int64(24), "attempts of 20 requests to a failing server")
	assert.Equal(t, n-20, waits.Load(), "waits, one per retry")
	assert.Equal(t, 0.0, tr.RetryTokens())
}

// TestTransportPacedRetryNeedsNoBudget drains the retry budget with 503s,
// then checks that a 429 naming a wait is still retried, at the time it
// named, while a 503 naming the same wait is not.
func TestTransportPacedRetryNeedsNoBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var refuse atomic.Int64 // the status of every attempt, or of the next one for 429; 0: answer 200
		b := &backend{reply: func(_ int, r *http.Request) (*http.Response, error) {
			s := int(refuse.Load())
			if s == http.StatusTooManyRequests {
				refuse.Store(0)
			}
			if s != 0 {
				return response(r, s, "Retry-After", "1"), nil
			}
			return response(r, http.StatusOK), nil
		}}
		tr := newTransport(t, b, nil)

		// An outage: the first request uses all 4 attempts (10 → 6), the
		// next three none of their retries (→ 3).
		refuse.Store(http.StatusServiceUnavailable)
		for i, want := range []int{4, 1, 1, 1} {
			before := b.attempts()
			resp, err := get(t, tr)
			require.NoError(t, err)
			assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
			assert.Equal(t, want, b.attempts()-before, "attempts of request %d in the outage", i)
		}
		require.Equal(t, 3.0, tr.RetryTokens())

		// The server now paces instead: one 429 with Retry-After: 1, then 200.
		refuse.Store(http.StatusTooManyRequests)
		before := b.attempts()
		start := time.Now()
		resp, err := get(t, tr)
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode, "a paced 429 not retried on a drained budget")
		assert.Equal(t, 2, b.attempts()-before)
		assert.GreaterOrEqual(t, time.Since(start), time.Second, "retried before Retry-After")
		assert.InDelta(t, 3.1, tr.RetryTokens(), 1e-9, "the 429 costs nothing, the success earns 0.1")
	})
}

// TestTransportQuotaServerRefusingForever checks the bound on paced retries:
// a server that answers 429 with Retry-After to everything gets at most
// MaxAttempts attempts per request, each at least the named wait after the
// last, and no request waits beyond MaxWait.
func TestTransportQuotaServerRefusingForever(t *testing.T) {
	tests := []struct {
		retryAfter string
		attempts   int // per request, with the default MaxAttempts 4 and MaxWait 30s
	}{
		{"1", 4},
		{"9", 4},  // 9s + 9s + 9s and their jitter, trimmed, fit in 30s
		{"12", 3}, // a third wait of 12s does not fit
		{"20", 2}, // 20s, then a second 20s does not fit
		{"31", 1}, // beyond MaxWait: answered at once
		{"0", 0},  // names no wait: the budget decides (below)
		{"", 4},   // no Retry-After, an exhausted RateLimit policy: paced
		{"x", 4},  // malformed Retry-After: the RateLimit policy decides
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("Retry-After=%q", tt.retryAfter), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const requests = 20
				var attempts atomic.Int64
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					attempts.Add(1)
					w.Header().Set("RateLimit-Policy", `"default";q=5;w=1`)
					w.Header().Set("RateLimit", `"default";r=0;t=1`)
					if tt.retryAfter != "" {
						w.Header().Set("Retry-After", tt.retryAfter)
					}
					w.WriteHeader(http.StatusTooManyRequests)
				})
				tr, err := client.NewTransport(inMemory{h}, &client.Options{Rand: rand.New(rand.NewPCG(23, 429))})
				require.NoError(t, err)
				start := time.Now()
				statuses := fanOut(t, &http.Client{Transport: tr}, "http://api.example/items", requests)
				assert.Equal(t, map[int]int{http.StatusTooManyRequests: requests}, statuses)
				assert.LessOrEqual(t, time.Since(start), 30*time.Second, "a request waited beyond MaxWait")
				if tt.retryAfter == "0" {
					// Retry-After: 0 names no wait, so it spends the budget
					// like a 503: 20 requests at once make 21 to 24 attempts.
					assert.GreaterOrEqual(t, attempts.Load(), int64(requests+1))
					assert.LessOrEqual(t, attempts.Load(), int64(requests+4))
					return
				}
				assert.Equal(t, int64(requests*tt.attempts), attempts.Load(), "attempts of %d requests", requests)
				assert.Equal(t, 10.0, tr.RetryTokens(), "paced 429s cost no retry token")
				if tt.attempts > 1 {
					wait := time.Second
					if tt.retryAfter != "" && tt.retryAfter != "x" {
						n, _ := time.ParseDuration(tt.retryAfter + "s")
						wait = n
					}
					assert.GreaterOrEqual(t, time.Since(start), time.Duration(tt.attempts-1)*wait,
						"retried before the named wait")
				}
			})
		})
	}
}
