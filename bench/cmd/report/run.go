package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// component is a package the benchmarks import that may be missing or
// broken: a floodgate package still being written, or a peer. The runner
// compiles it out with its build tag and reports why.
type component struct {
	name      string
	pkgs      []string
	tag       string
	files     []string // the adapter files blamed for compile errors
	floodgate bool
}

var components = []component{
	{name: "floodgate/redisstore", pkgs: []string{"github.com/floodgate-go/floodgate/redisstore"}, tag: "nofg_redisstore", files: []string{"fg_redisstore_test.go", "fg_overload_test.go", "fg_hotkey_test.go"}, floodgate: true},
	{name: "floodgate/lease", pkgs: []string{"github.com/floodgate-go/floodgate/lease"}, tag: "nofg_lease", files: []string{"fg_lease_test.go"}, floodgate: true},
	{name: "floodgate/adaptive", pkgs: []string{"github.com/floodgate-go/floodgate/adaptive"}, tag: "nofg_adaptive", files: []string{"fg_adaptive_test.go"}, floodgate: true},
	{name: "golang.org/x/time/rate", pkgs: []string{"golang.org/x/time/rate"}, tag: "nopeer_xtimerate", files: []string{"peer_xtimerate_test.go"}},
	{name: "github.com/sethvargo/go-limiter", pkgs: []string{"github.com/sethvargo/go-limiter/memorystore"}, tag: "nopeer_sethvargo", files: []string{"peer_sethvargo_test.go"}},
	{name: "github.com/ulule/limiter/v3", pkgs: []string{"github.com/ulule/limiter/v3/drivers/store/memory", "github.com/ulule/limiter/v3/drivers/store/redis"}, tag: "nopeer_ulule", files: []string{"peer_ulule_test.go"}},
	{name: "github.com/go-redis/redis_rate/v10", pkgs: []string{"github.com/go-redis/redis_rate/v10"}, tag: "nopeer_redisrate", files: []string{"peer_redisrate_test.go"}},
	{name: "go.uber.org/ratelimit", pkgs: []string{"go.uber.org/ratelimit"}, tag: "nopeer_uber", files: []string{"peer_uber_test.go"}},
	{name: "github.com/go-chi/httprate", pkgs: []string{"github.com/go-chi/httprate"}, tag: "nopeer_httprate", files: []string{"peer_httprate_test.go"}},
}

// componentStatus is what the probe found.
type componentStatus struct {
	component
	built  bool
	reason string // why not built
	detail string // the compiler's words
}

// timedScenarios and measuredScenarios select the benchmarks of the two
// kinds of run: timed (ns/op at -benchtime) and measured once per round
// (-benchtime 1x: memory and accuracy report their own metrics).
const (
	timedScenarios    = `^Benchmark(InProcessOneKeyAllowed|InProcessOneKeyDenied|InProcess100kKeysParallel|InProcess100kKeysReclaimed|RedisSerial|Redis64Goroutines|RedisFanIn512|RedisLimits64Goroutines|RedisInflightContention|Lease64GoroutinesOneKey|Lease64Goroutines1000Keys|AdaptiveSerial|AdaptiveParallel)$`
	measuredScenarios = `^Benchmark(MemoryPerKey|RedisMemoryPerKey|Accuracy|ClusterHotKey)$`
)

