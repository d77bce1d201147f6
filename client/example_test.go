package client_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/client"
)

func ExampleNewTransport() {
	// A server that is overloaded for its first request.
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("RateLimit-Policy", `"default";q=100;w=60`)
		if calls.Add(1) == 1 {
			w.Header().Set("RateLimit", `"default";r=0;t=1`)
			w.Header().Set("Retry-After", "0") // Retry-After takes precedence over t
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("RateLimit", `"default";r=99;t=60`)
		_, _ = io.WriteString(w, "hello")
	}))
	defer srv.Close()

	tr, err := client.NewTransport(http.DefaultTransport, &client.Options{
		BaseDelay: time.Millisecond, // keep the example quick
	})
	if err != nil {
		panic(err)
	}
	c := &http.Client{Transport: tr}
	defer c.CloseIdleConnections()

	resp, err := c.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	st := tr.State()
	fmt.Println(resp.StatusCode, string(body), "after", calls.Load(), "attempts")
	fmt.Println("remaining:", st.Limits[0].Remaining, "of", st.Policies[0].Quota)
	// Output:
	// 200 hello after 2 attempts
	// remaining: 99 of 100
}
