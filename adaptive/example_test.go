package adaptive_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/floodgate-go/floodgate/adaptive"
)

func ExampleLimiter_Acquire() {
	limit, err := adaptive.NewFixed(2)
	if err != nil {
		panic(err)
	}
	l, err := adaptive.NewLimiter(limit, nil)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	a, _ := l.Acquire(ctx)
	b, _ := l.Acquire(ctx)
	_, err = l.Acquire(ctx)
	fmt.Println("third request rejected:", errors.Is(err, adaptive.ErrLimitExceeded))

	a.Success() // latency becomes a sample for the Limit
	b.Dropped() // timed out: loss-based limits cut the limit
	fmt.Println("in flight:", l.InFlight())
	// Output:
	// third request rejected: true
	// in flight: 0
}

func ExampleNewVegas() {
	// A virtual clock makes the example deterministic.
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	v, err := adaptive.NewVegas(&adaptive.VegasOptions{InitialLimit: 10})
	if err != nil {
		panic(err)
	}
	l, err := adaptive.NewLimiter(v, &adaptive.LimiterOptions{Now: func() time.Time { return now }})
	if err != nil {
		panic(err)
	}
	// serve runs n concurrent requests that each take rtt.
	serve := func(n int, rtt time.Duration) {
		toks := make([]adaptive.Token, n)
		for i := range toks {
			toks[i], _ = l.Acquire(context.Background())
		}
		now = now.Add(rtt)
		for i := range toks {
			toks[i].Success()
		}
	}
	serve(10, 10*time.Millisecond)
	fmt.Println("no queue, limit grows:", l.Limit())
	serve(5, 10*time.Millisecond)
	fmt.Println("less than half used, limit holds:", l.Limit())
	serve(l.Limit(), 40*time.Millisecond)
	fmt.Println("4x the no-load RTT, limit shrinks:", l.Limit())
	// Output:
	// no queue, limit grows: 22
	// less than half used, limit holds: 22
	// 4x the no-load RTT, limit shrinks: 10
}

func ExampleMiddleware() {
	limit, err := adaptive.NewFixed(1)
	if err != nil {
		panic(err)
	}
	l, err := adaptive.NewLimiter(limit, &adaptive.LimiterOptions{
		Partitions: []adaptive.Partition{{Name: "checkout", Share: 1}},
	})
	if err != nil {
		panic(err)
	}
	mw, err := adaptive.Middleware(l, &adaptive.MiddlewareOptions{
		Partition: func(r *http.Request) string { return r.Header.Get("X-Priority") },
	})
	if err != nil {
		panic(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	}))

	// Fill the limit with a request of no partition.
	busy, _ := l.Acquire(context.Background())
	defer busy.Success()

	for _, priority := range []string{"", "checkout"} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("X-Priority", priority)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Printf("%q: %d Retry-After=%q\n", priority, rec.Code, rec.Header().Get("Retry-After"))
	}
	// Output:
	// "": 503 Retry-After="1"
	// "checkout": 200 Retry-After=""
}

func ExampleMiddlewareOptions_outcome() {
	// The handler answers 503 itself when its database is saturated. Counted
	// as Dropped, those answers make AIMD cut its limit.
	limit, err := adaptive.NewAIMD(&adaptive.AIMDOptions{InitialLimit: 10, MinLimit: 1})
	if err != nil {
		panic(err)
	}
	l, err := adaptive.NewLimiter(limit, nil)
	if err != nil {
		panic(err)
	}
	mw, err := adaptive.Middleware(l, &adaptive.MiddlewareOptions{
		Outcome: func(status int, _ *http.Request) adaptive.Outcome {
			switch status {
			case http.StatusServiceUnavailable, http.StatusGatewayTimeout:
				return adaptive.Dropped
			case http.StatusBadRequest, http.StatusNotFound:
				return adaptive.Ignore // fast failures say nothing about capacity
			}
			return adaptive.Success
		},
	})
	if err != nil {
		panic(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "database saturated", http.StatusServiceUnavailable)
	}))
	for range 2 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
		fmt.Println("limit", l.Limit())
	}
	// Output:
	// limit 9
	// limit 8
}
