// Command report runs floodgate's comparison benchmarks (the parent
// directory's _test.go files) several times, summarises the medians, writes
// RESULTS.md and README-section.md, and renders the charts the README shows.
//
//	cd bench && go run ./cmd/report            # full mode: the README's numbers
//	cd bench && go run ./cmd/report -short     # under two minutes; CI runs it
//	cd bench && go run ./cmd/report -out /tmp/r -count 3 -benchtime 500ms
//	cd bench && go run ./cmd/report -from bench.txt   # re-render without re-running
//
// It compiles the benchmarks once, then runs every scenario once per round,
// round after round, so that a drift of the machine's load spreads over all
// libraries instead of favouring the ones that ran first. Components that
// are missing or do not build are compiled out (build tags) and reported.
// Redis scenarios need REDIS_ADDR; without it they are skipped with a line
// saying so, never failed.
//
// The exit status is non-zero when a benchmark fails or when a floodgate
// limiter admits more than its quota in the accuracy scenario; performance
// bars are reported, and fail the run only with -strict, because a shared
// machine's noise is not a regression.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// options are the command line.
type options struct {
	short     bool
	out       string
	count     int
	benchtime string
	bench     string
	from      string
	strict    bool
	format    string
}

func main() {
	var o options
	flag.BoolVar(&o.short, "short", false, "quick mode: one round, short benchtime, fewer keys in the memory scenarios (under two minutes)")
	flag.StringVar(&o.out, "out", "", "directory for RESULTS.md, README-section.md, bench.txt, charts/ and data/ (default: the bench directory)")
	flag.IntVar(&o.count, "count", 0, "rounds of every scenario (default 6, or 1 with -short)")
	flag.StringVar(&o.benchtime, "benchtime", "", "benchtime of the timed scenarios (default 1s, or 50ms with -short)")
	flag.StringVar(&o.bench, "bench", ".", "regexp selecting scenarios (matched against Benchmark<Scenario>)")
	flag.StringVar(&o.from, "from", "", "render from this saved go test output (a bench.txt) instead of running")
	flag.BoolVar(&o.strict, "strict", false, "exit non-zero when a performance bar does not hold")
	flag.StringVar(&o.format, "format", "png", "chart format: png (the same pixels everywhere) or svg (crisper, but text falls back to the reader's fonts)")
	flag.Parse()
	useSans()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	start := time.Now()
	if o.count == 0 {
		o.count = 6
		if o.short {
			o.count = 1
		}
	}
	if o.benchtime == "" {
		o.benchtime = "1s"
		if o.short {
			o.benchtime = "50ms"
		}
	}
	if o.format != "svg" && o.format != "png" {
		return fmt.Errorf("-format %q: want svg or png", o.format)
	}
	benchDir, err := findBenchDir()
	if err != nil {
		return err
	}
	repoDir := filepath.Dir(benchDir)
	if o.out == "" {
		o.out = benchDir
	}
	if o.out, err = filepath.Abs(o.out); err != nil {
		return err
	}
	for _, d := range []string{o.out, filepath.Join(o.out, "charts"), filepath.Join(o.out, "data")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}

	rep := &report{opts: o, benchDir: benchDir, repoDir: repoDir, started: start.UTC()}
	rep.machine = describeMachine(repoDir)
	if o.from != "" {
		raw, err := os.ReadFile(o.from)
		if err != nil {
			return err
		}
		rep.raw = raw
		rep.fromFile = o.from
		if !rep.loadMeta(o.from) {
			rep.machine.Redis = "as when " + o.from + " was recorded (this page was rendered from it)"
		}
	} else {
		if err := rep.runBenchmarks(); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(o.out, "bench.txt"), rep.raw, 0o644); err != nil {
			return err
		}
	}
	rep.parsed = parseOutput(rep.raw)
	rep.runExamples()
	if rep.fromFile == "" {
		rep.machine.LoadEnd = loadAverage()
		rep.elapsed = time.Since(start)
		if err := rep.saveMeta(); err != nil {
			return err
		}
	} else {
		rep.elapsed = rep.recordedElapsed
	}

	if err := rep.renderCharts(); err != nil {
		return fmt.Errorf("charts: %w", err)
	}
	rep.evaluateBars()
	if err := os.WriteFile(filepath.Join(o.out, "RESULTS.md"), []byte(rep.resultsMarkdown()), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, "README-section.md"), []byte(rep.readmeSection()), 0o644); err != nil {
		return err
	}
	rep.printSummary(os.Stdout)
	wrote := "RESULTS.md, README-section.md, bench.txt, data/ and charts/"
	if o.from != "" {
		wrote = "RESULTS.md, README-section.md, data/ and charts/"
	}
	fmt.Printf("\nwrote %s in %s (%v)\n", wrote, o.out, rep.elapsed.Round(time.Second))

	var problems []string
	if n := len(rep.parsed.failed); n > 0 {
		problems = append(problems, fmt.Sprintf("%d benchmark(s) failed", n))
	}
	if len(rep.parsed.failed) == 0 && len(rep.parsed.notes) > 0 {
		// The binary exited badly without a failing benchmark: a crash.
		problems = append(problems, rep.parsed.notes...)
	}
	for _, b := range rep.bars {
		if b.correctness && b.status == fail {
			problems = append(problems, "correctness: "+b.title)
		}
		if o.strict && !b.correctness && b.status == fail {
			problems = append(problems, "bar: "+b.title)
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// findBenchDir returns the directory of the bench module: the working
// directory or one of its parents.
func findBenchDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		data, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && bytes.Contains(data, []byte("module github.com/floodgate-go/floodgate/bench\n")) {
			return d, nil
		}
		if sub := filepath.Join(d, "bench", "go.mod"); d != filepath.Dir(d) {
			if data, err := os.ReadFile(sub); err == nil && bytes.Contains(data, []byte("module github.com/floodgate-go/floodgate/bench\n")) {
				return filepath.Dir(sub), nil
			}
		}
		if d == filepath.Dir(d) {
			return "", fmt.Errorf("run me from floodgate's bench directory (cd bench && go run ./cmd/report); no bench module above %s", dir)
		}
	}
}

// goCmd runs the go command in dir and returns its combined output.
func goCmd(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	return cmd.CombinedOutput()
}
