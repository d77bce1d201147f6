package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/client"
	"github.com/floodgate-go/floodgate/headers"
	"github.com/floodgate-go/floodgate/memstore"
)

// backend is a scripted base transport: reply(i) answers attempt i (from 0).
// It records when each attempt arrived and the body it carried.
type backend struct {
	mu     sync.Mutex
	reply  func(i int, r *http.Request) (*http.Response, error)
	at     []time.Time
	bodies []string
}

func (b *backend) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		_ = r.Body.Close()
	}
	b.mu.Lock()
	i := len(b.at)
	b.at = append(b.at, time.Now())
	b.bodies = append(b.bodies, string(body))
	b.mu.Unlock()
	return b.reply(i, r)
}

func (b *backend) attempts() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.at)
}

// gaps returns the time between consecutive attempts.
func (b *backend) gaps() []time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	var g []time.Duration
	for i := 1; i < len(b.at); i++ {
		g = append(g, b.at[i].Sub(b.at[i-1]))
	}
	return g
}

func response(r *http.Request, status int, kv ...string) *http.Response {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return &http.Response{
		StatusCode: status, Status: http.StatusText(status), Header: h, Request: r,
		Body: io.NopCloser(strings.NewReader(fmt.Sprintf("status %d", status))),
	}
}

// script answers with the given statuses in turn, then 200.
func script(statuses ...int) func(int, *http.Request) (*http.Response, error) {
	return func(i int, r *http.Request) (*http.Response, error) {
		if i < len(statuses) {
			return response(r, statuses[i]), nil
		}
		return response(r, http.StatusOK), nil
	}
}

func newTransport(t *testing.T, b http.RoundTripper, o *client.Options) *client.Transport {
	t.Helper()
	if o == nil {
		o = &client.Options{}
	}
	if o.Rand == nil {
		o.Rand = rand.New(rand.NewPCG(1, 2))
	}
	tr, err := client.NewTransport(b, o)
	require.NoError(t, err)
	return tr
}

func get(t *testing.T, tr http.RoundTripper) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://api.example/items", nil)
	require.NoError(t, err)
	return tr.RoundTrip(req)
}

func TestTransportRetriesThrottledResponses(t *testing.T) {
	for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := &backend{reply: script(status, status)}
				resp, err := get(t, newTransport(t, b, nil))
				require.NoError(t, err)
				assert.Equal(t, http.StatusOK, resp.StatusCode)
				assert.Equal(t, 3, b.attempts())
				for i, g := range b.gaps() {
					c := 100 * time.Millisecond << i
					assert.True(t, g >= 0 && g < c, "wait before retry %d = %v, want within [0, %v)", i, g, c)
				}
			})
		})
	}
}

func TestTransportGivesUpAfterMaxAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{reply: script(503, 503, 503, 503, 503)}
		resp, err := get(t, newTransport(t, b, &client.Options{MaxAttempts: 3}))
		require.NoError(t, err)
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		body, _ := io.ReadAll(resp.Body)
		assert.Equal(t, "status 503", string(body), "the last response reaches the caller intact")
		assert.Equal(t, 3, b.attempts())
	})
}

func TestTransportDoesNotRetryOtherStatuses(t *testing.T) {
	for _, status := range []int{200, 400, 404, 500, 502} {
		b := &backend{reply: script(status)}
		resp, err := get(t, newTransport(t, b, nil))
		require.NoError(t, err)
		assert.Equal(t, status, resp.StatusCode)
		assert.Equal(t, 1, b.attempts(), "status %d retried", status)
	}
}