// runBenchmarks probes the components, compiles the benchmarks and runs
// the rounds, collecting the raw output.
func (r *report) runBenchmarks() error {
	fmt.Println("== probing components")
	var tags []string
	for _, c := range components {
		st := componentStatus{component: c, built: true}
		out, err := goCmd(r.benchDir, append([]string{"build"}, c.pkgs...)...)
		if err != nil {
			st.built = false
			st.detail = firstLines(string(out), 6)
			st.reason = "does not build"
			if notPresent(string(out)) {
				st.reason = "package not present"
			}
			tags = append(tags, c.tag)
		}
		r.components = append(r.components, st)
		fmt.Printf("   %-36s %s\n", c.name, st.summary())
	}

	tmp, err := os.MkdirTemp("", "floodgate-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "bench.test")
	fmt.Println("== compiling the benchmarks")
	for {
		args := []string{"test", "-c", "-o", bin}
		if len(tags) > 0 {
			args = append(args, "-tags", strings.Join(tags, ","))
		}
		args = append(args, ".")
		out, err := goCmd(r.benchDir, args...)
		if err == nil {
			r.buildTags = tags
			break
		}
		// Blame the adapter files named in the errors on their components
		// and compile those out; anything else is our own bug.
		blamed := false
		for i := range r.components {
			c := &r.components[i]
			if !c.built {
				continue
			}
			for _, f := range c.files {
				if strings.Contains(string(out), f+":") {
					c.built = false
					c.reason = "adapter does not compile against the package as it stands"
					c.detail = firstLines(grepLines(string(out), f+":"), 6)
					tags = append(tags, c.tag)
					blamed = true
					fmt.Printf("   %-36s %s\n", c.name, c.summary())
					break
				}
			}
		}
		if !blamed {
			return fmt.Errorf("go %s:\n%s", strings.Join(args, " "), out)
		}
	}

	var raw bytes.Buffer
	common := []string{"-test.run", "^$", "-test.v", "-test.count", "1"}
	if r.opts.short {
		common = append(common, "-test.short")
	}
	timed := append(append([]string{}, common...), "-test.bench", filterScenarios(timedScenarios, r.opts.bench), "-test.benchmem", "-test.benchtime", r.opts.benchtime)
	measured := append(append([]string{}, common...), "-test.bench", filterScenarios(measuredScenarios, r.opts.bench), "-test.benchtime", "1x")
	r.commands = []string{
		"go test -c -o bench.test" + tagFlag(r.buildTags) + " .",
		fmt.Sprintf("./bench.test %s    # timed scenarios, once per round", shellJoin(timed)),
		fmt.Sprintf("./bench.test %s    # memory and accuracy, once per round", shellJoin(measured)),
	}
	if os.Getenv("REDIS_ADDR") == "" {
		fmt.Println("   skipped: REDIS_ADDR not set (the Redis, lease, Redis memory and accuracy scenarios skip)")
	}
	for round := 1; round <= r.opts.count; round++ {
		for _, step := range []struct {
			what string
			args []string
		}{{"timed scenarios", timed}, {"memory and accuracy", measured}} {
			fmt.Printf("== round %d of %d: %s (%s so far)\n", round, r.opts.count, step.what, since(r.started))
			if err := runStreaming(bin, r.benchDir, step.args, &raw); err != nil {
				// A failing benchmark prints --- FAIL and the binary exits
				// 1; the parse reports it. Anything else (a crash) is kept
				// as a note.
				fmt.Fprintf(&raw, "\nreport: round %d: %v\n", round, err)
			}
		}
	}
	r.raw = raw.Bytes()
	r.rounds = r.opts.count
	return nil
}

// summary is the one-line status of a component.
func (c componentStatus) summary() string {
	if c.built {
		return "built"
	}
	return "skipped: " + c.reason
}

// runStreaming runs bin with args in dir, copying its output to stdout and
// to raw.
func runStreaming(bin, dir string, args []string, raw *bytes.Buffer) error {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			raw.WriteString(line)
			raw.WriteByte('\n')
			if echo(line) {
				fmt.Println("   " + line)
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	err := cmd.Wait()
	pw.Close()
	<-done
	return err
}

// echo says whether a line of the benchmark output is worth showing while
// the rounds run: results, skips and failures, not the -v name lines.
func echo(line string) bool {
	switch {
	case strings.HasPrefix(line, "Benchmark"):
		return strings.Contains(line, "/op") || strings.Contains(line, "B/key") || strings.Contains(line, "admitted")
	case strings.HasPrefix(line, "--- FAIL"), strings.HasPrefix(line, "    "), strings.HasPrefix(line, "FAIL"), strings.HasPrefix(line, "panic"):
		return true
	}
	return false
}

// runExamples runs the quickstart and adaptive examples of the parent
// module for their CSV series.
func (r *report) runExamples() {
	data := filepath.Join(r.opts.out, "data")
	qs := filepath.Join(data, "quickstart.csv")
	fmt.Println("== go run ./examples/quickstart -csv", qs)
	if out, err := goCmd(r.repoDir, "run", "./examples/quickstart", "-csv", qs); err != nil {
		r.quickstartErr = fmt.Sprintf("go run ./examples/quickstart: %v: %s", err, firstLines(string(out), 4))
	} else {
		r.quickstartCSV = qs
	}
	if _, err := os.Stat(filepath.Join(r.repoDir, "examples", "adaptive")); err != nil {
		r.adaptiveErr = "skipped: examples/adaptive not present"
		return
	}
	ad := filepath.Join(data, "adaptive.csv")
	fmt.Println("== go run ./examples/adaptive -out", ad)
	if out, err := goCmd(r.repoDir, "run", "./examples/adaptive", "-out", ad); err != nil {
		r.adaptiveErr = fmt.Sprintf("go run ./examples/adaptive: %v: %s", err, firstLines(string(out), 4))
	} else {
		r.adaptiveCSV = ad
	}
}

// notPresent says whether go build failed because the package is absent.
func notPresent(out string) bool {
	for _, s := range []string{"no required module provides package", "cannot find package", "no Go files in", "does not contain package", "is not in std", "directory not found", "no such file or directory"} {
		if strings.Contains(out, s) {
			return true
		}
	}
	return false
}

// filterScenarios narrows a scenario regexp to those the -bench flag
// selects, by listing the alternatives that match it.
func filterScenarios(all, sel string) string {
	if sel == "." || sel == "" {
		return all
	}
	re, err := regexp.Compile(sel)
	if err != nil {
		return all
	}
	inner := strings.TrimSuffix(strings.TrimPrefix(all, "^Benchmark("), ")$")
	var keep []string
	for _, s := range strings.Split(inner, "|") {
		if re.MatchString("Benchmark" + s) {
			keep = append(keep, s)
		}
	}
	if len(keep) == 0 {
		return "^$"
	}
	return "^Benchmark(" + strings.Join(keep, "|") + ")$"
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = append(lines[:n], "…")
	}
	return strings.Join(lines, "\n")
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return strings.Join(out, "\n")
}

func tagFlag(tags []string) string {
	if len(tags) == 0 {
		return ""
	}
	return " -tags " + strings.Join(tags, ",")
}

func shellJoin(args []string) string {
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		if strings.ContainsAny(a, "^$|()* ") {
			b.WriteString("'" + a + "'")
		} else {
			b.WriteString(a)
		}
	}
	return b.String()
}

// since formats an elapsed time for the console.
func since(t time.Time) string { return time.Since(t).Round(time.Second).String() }
