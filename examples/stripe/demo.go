package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/inflight"
)

// actor is one kind of client in the scripted overload: goroutines that
// send requests of one API key and one class, one at a time each, from
// start to stop (after the run began).
type actor struct {
	group       string // the row of the table by user
	user, class string
	goroutines  int
	start, stop time.Duration
	work        time.Duration // the ?ms= of each request
	pause       time.Duration // the wait after a request served
	backoff     time.Duration // the wait after a request refused
}

// script is the overload, 2.4s long; every tier has its moment:
//
//   - acme, globex and initech send default requests of 20ms throughout,
//     and acme and globex critical ones too, about 20 a second each: well
//     inside every limit;
//   - from 0.2s to 0.7s, spammer sends cheap requests as fast as it can
//     from two goroutines (tier 1);
//   - from 0.1s to 1.6s, abuser holds requests of 800ms from six
//     goroutines, twice its limit of requests in flight (tier 2);
//   - from 0.9s to 1.5s, a burst: ten batch keys, three goroutines each,
//     send requests of 100ms, background (batch-0 and 1), sheddable (2 to
//     4) and default (5 to 9), one key joining every 30ms, until they ask
//     for more than the workers (tiers 4, then 3).
func script() []actor {
	const run = 2400 * time.Millisecond
	a := []actor{
		{"acme", "acme", adaptive.ClassDefault, 1, 0, run, defaultWork, 30 * time.Millisecond, 30 * time.Millisecond},
		{"acme", "acme", adaptive.ClassCritical, 1, 0, run, defaultWork, 30 * time.Millisecond, 30 * time.Millisecond},
		{"globex", "globex", adaptive.ClassDefault, 1, 0, run, defaultWork, 30 * time.Millisecond, 30 * time.Millisecond},
		{"globex", "globex", adaptive.ClassCritical, 1, 0, run, defaultWork, 30 * time.Millisecond, 30 * time.Millisecond},
		{"initech", "initech", adaptive.ClassDefault, 1, 0, run, defaultWork, 30 * time.Millisecond, 30 * time.Millisecond},
		{"spammer", "spammer", adaptive.ClassDefault, 2, 200 * time.Millisecond, 700 * time.Millisecond, 0, 2 * time.Millisecond, 2 * time.Millisecond},
		{"abuser", "abuser", adaptive.ClassDefault, 6, 100 * time.Millisecond, 1600 * time.Millisecond, 800 * time.Millisecond, 0, 100 * time.Millisecond},
	}
	for i := range batchKeys {
		class := adaptive.ClassDefault
		switch {
		case i < 2:
			class = adaptive.ClassBackground
		case i < 5:
			class = adaptive.ClassSheddable
		}
		// A key joins every 30ms, the least important first, so that the
		// workers fill up over 0.3s and the shedders act in turn.
		start := 900*time.Millisecond + time.Duration(i)*30*time.Millisecond
		a = append(a, actor{"batch-0..9", "batch-" + strconv.Itoa(i), class, 3, start, 1500 * time.Millisecond,
			100 * time.Millisecond, 0, 100 * time.Millisecond})
	}
	return a
}

// batchKeys is the number of API keys of the burst.
const batchKeys = 10

// outcome is what became of one request: served, or refused by a tier.
type outcome int

const (
	served        outcome = iota
	byRate                // tier 1
	byInflight            // tier 2
	byFleet               // tier 3
	byWorker              // tier 4, by utilization
	byWorkersFull         // tier 4, every worker busy
	unexpected            // any other answer, or none
)

// row counts the requests of one class or one group of users.
type row struct {
	sent     int
	outcomes [unexpected + 1]int
}

// tier returns the requests tier t (1 to 4) refused.
func (r *row) tier(t int) int {
	switch t {
	case 1:
		return r.outcomes[byRate]
	case 2:
		return r.outcomes[byInflight]
	case 3:
		return r.outcomes[byFleet]
	case 4:
		return r.outcomes[byWorker] + r.outcomes[byWorkersFull]
	}
	return 0
}