// TestTransportRetryAfterDominates checks that every retry happens at or
// after the instant the server asked for, over many seeds, and that
// Retry-After takes precedence over the RateLimit t parameter. The jitter on
// top of a server's wait h is U(0, max(100ms, 500ms, h/10)) before the first
// retry, so a retry after h comes before h + 500ms (h + 600ms for h = 6s).
func TestTransportRetryAfterDominates(t *testing.T) {
	tests := []struct {
		name    string
		kv      []string
		atLeast time.Duration
		before  time.Duration // the retry comes before this (Retry-After wins over t)
	}{
		{"delta seconds", []string{"Retry-After", "3"}, 3 * time.Second, 3*time.Second + 500*time.Millisecond},
		{"HTTP-date from the response's Date", []string{
			"Date", "Sun, 01 Mar 2026 12:00:00 GMT", "Retry-After", "Sun, 01 Mar 2026 12:00:05 GMT",
		}, 5 * time.Second, 5*time.Second + 500*time.Millisecond},
		{"RateLimit t when there is no Retry-After", []string{"RateLimit", `"default";r=0;t=4`}, 4 * time.Second, 4*time.Second + 500*time.Millisecond},
		{"Retry-After wins over a longer t", []string{"Retry-After", "1", "RateLimit", `"default";r=0;t=10`}, time.Second, time.Second + 500*time.Millisecond},
		{"Retry-After wins over a shorter t", []string{"Retry-After", "6", "RateLimit", `"default";r=0;t=1`}, 6 * time.Second, 6*time.Second + 600*time.Millisecond},
		{"t of a policy with quota left is no reason to wait", []string{"RateLimit", `"default";r=5;t=30`}, 0, 100 * time.Millisecond},
		{"malformed Retry-After falls back to t", []string{"Retry-After", "soon", "RateLimit", `"default";r=0;t=2`}, 2 * time.Second, 2*time.Second + 500*time.Millisecond},
		{"Retry-After: 0 is the plain backoff", []string{"Retry-After", "0"}, 0, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for seed := range uint64(50) {
				synctest.Test(t, func(t *testing.T) {
					// The Date above is 2026-03-01T12:00:00Z: align the
					// bubble's clock with it.
					time.Sleep(time.Until(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)))
					b := &backend{reply: func(i int, r *http.Request) (*http.Response, error) {
						if i == 0 {
							return response(r, http.StatusTooManyRequests, tt.kv...), nil
						}
						return response(r, http.StatusOK), nil
					}}
					tr := newTransport(t, b, &client.Options{Rand: rand.New(rand.NewPCG(seed, 99))})
					resp, err := get(t, tr)
					require.NoError(t, err)
					require.Equal(t, http.StatusOK, resp.StatusCode)
					g := b.gaps()
					require.Len(t, g, 1)
					assert.GreaterOrEqual(t, g[0], tt.atLeast, "seed %d: retried before the server's time", seed)
					assert.Less(t, g[0], tt.before, "seed %d: waited too long", seed)
				})
			}
		})
	}
}

// TestTransportRetryAfterSpreadsClients is the lockstep of issue 14: clients
// refused at the same instant with Retry-After: 1 used to all retry at
// +1.000s. Now none retries before +1s and they do not retry together.
func TestTransportRetryAfterSpreadsClients(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const clients = 8
		start := time.Now()
		b := &backend{reply: func(_ int, r *http.Request) (*http.Response, error) {
			if time.Since(start) == 0 {
				return response(r, http.StatusServiceUnavailable, "Retry-After", "1"), nil
			}
			return response(r, http.StatusOK), nil
		}}
		var wg sync.WaitGroup
		for i := range clients {
			// One Transport per client, as separate processes have.
			tr := newTransport(t, b, &client.Options{Rand: rand.New(rand.NewPCG(uint64(i), 42))})
			wg.Go(func() {
				resp, err := get(t, tr)
				if assert.NoError(t, err) {
					assert.Equal(t, http.StatusOK, resp.StatusCode)
				}
			})
		}
		wg.Wait()
		require.Equal(t, 2*clients, b.attempts())
		retries := make(map[time.Duration]bool)
		for _, at := range b.at[clients:] {
			d := at.Sub(start)
			assert.GreaterOrEqual(t, d, time.Second, "retried before Retry-After")
			assert.Less(t, d, 1500*time.Millisecond, "retried after the spread")
			retries[d] = true
		}
		assert.Len(t, retries, clients, "retry instants of %d clients told Retry-After: 1", clients)
	})
}

