// Command httpclient calls a rate-limited API through client.Transport, in
// two rounds:
//
//  1. without a client-side limit: the server's quota runs out, and the
//     Transport retries each 429 no sooner than its Retry-After (a 429
//     that names a wait is the server pacing the client, so these retries
//     do not spend the Transport's retry budget, which guards against
//     failing servers);
//  2. with a client-side floodgate limiter matching the server's policy: the
//     client paces itself and the server never has to refuse.
//
// By default it starts its own server in-process (a burst of 3, then one
// request per second per client, behind httplimit.New); -url points it
// at another, such as examples/httpserver:
//
//	go run ./examples/httpclient
//	go run ./examples/httpclient -url http://localhost:8080/api/hello -rate 0.1666
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/client"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/memstore"
)

func main() {
	url := flag.String("url", "", "endpoint to call; empty starts a demo server in-process")
	n := flag.Int("n", 6, "requests per round")
	rate := flag.Float64("rate", 1, "client-side limit of round 2, in requests per second")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	target := *url
	if target == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		h, err := demoServer()
		if err != nil {
			log.Fatal(err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		target = "http://" + ln.Addr().String() + "/api/hello"
	}
	if err := run(ctx, os.Stdout, http.DefaultTransport, target, *n, *rate); err != nil {
		log.Fatal(err)
	}
}

// demoServer is the API the client calls by default: a burst of 3, then one
// request per second, per client address.
func demoServer() (http.Handler, error) {
	store, err := memstore.New(nil)
	if err != nil {
		return nil, err
	}
	lim, err := floodgate.New(store, floodgate.TokenBucket{Rate: 1, Per: time.Second, Burst: 3}, nil)
	if err != nil {
		return nil, err
	}
	mw, err := httplimit.New(lim, nil)
	if err != nil {
		return nil, err
	}
	return mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello\n")
	})), nil
}

// counter counts the attempts that reach the base transport.
type counter struct {
	base http.RoundTripper
	n    atomic.Int64
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.base.RoundTrip(r)
}

// run makes the two rounds of n requests against target through base.
func run(ctx context.Context, out io.Writer, base http.RoundTripper, target string, n int, rate float64) error {
	attempts := &counter{base: base}

	fmt.Fprintln(out, "round 1: no client-side limit; the Transport retries 429s after Retry-After")
	tr, err := client.NewTransport(attempts, &client.Options{MaxAttempts: 5, MaxWait: time.Minute})
	if err != nil {
		return err
	}
	if err := round(ctx, out, tr, attempts, target, n); err != nil {
		return err
	}

	// Let the server's quota refill before the second round.
	if st := tr.State(); len(st.Limits) > 0 {
		if err := sleep(ctx, st.Limits[0].Reset); err != nil {
			return err
		}
	}

	fmt.Fprintf(out, "round 2: the client limits itself to %g request(s) per second\n", rate)
	self, err := selfLimiter(rate)
	if err != nil {
		return err
	}
	tr, err = client.NewTransport(attempts, &client.Options{Limiter: self, MaxAttempts: 5, MaxWait: time.Minute})
	if err != nil {
		return err
	}
	return round(ctx, out, tr, attempts, target, n)
}

// selfLimiter returns a client-side limiter of rate requests per second with
// a burst of 1, so that the requests are spread out evenly.
func selfLimiter(rate float64) (*floodgate.Limiter, error) {
	if !(rate > 0) || rate > 1e6 {
		return nil, fmt.Errorf("-rate %v: want a positive rate", rate)
	}
	store, err := memstore.New(nil)
	if err != nil {
		return nil, err
	}
	per := time.Duration(math.Round(float64(time.Second) / rate))
	return floodgate.New(store, floodgate.TokenBucket{Rate: 1, Per: per, Burst: 1}, nil)
}

func round(ctx context.Context, out io.Writer, tr *client.Transport, attempts *counter, target string, n int) error {
	c := &http.Client{Transport: tr}
	defer c.CloseIdleConnections()
	start := time.Now()
	for i := range n {
		before := attempts.n.Load()
		t0 := time.Now()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			if errors.Is(err, client.ErrThrottled) {
				fmt.Fprintf(out, "  request %d: shed locally: %v\n", i+1, err)
				continue
			}
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		remaining := "?"
		if st := tr.State(); len(st.Limits) > 0 {
			remaining = fmt.Sprint(st.Limits[0].Remaining)
		}
		fmt.Fprintf(out, "  request %d: %d after %d attempt(s), %5.1fs; RateLimit: %s (r=%s)\n",
			i+1, resp.StatusCode, attempts.n.Load()-before, time.Since(t0).Seconds(),
			resp.Header.Get("RateLimit"), remaining)
	}
	fmt.Fprintf(out, "  %d requests in %.1fs\n", n, time.Since(start).Seconds())
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
