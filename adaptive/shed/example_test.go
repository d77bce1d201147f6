package shed_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/adaptive/shed"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/redis/go-redis/v9"
)

func ExampleShedder_Allow() {
	// Any measure of load works: here a queue holding 85 of 100 jobs.
	depth := 85
	s, err := shed.New(shed.GaugeFunc(func() float64 { return float64(depth) / 100 }), nil)
	if err != nil {
		panic(err)
	}
	for _, class := range []string{adaptive.ClassCritical, adaptive.ClassDefault, adaptive.ClassSheddable} {
		d := s.Allow(class)
		fmt.Printf("%s at %.0f%%: allowed %v\n", class, 100*d.Utilization, d.Allowed)
	}
	depth = 97
	fmt.Println("default at 97%: allowed", s.Allow(adaptive.ClassDefault).Allowed)
	// Output:
	// critical at 85%: allowed true
	// default at 85%: allowed true
	// sheddable at 85%: allowed false
	// default at 97%: allowed false
}

func ExampleMiddleware() {
	// The shedder reads the adaptive limiter that the next middleware
	// enforces: here a Fixed limit of 10 with 8 requests in flight.
	limit, _ := adaptive.NewFixed(10)
	l, _ := adaptive.NewLimiter(limit, nil)
	for range 8 {
		_, _ = l.Acquire(context.Background())
	}
	s, _ := shed.New(l, nil)
	// GETs are sheddable, everything else default.
	classOf := func(r *http.Request) string {
		if r.Method == http.MethodGet {
			return adaptive.ClassSheddable
		}
		return adaptive.ClassDefault
	}
	shedMW, _ := shed.Middleware(s, &shed.MiddlewareOptions{Class: classOf})
	// The limiter gets the class too: it admits ClassCritical a little
	// beyond its limit.
	limitMW, _ := adaptive.Middleware(l, &adaptive.MiddlewareOptions{Partition: classOf})
	h := shedMW(limitMW(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintln(w, "ok")
	})))
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, "/charges", nil))
		fmt.Println(method, w.Code, w.Header().Get("Retry-After"))
	}
	// Output:
	// GET 503 1
	// POST 200
}

func ExampleFleet() {
	// Two processes share a fleet through Redis (here an embedded one).
	srv, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	// A generous timeout: the example's result must not depend on an
	// embedded Redis answering within the default 20ms on a loaded
	// machine.
	store, err := redisstore.New(rdb, &redisstore.Options{Timeout: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	defer store.Close()

	// Each process has a limit of 10; process a has 9 requests in flight,
	// process b 6.
	busy := map[string]float64{"a": 9, "b": 6}
	fleets := map[string]*shed.Fleet{}
	for _, id := range []string{"a", "b"} {
		// Each process makes its FleetSource; a process not heard from
		// for 300ms drops out of the sum.
		src, err := store.FleetSource("api", 300*time.Millisecond)
		if err != nil {
			panic(err)
		}
		local := func() shed.Load { return shed.Load{InFlight: busy[id], Capacity: 10} }
		// Manual: the example exchanges by hand; a server leaves it off
		// and the Fleet exchanges every Interval (10ms) until Close.
		f, err := shed.NewFleet(src, local, &shed.FleetOptions{Manual: true})
		if err != nil {
			panic(err)
		}
		defer f.Close()
		fleets[id] = f
	}
	ctx := context.Background()
	fmt.Printf("a alone: %.2f\n", fleets["a"].Utilization())
	for _, id := range []string{"a", "b", "a"} {
		if err := fleets[id].Sync(ctx); err != nil {
			panic(err)
		}
	}
	fmt.Printf("fleet, seen from a: %.2f\n", fleets["a"].Utilization())

	// Sheddable traffic on a is shed only at 80% of the fleet's capacity,
	// though a alone is at 90%.
	s, _ := shed.New(fleets["a"], nil)
	fmt.Println("sheddable on a allowed:", s.Allow(adaptive.ClassSheddable).Allowed)
	busy["a"] = 10 // a's own load counts at once: (10+6)/20
	fmt.Println("after a's next request:", s.Allow(adaptive.ClassSheddable).Allowed)
	// Output:
	// a alone: 0.90
	// fleet, seen from a: 0.75
	// sheddable on a allowed: true
	// after a's next request: false
}