// report is what the overload's clients saw. Its methods are safe for
// concurrent use.
type report struct {
	mu      sync.Mutex
	byClass map[string]*row
	byGroup map[string]*row
	status  map[int]int    // 0: no answer
	others  map[string]int // the unexpected answers: status and code
	groups  []string       // in the script's order
	elapsed time.Duration
}

func newReport(actors []actor) *report {
	r := &report{byClass: map[string]*row{}, byGroup: map[string]*row{}, status: map[int]int{}, others: map[string]int{}}
	for _, c := range classes {
		r.byClass[c] = &row{}
	}
	for _, a := range actors {
		if r.byGroup[a.group] == nil {
			r.byGroup[a.group] = &row{}
			r.groups = append(r.groups, a.group)
		}
	}
	return r
}

// classes are the criticalities, most important first.
var classes = []string{adaptive.ClassCritical, adaptive.ClassDefault, adaptive.ClassSheddable, adaptive.ClassBackground}

func (r *report) add(a actor, status int, o outcome, code string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if o == unexpected {
		r.others[strings.TrimSpace(strconv.Itoa(status)+" "+code)]++
	}
	for _, w := range []*row{r.byClass[a.class], r.byGroup[a.group]} {
		w.sent++
		w.outcomes[o]++
	}
	r.status[status]++
}

// total returns the sum of the rows by class.
func (r *report) total() row {
	r.mu.Lock()
	defer r.mu.Unlock()
	var t row
	for _, w := range r.byClass {
		t.sent += w.sent
		for o, n := range w.outcomes {
			t.outcomes[o] += n
		}
	}
	return t
}

// drive runs the script against the server at base through client, and
// returns what the clients saw. Every request is sent once: a refused
// client waits its backoff and sends the next one.
func drive(ctx context.Context, client *http.Client, base string, actors []actor) *report {
	rep := newReport(actors)
	start := time.Now()
	var wg sync.WaitGroup
	for _, a := range actors {
		for range a.goroutines {
			wg.Go(func() {
				if !sleep(ctx, a.start) {
					return
				}
				for time.Since(start) < a.stop {
					status, o, code := send(ctx, client, base, a)
					rep.add(a, status, o, code)
					wait := a.pause
					if o != served {
						wait = a.backoff
					}
					if !sleep(ctx, wait) {
						return
					}
				}
			})
		}
	}
	wg.Wait()
	rep.elapsed = time.Since(start)
	return rep
}

// sleep waits d or until ctx ends, and reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return ctx.Err() == nil
}

// send sends one request of a and reads which tier, if any, refused it,
// and the code of the answer's JSON body.
func send(ctx context.Context, client *http.Client, base string, a actor) (status int, o outcome, code string) {
	url := base + "/v1/charges?ms=" + strconv.FormatInt(a.work.Milliseconds(), 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, unexpected, err.Error()
	}
	req.Header.Set(apiKeyHeader, a.user)
	req.Header.Set(priorityHeader, a.class)
	res, err := client.Do(req)
	if err != nil {
		return 0, unexpected, err.Error()
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return res.StatusCode, unexpected, err.Error()
	}
	if res.StatusCode == http.StatusOK {
		return res.StatusCode, served, ""
	}
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	code = e.Error.Code
	switch {
	case res.StatusCode == http.StatusTooManyRequests && code == codeRate:
		return res.StatusCode, byRate, code
	case res.StatusCode == http.StatusTooManyRequests && code == codeInflight:
		return res.StatusCode, byInflight, code
	case res.StatusCode == http.StatusServiceUnavailable && code == codeFleet:
		return res.StatusCode, byFleet, code
	case res.StatusCode == http.StatusServiceUnavailable && code == codeWorker:
		return res.StatusCode, byWorker, code
	case res.StatusCode == http.StatusServiceUnavailable && code == codeWorkersFull:
		return res.StatusCode, byWorkersFull, code
	}
	return res.StatusCode, unexpected, code
}