// TestTransportTrimsJitterToMaxWait checks that the jitter never costs a
// retry the server's own wait fits: Retry-After: 30 under the default
// MaxWait of 30s is retried after exactly 30s.
func TestTransportTrimsJitterToMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{reply: func(i int, r *http.Request) (*http.Response, error) {
			if i == 0 {
				return response(r, http.StatusTooManyRequests, "Retry-After", "30"), nil
			}
			return response(r, http.StatusOK), nil
		}}
		resp, err := get(t, newTransport(t, b, nil))
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, []time.Duration{30 * time.Second}, b.gaps())
	})
}

func TestTransportStopsAtBudgets(t *testing.T) {
	tests := []struct {
		name    string
		opts    client.Options
		timeout time.Duration
		kv      []string
	}{
		{"Retry-After beyond MaxWait", client.Options{MaxWait: 5 * time.Second}, 0, []string{"Retry-After", "10"}},
		{"Retry-After beyond the deadline", client.Options{}, 2 * time.Second, []string{"Retry-After", "3"}},
		{"t beyond the deadline", client.Options{}, 2 * time.Second, []string{"RateLimit", `"default";r=0;t=3`}},
		{"absurd Retry-After", client.Options{MaxWait: 1000 * time.Hour}, 0, []string{"Retry-After", "172800"}},
		{"absurd Retry-After date", client.Options{MaxWait: 1000 * time.Hour}, 0, []string{"Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := &backend{reply: func(_ int, r *http.Request) (*http.Response, error) {
					return response(r, http.StatusTooManyRequests, tt.kv...), nil
				}}
				ctx := context.Background()
				if tt.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.timeout)
					defer cancel()
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.example/", nil)
				start := time.Now()
				resp, err := newTransport(t, b, &tt.opts).RoundTrip(req)
				require.NoError(t, err)
				assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the caller gets the last response")
				assert.Equal(t, 1, b.attempts())
				assert.Equal(t, time.Duration(0), time.Since(start), "waited for a retry it would not make")
			})
		})
	}
}

func TestTransportTotalWaitCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{reply: func(_ int, r *http.Request) (*http.Response, error) {
			return response(r, http.StatusServiceUnavailable, "Retry-After", "2"), nil
		}}
		start := time.Now()
		resp, err := get(t, newTransport(t, b, &client.Options{MaxAttempts: 10, MaxWait: 5 * time.Second}))
		require.NoError(t, err)
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		assert.Equal(t, 3, b.attempts(), "2s + 2s fit in 5s, a third wait does not")
		assert.LessOrEqual(t, time.Since(start), 5*time.Second)
	})
}

func TestTransportContextCancelledDuringWait(t *testing.T) {
	defer goleak.VerifyNone(t)
	synctest.Test(t, func(t *testing.T) {
		b := &backend{reply: script(429)}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Second, cancel)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.example/", nil)
		b.reply = func(i int, r *http.Request) (*http.Response, error) {
			return response(r, 429, "Retry-After", "5"), nil
		}
		resp, err := newTransport(t, b, nil).RoundTrip(req)
		assert.Nil(t, resp)
		assert.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, 1, b.attempts())
	})
}

// body returns a request body that cannot be rewound (no GetBody).
func body(s string) io.Reader { return io.MultiReader(strings.NewReader(s)) }

