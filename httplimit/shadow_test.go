package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
)

// seenError is what OnError was called with.
type seenError struct {
	key string
	err error
}

// errorLog collects OnError's calls.
type errorLog struct {
	mu   sync.Mutex
	seen []seenError
}

func (l *errorLog) OnError(r *http.Request, key string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, seenError{key, err})
}

func (l *errorLog) calls() []seenError {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]seenError(nil), l.seen...)
}

// TestMiddlewareShadowNeverBlocks: a dry run serves every request it cannot
// decide, reports why to OnError, and sends no rate-limit field for it. On
// the old code it answered as enforcing did: 401, 503 and 500 (the rows
// without OnError fail there on the status). Invalid options are New's
// error in a dry run too (TestNewRefusesConfigurationErrors).
func TestMiddlewareShadowNeverBlocks(t *testing.T) {
	storeDown := fmt.Errorf("%w: dial tcp 10.0.0.1:6379: connect: connection refused", floodgate.ErrUnavailable)
	tests := []struct {
		name string
		lim  *floodgate.Limiter
		opts httplimit.Options
		key  string // the key OnError sees
		want error
	}{
		{"no key", always(allowed42, nil), httplimit.Options{Key: httplimit.KeyByAPIKey("X-API-Key")}, "", httplimit.ErrNoKey},
		{"store down", always(floodgate.Decision{}, storeDown), httplimit.Options{}, "ip:192.0.2.1", floodgate.ErrUnavailable},
		{"store down, composite", failing(freeLimits, storeDown), httplimit.Options{}, "ip:192.0.2.1", floodgate.ErrUnavailable},
		{"context ended", always(floodgate.Decision{}, context.Canceled), httplimit.Options{}, "ip:192.0.2.1", context.Canceled},
		{"invalid cost", newLimiter(t, freeLimits), httplimit.Options{Cost: func(*http.Request) int64 { return 6 }}, "ip:192.0.2.1", floodgate.ErrExceedsLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log errorLog
			opts := tt.opts
			opts.Shadow = true
			opts.OnError = log.OnError
			opts.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
				t.Errorf("ErrorHandler called in shadow mode with %v", err)
			}
			next := &okHandler{}
			rec := do(t, newMW(t, tt.lim, &opts)(next), "192.0.2.1:1234")
			assert.Equal(t, http.StatusOK, rec.Code, "a dry run blocked the request")
			assert.Equal(t, 1, next.served())
			noFields(t, rec)
			calls := log.calls()
			require.Len(t, calls, 1)
			assert.Equal(t, tt.key, calls[0].key)
			assert.ErrorIs(t, calls[0].err, tt.want)
		})
	}
}

// TestMiddlewareOnError: OnError sees what ErrorHandler answers when
// enforcing, too, before it answers.
func TestMiddlewareOnError(t *testing.T) {
	var log errorLog
	var order []string
	storeDown := fmt.Errorf("%w: i/o timeout", floodgate.ErrUnavailable)
	h := newMW(t, always(floodgate.Decision{}, storeDown), &httplimit.Options{
		OnError: func(r *http.Request, key string, err error) {
			order = append(order, "OnError")
			log.OnError(r, key, err)
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			order = append(order, "ErrorHandler")
			w.WriteHeader(http.StatusServiceUnavailable)
		},
	})(&okHandler{})
	rec := do(t, h, "192.0.2.1:1234")
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Equal(t, []string{"OnError", "ErrorHandler"}, order)
	require.Len(t, log.calls(), 1)
	assert.True(t, errors.Is(log.calls()[0].err, floodgate.ErrUnavailable))

	// The default answers are unchanged by it.
	h = newMW(t, always(allowed42, nil), &httplimit.Options{
		Key:     httplimit.KeyByAPIKey("X-API-Key"),
		OnError: log.OnError,
	})(&okHandler{})
	assert.Equal(t, http.StatusUnauthorized, do(t, h, "192.0.2.1:1234").Code)
	assert.ErrorIs(t, log.calls()[1].err, httplimit.ErrNoKey)
}
