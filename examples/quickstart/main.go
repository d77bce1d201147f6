// Command quickstart runs floodgate's five algorithms side by side on the
// same scripted traffic, on virtual time, and prints what each admitted per
// tick: the fixed window's boundary spike, the sliding window's estimate,
// the token bucket's burst, and the leaky bucket's constant egress.
//
// It then runs the same traffic through the Redis store — on the server at
// REDIS_ADDR when it is set, else on an embedded miniredis — and checks that
// every decision matches the in-process store's.
//
//	go run ./examples/quickstart               # no server needed
//	go run ./examples/quickstart -csv out.csv  # also write the series for bench/ to plot
package main

import (
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/memstore"
	"github.com/floodgate-go/floodgate/redisstore"
)

// Every algorithm gets the same quota: 10 requests per second.
var algorithms = []struct {
	name string
	alg  floodgate.Algorithm
}{
	{"token bucket", floodgate.TokenBucket{Rate: 10, Per: time.Second, Burst: 10}},
	{"leaky bucket", floodgate.LeakyBucket{Rate: 10, Per: time.Second, Capacity: 10}},
	{"fixed window", floodgate.FixedWindow{Limit: 10, Window: time.Second}},
	{"sliding window", floodgate.SlidingWindow{Limit: 10, Window: time.Second}},
	{"sliding log", floodgate.SlidingLog{Limit: 10, Window: time.Second}},
}

const (
	tick  = 100 * time.Millisecond
	ticks = 60
)

// traffic returns the requests offered in each tick: a steady stream at the
// limit, a burst of 30, a quiet second, then 10 requests just before a
// window boundary and 10 just after it.
func traffic() [ticks]int {
	var offered [ticks]int
	for i := range 20 {
		offered[i] = 1 // 0–2 s: steady, 10 per second
	}
	offered[22] = 30 // 2.2 s: a burst
	offered[39] = 10 // 3.9 s and 4.0 s: a burst straddling the window boundary at 4 s
	offered[40] = 10
	for i := 45; i < ticks; i++ {
		offered[i] = 1 // steady again
	}
	return offered
}

// series is what one algorithm did with the traffic.
type series struct {
	name     string
	admitted [ticks]int // requests that proceeded in each tick (for the leaky bucket: departed)
	denied   [ticks]int
}

// virtualClock is the simulation's virtual time: the stores read it (their
// Options.Now), simulate moves it.
type virtualClock struct{ ns atomic.Int64 }

func (c *virtualClock) Now() time.Time  { return time.Unix(0, c.ns.Load()) }
func (c *virtualClock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }

// simulate runs the traffic through every algorithm on store, whose clock
// reads clock. Each algorithm uses its own key; the leaky bucket queues
// requests (Reserve with up to 1 s of delay), the others use Allow.
func simulate(ctx context.Context, store floodgate.Store, clock *virtualClock, keyPrefix string) ([]series, error) {
	offered := traffic()
	t0 := time.Unix(1_700_000_000, 0) // aligned to the windows
	var out []series
	for _, a := range algorithms {
		lim, err := floodgate.New(store, a.alg, nil)
		if err != nil {
			return nil, err
		}
		s := series{name: a.name}
		key := keyPrefix + strings.ReplaceAll(a.name, " ", "-")
		for i, n := range offered {
			for j := range n {
				// Requests of a tick arrive spread over it.
				clock.Set(t0.Add(time.Duration(i)*tick + time.Duration(j)*tick/time.Duration(n)))
				var d floodgate.Decision
				if _, shaper := a.alg.(floodgate.LeakyBucket); shaper {
					d, err = lim.Reserve(ctx, key, 1, time.Second)
				} else {
					d, err = lim.Allow(ctx, key)
				}
				if err != nil {
					return nil, err
				}
				if !d.Allowed {
					s.denied[i]++
					continue
				}
				// Count the request in the tick it proceeds in.
				at := clock.Now().Add(d.Delay).Sub(t0)
				if k := int(at / tick); k < ticks {
					s.admitted[k]++
				}
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// maxInWindow returns the most requests admitted within any window-long run
// of ticks.
func maxInWindow(counts [ticks]int, window int) int {
	best := 0
	for i := range counts {
		sum := 0
		for j := i; j < min(i+window, ticks); j++ {
			sum += counts[j]
		}
		best = max(best, sum)
	}
	return best
}

// cell renders a count in one character.
func cell(n int) string {
	switch {
	case n == 0:
		return "."
	case n < 10:
		return strconv.Itoa(n)
	default:
		return "#"
	}
}

func render(w io.Writer, title string, all []series) {
	offered := traffic()
	fmt.Fprintf(w, "%s — 10 requests per second each; one column per %v, # = 10 or more\n\n", title, tick)
	axis := make([]string, ticks)
	for i := range axis {
		axis[i] = " "
		if i%10 == 0 {
			axis[i] = strconv.Itoa(i / 10)
		}
	}
	fmt.Fprintf(w, "%-24s %s  (seconds)\n", "", strings.Join(axis, ""))
	row := func(label string, counts [ticks]int) {
		var b strings.Builder
		total := 0
		for _, n := range counts {
			b.WriteString(cell(n))
			total += n
		}
		fmt.Fprintf(w, "%-24s %s  %3d\n", label, b.String(), total)
	}
	row("offered", offered)
	for _, s := range all {
		fmt.Fprintln(w)
		row(s.name+" admitted", s.admitted)
		row(s.name+" denied", s.denied)
	}
	fmt.Fprintf(w, "\nmost admitted in any 1 s window (the limit is 10):\n")
	for _, s := range all {
		fmt.Fprintf(w, "  %-15s %2d\n", s.name, maxInWindow(s.admitted, int(time.Second/tick)))
	}
}

func writeCSV(path string, all []series) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	cw := csv.NewWriter(f)
	header := []string{"t_seconds", "offered"}
	for _, s := range all {
		header = append(header, s.name+" admitted", s.name+" denied")
	}
	_ = cw.Write(header)
	offered := traffic()
	for i := range ticks {
		rec := []string{strconv.FormatFloat(float64(i)*tick.Seconds(), 'f', 1, 64), strconv.Itoa(offered[i])}
		for _, s := range all {
			rec = append(rec, strconv.Itoa(s.admitted[i]), strconv.Itoa(s.denied[i]))
		}
		_ = cw.Write(rec)
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func run(w io.Writer, csvPath string) error {
	ctx := context.Background()
	clock := new(virtualClock)
	store, err := memstore.New(&memstore.Options{Now: clock.Now})
	if err != nil {
		return err
	}
	all, err := simulate(ctx, store, clock, "quickstart:")
	if err != nil {
		return err
	}
	render(w, "in-process store (memstore)", all)
	if csvPath != "" {
		if err := writeCSV(csvPath, all); err != nil {
			return err
		}
	}
	return runRedis(ctx, w, all)
}

// runRedis offers the same traffic to the Redis store, with the same virtual
// clock (the client's clock option), and compares every tick.
func runRedis(ctx context.Context, w io.Writer, want []series) error {
	addr, where := os.Getenv("REDIS_ADDR"), "the Redis server at "+os.Getenv("REDIS_ADDR")
	if addr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close()
		addr, where = mr.Addr(), "an embedded miniredis (set REDIS_ADDR to use a real server)"
	}
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	clock := new(virtualClock)
	// The virtual clock runs far from the server's, whose clock drives the
	// keys' TTLs: a generous margin keeps state alive however slowly this
	// run goes.
	store, err := redisstore.New(client, &redisstore.Options{Now: clock.Now, Timeout: 5 * time.Second, ExpiryMargin: time.Hour})
	if err != nil {
		return err
	}
	defer store.Close()
	// A prefix of this run's own, so nothing else on the server is touched.
	prefix := fmt.Sprintf("quickstart:%d:%d:", os.Getpid(), time.Now().UnixNano())
	got, err := simulate(ctx, store, clock, prefix)
	if err != nil {
		return fmt.Errorf("redis store on %s: %w", where, err)
	}
	fmt.Fprintf(w, "\nThe same traffic through the Redis store, on %s:\n", where)
	same := true
	for i := range want {
		ok := got[i] == want[i]
		same = same && ok
		verdict := "same decisions as in-process"
		if !ok {
			verdict = "DIFFERENT decisions from in-process"
		}
		fmt.Fprintf(w, "  %-15s admitted %3d, denied %3d: %s\n", got[i].name, sum(got[i].admitted), sum(got[i].denied), verdict)
	}
	if !same {
		return fmt.Errorf("the Redis store decided differently from the in-process store")
	}
	return nil
}

func sum(counts [ticks]int) int {
	total := 0
	for _, n := range counts {
		total += n
	}
	return total
}

func main() {
	csvPath := flag.String("csv", "", "also write the per-tick series to this CSV file")
	flag.Parse()
	if err := run(os.Stdout, *csvPath); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}