func TestTransportReplaysOnlyWhatItCan(t *testing.T) {
	connErr := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	tests := []struct {
		name     string
		method   string
		body     io.Reader
		header   []string
		fail     func(r *http.Request) (*http.Response, error)
		attempts int
	}{
		{"POST without GetBody, 429", http.MethodPost, body("x"), nil, tooMany, 1},
		{"POST without body, 429", http.MethodPost, nil, nil, tooMany, 1},
		{"PATCH without GetBody, 503", http.MethodPatch, body("x"), nil, unavailable, 1},
		{"PUT without GetBody, 429: idempotent but not replayable", http.MethodPut, body("x"), nil, tooMany, 1},
		{"POST with GetBody, 429", http.MethodPost, strings.NewReader("x"), nil, tooMany, 2},
		{"PUT with GetBody, 429", http.MethodPut, bytes.NewReader([]byte("x")), nil, tooMany, 2},
		{"DELETE without body, 503", http.MethodDelete, nil, nil, unavailable, 2},
		{"GET, connection reset", http.MethodGet, nil, nil, fails(connErr), 2},
		{"GET, EOF", http.MethodGet, nil, nil, fails(io.EOF), 2},
		{"POST with GetBody, connection reset: may have been processed", http.MethodPost, strings.NewReader("x"), nil, fails(connErr), 1},
		{"POST with GetBody and Idempotency-Key, connection reset", http.MethodPost, strings.NewReader("x"),
			[]string{"Idempotency-Key", "8e03978e"}, fails(connErr), 2},
		{"GET, not a connection error", http.MethodGet, nil, nil, fails(errors.New("unsupported protocol scheme")), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := &backend{reply: func(i int, r *http.Request) (*http.Response, error) {
					if i == 0 {
						return tt.fail(r)
					}
					return response(r, http.StatusOK), nil
				}}
				req, err := http.NewRequest(tt.method, "http://api.example/", tt.body)
				require.NoError(t, err)
				for i := 0; i+1 < len(tt.header); i += 2 {
					req.Header.Set(tt.header[i], tt.header[i+1])
				}
				_, _ = newTransport(t, b, nil).RoundTrip(req)
				assert.Equal(t, tt.attempts, b.attempts())
				if tt.attempts == 2 && tt.body != nil {
					assert.Equal(t, []string{"x", "x"}, b.bodies, "the retry did not resend the body")
				}
			})
		})
	}
}

func tooMany(r *http.Request) (*http.Response, error) { return response(r, 429), nil }

func unavailable(r *http.Request) (*http.Response, error) { return response(r, 503), nil }

func fails(err error) func(*http.Request) (*http.Response, error) {
	return func(*http.Request) (*http.Response, error) { return nil, err }
}

func TestTransportDoesNotModifyTheRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &backend{reply: script(429)}
		req, _ := http.NewRequest(http.MethodPost, "http://api.example/", strings.NewReader("payload"))
		req.Header.Set("X-Trace", "1")
		before := req.Header.Clone()
		_, err := newTransport(t, b, nil).RoundTrip(req)
		require.NoError(t, err)
		assert.Equal(t, before, req.Header)
		assert.Equal(t, []string{"payload", "payload"}, b.bodies)
	})
}

func TestTransportWaitsOnTheLimiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, err := memstore.New(nil)
		require.NoError(t, err)
		lim, err := floodgate.New(store, floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 1}, nil)
		require.NoError(t, err)
		b := &backend{reply: script()}
		tr := newTransport(t, b, &client.Options{Limiter: lim})
		for range 4 {
			_, err := get(t, tr)
			require.NoError(t, err)
		}
		assert.Equal(t, []time.Duration{time.Second, time.Second, time.Second}, b.gaps())

		// The limiter's errors reach the caller, and nothing is sent.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.example/", nil)
		_, err = tr.RoundTrip(req)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 4, b.attempts())
	})
}

