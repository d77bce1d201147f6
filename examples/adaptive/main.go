// Command adaptive runs the adaptive concurrency simulator (adaptive/sim) on
// a server of 20 workers with a 10ms service time, stepping the offered load
// through 0.5x, 1x, 3x and back to 0.5x of capacity, once per limit
// algorithm and once without a limiter. It prints a summary per phase and
// writes the time series as CSV, which bench/ renders into the README's
// chart.
//
//	go run ./examples/adaptive                 # writes adaptive-sim.csv
//	go run ./examples/adaptive -out -          # summary only
//	go run ./examples/adaptive -seed 7 -collapse 0
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/floodgate-go/floodgate/adaptive"
	"github.com/floodgate-go/floodgate/adaptive/sim"
)

const (
	workers     = 20
	serviceTime = 10 * time.Millisecond
	window      = 10 * serviceTime // the limits' update window and the series interval
	settle      = 3 * time.Second  // convergence budget excluded from the summary
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "adaptive:", err)
		os.Exit(1)
	}
}

// limiters are the configurations compared, in output order. Each builds a
// limiter on the simulation's clock and random source.
var limiters = []struct {
	name string
	new  func(sim.Env) (*adaptive.Limiter, error) // nil: no limiter
}{
	{"vegas", func(env sim.Env) (*adaptive.Limiter, error) {
		v, err := adaptive.NewVegas(&adaptive.VegasOptions{Rand: env.Rand})
		if err != nil {
			return nil, err
		}
		return windowed(env, v)
	}},
	{"gradient2", func(env sim.Env) (*adaptive.Limiter, error) {
		g, err := adaptive.NewGradient2(&adaptive.Gradient2Options{MinLimit: 1})
		if err != nil {
			return nil, err
		}
		return windowed(env, g)
	}},
	{"aimd", func(env sim.Env) (*adaptive.Limiter, error) {
		// AIMD only sees drops: count a request slower than 5·S as one
		// (the default Timeout, 5s, suits services 500 times slower).
		a, err := adaptive.NewAIMD(&adaptive.AIMDOptions{MinLimit: 1, Timeout: 5 * serviceTime})
		if err != nil {
			return nil, err
		}
		return windowed(env, a)
	}},
	{"none", nil},
}

func windowed(env sim.Env, l adaptive.Limit) (*adaptive.Limiter, error) {
	w, err := adaptive.NewWindowed(l, &adaptive.WindowedOptions{MinWindow: window, MaxWindow: window})
	if err != nil {
		return nil, err
	}
	return adaptive.NewLimiter(w, &adaptive.LimiterOptions{Now: env.Now})
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("adaptive", flag.ContinueOnError)
	fs.SetOutput(stdout)
	out := fs.String("out", "adaptive-sim.csv", `CSV file for the time series ("-" writes none)`)
	seed := fs.Uint64("seed", 1, "random seed")
	collapse := fs.Float64("collapse", 0.5, "collapse term κ: overload stretches service times by 1+κ·(n-C)/C")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}

	var csvOut *bufio.Writer
	if *out != "-" {
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer f.Close()
		csvOut = bufio.NewWriter(f)
	}

	capacity := float64(workers) / serviceTime.Seconds()
	fmt.Fprintf(stdout, "server: %d workers, service time %v (capacity %.0f req/s), deadline %v, collapse %.2g, seed %d\n",
		workers, serviceTime, capacity, 10*serviceTime, *collapse, *seed)
	fmt.Fprintf(stdout, "each phase is summarized after its first %v; late: completed after the deadline\n\n", settle)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "limiter\tphase\toffered\tgoodput\tshed\tlate\tp50\tp99\tlimit\t")
	for i, lim := range limiters {
		r, err := sim.Run(sim.Config{
			Seed: *seed, Workers: workers, ServiceTime: serviceTime, Service: sim.Lognormal,
			Collapse: *collapse, Interval: window, Limiter: lim.new,
			Phases: []sim.Phase{
				{Name: "0.5x", Duration: 8 * time.Second, Load: 0.5},
				{Name: "1x", Duration: 8 * time.Second, Load: 1},
				{Name: "3x", Duration: 12 * time.Second, Load: 3},
				{Name: "0.5x again", Duration: 8 * time.Second, Load: 0.5},
			},
		})
		if err != nil {
			return err
		}
		for _, p := range r.Phases {
			s, _ := r.Phase(p.Name, settle)
			limit := "-"
			if lim.new != nil {
				limit = fmt.Sprintf("%d [%d..%d]", s.LimitMedian, s.LimitMin, s.LimitMax)
			}
			secs := (s.To - s.From).Seconds()
			fmt.Fprintf(tw, "%s\t%s\t%.2fx\t%.2fx\t%.1f%%\t%.1f%%\t%s\t%s\t%s\t\n",
				lim.name, p.Name, float64(s.Offered)/secs/capacity, s.Goodput/capacity,
				percent(s.Rejected, s.Offered), percent(s.Late, s.Offered),
				ms(s.P50), ms(s.P99), limit)
		}
		if csvOut != nil {
			if err := r.WriteCSV(csvOut, lim.name, i == 0); err != nil {
				return err
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if csvOut != nil {
		if err := csvOut.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\nwrote %s\n", *out)
	}
	return nil
}

func percent(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
}

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}
