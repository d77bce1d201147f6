package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/headers"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/redisstore"
)

// The tests run in a synctest bubble: memstore reads the bubble's virtual
// clock, so waiting Retry-After takes no real time and every count is
// exact.

// newTestHandler is newHandler on a fresh memstore.
func newTestHandler(t *testing.T) http.Handler {
	t.Helper()
	h, closeStore, err := newHandler(config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, closeStore()) })
	return h
}

// get sends GET /api/search with the API key (none when empty).
func get(t *testing.T, h http.Handler, apiKey string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/api/search?q=rate", nil)
	if apiKey != "" {
		req.Header.Set("X-API-Key", apiKey)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	res := rec.Result()
	if res.StatusCode != http.StatusOK {
		// Every error body is JSON or problem details.
		ct := res.Header.Get("Content-Type")
		assert.Contains(t, []string{headers.ContentTypeJSON, headers.ContentTypeProblem}, ct, "Content-Type of a %d", res.StatusCode)
	}
	return res
}

// denial reads a 429: its Retry-After, the first (binding) RateLimit item's
// name, and the JSON body, which names the same policy.
func denial(t *testing.T, res *http.Response) (retryAfter time.Duration, policy string) {
	t.Helper()
	require.Equal(t, http.StatusTooManyRequests, res.StatusCode)
	st, err := headers.Parse(res.Header, nil)
	require.NoError(t, err)
	require.True(t, st.HasRetryAfter, "a 429 without Retry-After")
	require.NotEmpty(t, st.Limits)
	var body headers.ErrorBody
	require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
	assert.Equal(t, headers.ErrorCode, body.Error.Code)
	assert.Equal(t, st.Limits[0].Name, body.Error.Policy, "the body names the binding policy")
	assert.Equal(t, headers.Seconds(st.RetryAfter), body.Error.RetryAfter)
	return st.RetryAfter, st.Limits[0].Name
}

func TestFreeKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		checkFreeKey(t, newTestHandler(t), time.Sleep)
	})
}

// checkFreeKey runs the free plan's bars on h, whose store's clock sleep
// advances.
func checkFreeKey(t *testing.T, h http.Handler, sleep func(time.Duration)) {
	var elapsed time.Duration
	for i := range 5 {
		res := get(t, h, "k1")
		require.Equal(t, http.StatusOK, res.StatusCode, "immediate request %d", i)
		assert.Equal(t, `"free-per-second";q=5;w=1, "free-per-minute";q=20;w=60`, res.Header.Get("RateLimit-Policy"),
			"a 200 lists both policies, the binding one first")
	}
	wait, policy := denial(t, get(t, h, "k1"))
	assert.Equal(t, "free-per-second", policy)
	assert.GreaterOrEqual(t, wait, time.Second)

	// Waiting Retry-After each time, the key is admitted again, as fast as
	// it asks, until 20 units fill the minute.
	admitted := 5
	for {
		sleep(wait)
		elapsed += wait
		res := get(t, h, "k1")
		for ; res.StatusCode == http.StatusOK; res = get(t, h, "k1") {
			admitted++
		}
		wait, policy = denial(t, res)
		if policy == "free-per-minute" {
			break
		}
		assert.Equal(t, "free-per-second", policy)
		assert.GreaterOrEqual(t, wait, time.Second)
		require.Less(t, elapsed, time.Minute, "the per-minute limit never bound")
	}
	assert.Equal(t, 20, admitted, "admitted in the minute")
	// The minute ends when the first 5 leave the log.
	assert.Equal(t, time.Minute, elapsed+wait)

	sleep(wait)
	assert.Equal(t, http.StatusOK, get(t, h, "k1").StatusCode, "Retry-After was enough")
	// Another free key had its own quota all along.
	assert.Equal(t, http.StatusOK, get(t, h, "k2").StatusCode)
}

func TestProKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newTestHandler(t)
		for i := range 50 {
			res := get(t, h, "pro_k1")
			require.Equal(t, http.StatusOK, res.StatusCode, "immediate request %d", i)
			assert.Equal(t, `"pro-per-second";q=50;w=1, "pro-per-minute";q=1000;w=60`, res.Header.Get("RateLimit-Policy"))
		}
		wait, policy := denial(t, get(t, h, "pro_k1"))
		assert.Equal(t, "pro-per-second", policy)
		assert.Equal(t, time.Second, wait, "one token refills in 20ms, rounded up")
	})
}

func TestNoKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newTestHandler(t)
		res := get(t, h, "")
		assert.Equal(t, http.StatusUnauthorized, res.StatusCode)
		assert.Equal(t, headers.ContentTypeJSON, res.Header.Get("Content-Type"))
		assert.Empty(t, res.Header.Get("RateLimit"))
		var body headers.ErrorBody
		require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
		assert.Equal(t, "rate_limit_key_missing", body.Error.Code)
	})
}

// keyLog is a Store that records the keys it is asked about.
type keyLog struct {
	floodgate.Store
	mu   sync.Mutex
	keys []string
}

func (s *keyLog) Bind(name string, alg floodgate.Algorithm) (floodgate.Bound, error) {
	b, err := s.Store.Bind(name, alg)
	return loggedBound{b, s}, err
}

type loggedBound struct {
	floodgate.Bound
	log *keyLog
}

func (b loggedBound) Apply(ctx context.Context, key string, req floodgate.Request, each []floodgate.Decision) (floodgate.Result, error) {
	b.log.mu.Lock()
	b.log.keys = append(b.log.keys, key)
	b.log.mu.Unlock()
	return b.Bound.Apply(ctx, key, req, each)
}

// TestStoreNeverSeesTheAPIKey: the key the store keeps is a digest of the
// credential, not the credential.
func TestStoreNeverSeesTheAPIKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, err := memstore.New(nil)
		require.NoError(t, err)
		store := &keyLog{Store: mem}
		h, _, err := newHandler(config{store: store})
		require.NoError(t, err)
		const secret = "pro_s3cr3t-4p1-k3y"
		require.Equal(t, http.StatusOK, get(t, h, secret).StatusCode)
		require.Len(t, store.keys, 1)
		assert.NotContains(t, store.keys[0], "s3cr3t")
		assert.True(t, strings.HasPrefix(store.keys[0], "key:"), "key %q", store.keys[0])
		assert.Len(t, store.keys[0], len("key:")+22, "key %q: a 128-bit digest", store.keys[0])
	})
}

// TestRetryAfterIsEnough: after any 429, waiting its Retry-After admits the
// same request, on both plans, for a minute of traffic as fast as allowed.
func TestRetryAfterIsEnough(t *testing.T) {
	for _, key := range []string{"k1", "pro_k1"} {
		t.Run(key, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newTestHandler(t)
				start := time.Now()
				for time.Since(start) < 2*time.Minute {
					res := get(t, h, key)
					if res.StatusCode == http.StatusOK {
						continue
					}
					wait, _ := denial(t, res)
					time.Sleep(wait)
					res = get(t, h, key)
					require.Equal(t, http.StatusOK, res.StatusCode, "at %v, after Retry-After %s", time.Since(start), strconv.Itoa(int(wait/time.Second)))
				}
			})
		})
	}
}

// TestRedis runs the free plan's bars on redisstore: the server REDIS_ADDR
// names, or an embedded miniredis, with the store's clock injected. It
// skips while redisstore cannot run a floodgate.Limits.
func TestRedis(t *testing.T) {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = miniredis.RunT(t).Addr()
	}
	client := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = client.Close() })
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	store, err := redisstore.New(client, &redisstore.Options{
		// A prefix of this run's own: the test never clears a server it
		// did not start.
		Prefix: fmt.Sprintf("plans-test-%d:", time.Now().UnixNano()),
		// The plans' answers are the subject, not Redis' latency: a
		// loaded CI machine must not turn a 429 into a 503.
		Timeout: time.Second,
		Now: func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return now
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	h, _, err := newHandler(config{store: store})
	if errors.Is(err, floodgate.ErrInvalidConfig) {
		t.Skipf("redisstore does not run a floodgate.Limits yet: %v", err)
	}
	require.NoError(t, err)
	checkFreeKey(t, h, func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(d)
	})
}
