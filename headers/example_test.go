package headers_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/floodgate-go/floodgate/headers"
)

func ExampleWrite() {
	rep := headers.Report{
		Policy:     headers.Policy{Name: "default", Quota: 100, Window: time.Minute},
		Remaining:  0,
		ResetAfter: 58 * time.Second,
		Denied:     true,
		RetryAfter: 2300 * time.Millisecond, // rounded up: never too early
	}
	h := http.Header{}
	if err := headers.Write(h, headers.StyleIETF, rep, nil); err != nil {
		panic(err)
	}
	for _, k := range []string{"RateLimit-Policy", "RateLimit", "Retry-After"} {
		fmt.Printf("%s: %s\n", k, h.Get(k))
	}
	_ = json.NewEncoder(os.Stdout).Encode(headers.NewErrorBody(rep))
	// Output:
	// RateLimit-Policy: "default";q=100;w=60
	// RateLimit: "default";r=0;t=3
	// Retry-After: 3
	// {"error":{"code":"rate_limit_exceeded","message":"Rate limit exceeded; retry after 3 seconds.","policy":"default","limit":100,"remaining":0,"reset":3,"retry_after":3}}
}

func ExampleWrite_xEpoch() {
	rep := headers.Report{
		Policy:     headers.Policy{Quota: 5000, Window: time.Hour},
		Remaining:  4999,
		ResetAfter: 3599500 * time.Millisecond,
	}
	h := http.Header{}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	opts := &headers.WriteOptions{XReset: headers.ResetEpoch, Now: now}
	if err := headers.Write(h, headers.StyleX, rep, opts); err != nil {
		panic(err)
	}
	fmt.Println(h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"), h.Get("X-RateLimit-Reset"))
	// Output: 5000 4999 1772370000
}

func ExampleParse() {
	h := http.Header{}
	h.Set("Date", "Sun, 01 Mar 2026 12:00:00 GMT")
	h.Add("RateLimit-Policy", `"burst";q=100;w=60, "daily";q=1000;w=86400`)
	h.Add("RateLimit", `"burst";r=0;t=12`)
	h.Add("RateLimit", `daily;r=870`) // a second line, a token name, no t
	h.Set("Retry-After", "Sun, 01 Mar 2026 12:00:15 GMT")

	st, err := headers.Parse(h, nil)
	if err != nil {
		fmt.Println("ignored:", err)
	}
	for _, l := range st.Limits {
		fmt.Printf("%s: %d left, reset in %v\n", l.Name, l.Remaining, l.Reset)
	}
	fmt.Println("wait:", st.Wait()) // Retry-After takes precedence over t
	// Output:
	// burst: 0 left, reset in 12s
	// daily: 870 left, reset in 0s
	// wait: 15s
}

func ExampleParseRetryAfter() {
	date := time.Date(1994, time.November, 6, 8, 49, 37, 0, time.UTC) // the response's Date
	for _, v := range []string{
		"120",
		"Sun, 06 Nov 1994 08:50:07 GMT",
		"Sunday, 06-Nov-94 08:50:07 GMT",
		"Sun Nov  6 08:50:07 1994",
		"Sun, 06 Nov 1994 08:00:00 GMT",
	} {
		d, err := headers.ParseRetryAfter(v, date)
		fmt.Println(d, err)
	}
	// Output:
	// 2m0s <nil>
	// 30s <nil>
	// 30s <nil>
	// 30s <nil>
	// 0s <nil>
}

// Two limits decided one request (a floodgate.Limits): the IETF fields list
// both, the one that bound first; Retry-After and the trios are its.
func ExampleWriteReports() {
	reps := []headers.Report{
		{Policy: headers.Policy{Name: "20-per-1m", Quota: 20, Window: time.Minute}, Denied: true, RetryAfter: 36500 * time.Millisecond},
		{Policy: headers.Policy{Name: "5-per-1s", Quota: 5, Window: time.Second}, Remaining: 4, ResetAfter: 200 * time.Millisecond},
	}
	h := http.Header{}
	if err := headers.WriteReports(h, headers.StyleIETF|headers.StyleX, reps, nil); err != nil {
		panic(err)
	}
	for _, k := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "Retry-After"} {
		fmt.Printf("%s: %s\n", k, h.Get(k))
	}
	// Output:
	// RateLimit-Policy: "20-per-1m";q=20;w=60, "5-per-1s";q=5;w=1
	// RateLimit: "20-per-1m";r=0;t=37, "5-per-1s";r=4;t=1
	// X-RateLimit-Limit: 20
	// X-RateLimit-Remaining: 0
	// Retry-After: 37
}

// A middleware formats its limiter's policies once, at start-up, and
// writes each response's counts with them.
func ExamplePolicySet_WriteReports() {
	perMinute := headers.Policy{Name: "default", Quota: 100, Window: time.Minute}
	set, err := headers.NewPolicySet(perMinute)
	if err != nil {
		panic(err) // a policy that cannot be written: a configuration error
	}
	for _, remaining := range []int64{99, 98} {
		h := http.Header{}
		rep := headers.Report{Policy: perMinute, Remaining: remaining, ResetAfter: 59500 * time.Millisecond}
		if err := set.WriteReports(h, headers.StyleIETF, []headers.Report{rep}, nil); err != nil {
			panic(err)
		}
		fmt.Printf("RateLimit-Policy: %s\nRateLimit: %s\n", h.Get("RateLimit-Policy"), h.Get("RateLimit"))
	}
	// Output:
	// RateLimit-Policy: "default";q=100;w=60
	// RateLimit: "default";r=99;t=60
	// RateLimit-Policy: "default";q=100;w=60
	// RateLimit: "default";r=98;t=60
}