func TestTransportState(t *testing.T) {
	b := &backend{reply: func(_ int, r *http.Request) (*http.Response, error) {
		return response(r, http.StatusOK,
			"RateLimit-Policy", `"default";q=100;w=60`,
			"RateLimit", `"default";r=41;t=17`), nil
	}}
	tr := newTransport(t, b, nil)
	assert.Equal(t, headers.State{}, tr.State())
	_, err := get(t, tr)
	require.NoError(t, err)
	st := tr.State()
	assert.Equal(t, headers.StyleIETF, st.Styles)
	assert.Equal(t, []headers.Limit{{Name: "default", Remaining: 41, Reset: 17 * time.Second}}, st.Limits)
	assert.Equal(t, []headers.Policy{{Name: "default", Quota: 100, Window: time.Minute}}, st.Policies)
}

func TestNewTransportValidation(t *testing.T) {
	for _, o := range []client.Options{
		{MaxAttempts: -1},
		{BaseDelay: -time.Second},
		{BaseDelay: time.Minute, MaxDelay: time.Second},
		{MaxWait: -time.Second},
		{Throttle: &client.ThrottleOptions{K: 0.5}},
	} {
		_, err := client.NewTransport(nil, &o)
		assert.Error(t, err, "NewTransport(%+v)", o)
	}
	tr, err := client.NewTransport(nil, nil)
	require.NoError(t, err)
	assert.Equal(t, 0.0, tr.RejectProbability())
}

// TestThrottlingConverges runs adaptive throttling against a backend that
// accepts at most a fraction a of the offered load each second and rejects
// the rest with 429: the share of requests rejected locally must settle at
// max(0, 1 − 2a) for K = 2, within 0.05.
func TestThrottlingConverges(t *testing.T) {
	for _, a := range []float64{0.1, 0.25, 0.4, 0.5, 0.7} {
		t.Run(fmt.Sprintf("a=%.2f", a), func(t *testing.T) {
			const rate = 50 // requests per second offered
			capacity := int(a * rate)
			now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
			var second int64
			var acceptedThisSecond int
			b := &backend{reply: func(_ int, r *http.Request) (*http.Response, error) {
				if s := now.Unix(); s != second {
					second, acceptedThisSecond = s, 0
				}
				if acceptedThisSecond < capacity {
					acceptedThisSecond++
					return response(r, http.StatusOK), nil
				}
				return response(r, http.StatusTooManyRequests), nil
			}}
			tr := newTransport(t, b, &client.Options{
				MaxAttempts: 1,
				Throttle:    &client.ThrottleOptions{},
				Now:         func() time.Time { return now },
				Rand:        rand.New(rand.NewPCG(3, 4)),
			})
			var offered, rejected int
			for i := range 6 * 60 * rate { // six minutes: three to settle, three to measure
				_, err := get(t, tr)
				if i >= 3*60*rate {
					offered++
					if err != nil {
						require.ErrorIs(t, err, client.ErrThrottled)
						var te *client.ThrottledError
						require.ErrorAs(t, err, &te)
						rejected++
					}
				}
				now = now.Add(time.Second / rate)
			}
			want := max(0, 1-2*a)
			got := float64(rejected) / float64(offered)
			assert.InDelta(t, want, got, 0.05, "locally rejected share %.3f, want %.3f", got, want)
			assert.InDelta(t, want, tr.RejectProbability(), 0.05)
		})
	}
}

func TestThrottledErrorThroughHTTPClient(t *testing.T) {
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	b := &backend{reply: script(429, 429, 429, 429, 429, 429, 429, 429, 429, 429)}
	tr := newTransport(t, b, &client.Options{
		MaxAttempts: 1, Throttle: &client.ThrottleOptions{K: 1},
		Now: func() time.Time { return now }, Rand: rand.New(rand.NewPCG(5, 6)),
	})
	c := &http.Client{Transport: tr}
	var err error
	for range 10 {
		var resp *http.Response
		resp, err = c.Get("http://api.example/")
		if err != nil {
			break
		}
		_ = resp.Body.Close()
	}
	require.Error(t, err, "ten straight rejections and no local throttling")
	assert.ErrorIs(t, err, client.ErrThrottled)
	assert.Contains(t, err.Error(), "throttled locally")
}
