package httplimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/memstore"
)

func ExampleNew() {
	// A stopped clock keeps the output stable; leave Now unset in real use.
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	store, err := memstore.New(&memstore.Options{Now: func() time.Time { return now }})
	if err != nil {
		panic(err)
	}
	limiter, err := floodgate.New(store, floodgate.FixedWindow{Limit: 2, Window: time.Hour}, nil)
	if err != nil {
		panic(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello\n")
	})
	mw, err := httplimit.New(limiter, nil)
	if err != nil {
		panic(err)
	}
	handler := mw(hello)

	for range 3 {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.RemoteAddr = "192.0.2.1:52000"
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("RateLimit-Policy"), rec.Header().Values("Retry-After"))
	}
	// Output:
	// 200 "default";q=2;w=3600 []
	// 200 "default";q=2;w=3600 []
	// 429 "default";q=2;w=3600 [3600]
}

func ExampleKeyChain() {
	key := httplimit.KeyChain(
		httplimit.KeyByAPIKey("X-API-Key"), // callers with a key: by key
		httplimit.KeyByIP(&httplimit.IPKeyOptions{ // everyone else: by address
			TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		}),
	)
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = "10.1.2.3:40000"                                   // the load balancer
	req.Header.Set("X-Forwarded-For", "6.6.6.6, 203.0.113.9, 10.9.9.9") // forged, client, proxy
	fmt.Println(key(req))

	req.Header.Set("X-API-Key", "k3y")
	fmt.Println(key(req))
	// Output:
	// ip:203.0.113.9 true
	// key:pJsSh4cMEKdvH0ZVKspEMQ true
}

func ExampleNewPlans() {
	// A stopped clock keeps the output stable; leave Now unset in real use.
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	store, err := memstore.New(&memstore.Options{Now: func() time.Time { return now }})
	if err != nil {
		panic(err)
	}
	// Every plan's limiter is built once, at start-up, on one store and
	// under one name, so that a key that changes plans keeps what its
	// token bucket has counted (see NewPlans).
	named := &floodgate.Options{Name: "api"}
	free, err := floodgate.New(store, floodgate.Limits{
		floodgate.TokenBucket{Rate: 2, Per: time.Second, Burst: 2},
		floodgate.SlidingLog{Limit: 20, Window: time.Minute},
	}, named)
	if err != nil {
		panic(err)
	}
	pro, err := floodgate.New(store, floodgate.Limits{
		floodgate.TokenBucket{Rate: 50, Per: time.Second, Burst: 50},
		floodgate.SlidingWindow{Limit: 1000, Window: time.Minute},
	}, named)
	if err != nil {
		panic(err)
	}
	mw, err := httplimit.NewPlans([]httplimit.Plan{
		{Name: "free", Limiter: free},
		{Name: "pro", Limiter: pro, PolicyNames: []string{"pro-burst", "pro-minute"}},
	}, func(r *http.Request) string {
		if strings.HasPrefix(r.Header.Get("X-API-Key"), "pro_") {
			return "pro"
		}
		return "free"
	}, &httplimit.Options{Key: httplimit.KeyByAPIKey("X-API-Key")})
	if err != nil {
		panic(err)
	}
	handler := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	for _, apiKey := range []string{"k1", "k1", "k1", "pro_k2"} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("X-API-Key", apiKey)
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("RateLimit"))
	}
	// Output:
	// 200 "2-per-1s";r=1;t=1, "20-per-1m";r=19;t=60
	// 200 "2-per-1s";r=0;t=1, "20-per-1m";r=18;t=60
	// 429 "2-per-1s";r=0;t=1, "20-per-1m";r=17;t=60
	// 200 "pro-burst";r=49;t=1, "pro-minute";r=999;t=120
}