// runDemo serves on a loopback port, drives the script against it over
// HTTP, and prints the tables to w.
func runDemo(ctx context.Context, cfg config, w io.Writer) error {
	srv, err := newServer(cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	rep, base, err := demo(ctx, srv)
	if err != nil {
		return err
	}
	// Closed first: the store reports its last failures when it closes.
	if err := srv.Close(); err != nil {
		return err
	}
	printReport(w, rep, srv, base)
	return nil
}

// demo serves srv on a loopback port and drives the script against it
// over HTTP; base is the server's URL.
func demo(ctx context.Context, srv *server) (rep *report, base string, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()

	// Enough idle connections for every goroutine of the script: the
	// default (2 per host) would dial a connection per request.
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	base = "http://" + ln.Addr().String()
	return drive(ctx, &http.Client{Transport: tr}, base, script()), base, nil
}

// printReport writes the tables: requests by priority and by user, by
// what answered them.
func printReport(w io.Writer, rep *report, srv *server, base string) {
	rep.mu.Lock()
	defer rep.mu.Unlock()
	fmt.Fprintf(w, "Tiers 1 to 3 %s; %.1fs of scripted overload against %s\n", srv.where, rep.elapsed.Seconds(), base)
	fmt.Fprintf(w, "Per API key %d requests/s with bursts of %d, %d in flight; %d workers, %d of them kept for critical requests;\n",
		ratePerSecond, rateBurst, maxInFlight, workers, int(math.Ceil(criticalShare*workers)))
	fmt.Fprintf(w, "non-critical shed at %.0f%% of the fleet; background at %.0f%% of this server's workers, sheddable at %.0f%%, default at %.0f%%.\n\n",
		100*fleetThresholds.Default, 100*workerThresholds.Background, 100*workerThresholds.Sheddable, 100*workerThresholds.Default)
	header := fmt.Sprintf("%-12s %5s %5s %7s %12s %8s %9s %6s", "", "sent", "200", "1 rate", "2 in flight", "3 fleet", "4 worker", "other")
	line := func(name string, r *row, extra string) {
		fmt.Fprintf(w, "%-12s %5d %5d %7d %12d %8d %9d %6d%s\n", name, r.sent, r.outcomes[served],
			r.tier(1), r.tier(2), r.tier(3), r.tier(4), r.outcomes[unexpected], extra)
	}
	fmt.Fprintln(w, strings.Replace(header, "            ", "by priority ", 1))
	var all row
	for _, c := range classes {
		r := rep.byClass[c]
		line(c, r, "")
		all.sent += r.sent
		for o, n := range r.outcomes {
			all.outcomes[o] += n
		}
	}
	line("all", &all, "")

	fmt.Fprintln(w)
	fmt.Fprintln(w, strings.Replace(header, "            ", "by user     ", 1)+"  most in flight")
	for _, g := range rep.groups {
		most := srv.peaks.of(g)
		if strings.HasPrefix(g, "batch-") {
			for i := range batchKeys {
				most = max(most, srv.peaks.of("batch-"+strconv.Itoa(i)))
			}
		}
		line(g, rep.byGroup[g], fmt.Sprintf("  %d", most))
	}

	codes := make([]int, 0, len(rep.status))
	for c := range rep.status {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	var parts []string
	for _, c := range codes {
		name := strconv.Itoa(c)
		if c == 0 {
			name = "no answer"
		}
		parts = append(parts, fmt.Sprintf("%s: %d", name, rep.status[c]))
	}
	fmt.Fprintf(w, "\nstatus codes: %s\n", strings.Join(parts, ", "))
	if len(rep.others) > 0 {
		keys := make([]string, 0, len(rep.others))
		for k := range rep.others {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		parts = parts[:0]
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s: %d", k, rep.others[k]))
		}
		fmt.Fprintf(w, "other: %s\n", strings.Join(parts, ", "))
	}
	if srv.onRedis {
		fmt.Fprintf(w, "Redis: %d decisions made in this process, Redis slower than its %v timeout (FailLocal); %d releases failed (those slots stay taken for %v)\n",
			srv.redisFallbacks.Load(), srv.redisTimeout, srv.releaseErrors.Load(), inflight.DefaultTTL)
	}
	fmt.Fprintf(w, "tier 4: %d shed by utilization, %d with every worker busy\n", all.outcomes[byWorker], all.outcomes[byWorkersFull])
}
