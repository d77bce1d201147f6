package main

import (
	"bufio"
	"bytes"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// result is every run of one benchmark.
type result struct {
	scenario, library string
	values            map[string][]float64 // unit -> one value per run
}

// median returns the median of the unit's values and their spread, the
// median absolute deviation relative to the median (robust to the odd
// round that a busy machine slows down), or ok false when the unit was not
// reported.
func (r *result) median(unit string) (med, spread float64, n int, ok bool) {
	vs := r.values[unit]
	if len(vs) == 0 {
		return 0, 0, 0, false
	}
	med = median(vs)
	dev := make([]float64, len(vs))
	for i, v := range vs {
		dev[i] = math.Abs(v - med)
	}
	if med != 0 {
		spread = median(dev) / med
	}
	return med, spread, len(vs), true
}

// min returns the smallest value of the unit.
func (r *result) min(unit string) (float64, bool) {
	vs := r.values[unit]
	if len(vs) == 0 {
		return 0, false
	}
	return slices.Min(vs), true
}

// max returns the largest value of the unit.
func (r *result) max(unit string) (float64, bool) {
	vs := r.values[unit]
	if len(vs) == 0 {
		return 0, false
	}
	return slices.Max(vs), true
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// parsed is the benchmark output, summarised.
type parsed struct {
	order   []string // benchmark names, first seen first
	results map[string]*result
	skipped map[string]string // name -> reason
	failed  map[string]string // name -> reason
	notes   []string          // runner notes and crashes
	cpu     string
}

var (
	benchLine = regexp.MustCompile(`^Benchmark(\S+?)(-\d+)?\s+(\d+)\s+(.+)$`)
	logLine   = regexp.MustCompile(`^\s+\S+\.go:\d+: (.*)$`)
)

// parseOutput reads go test -v -bench output.
func parseOutput(raw []byte) *parsed {
	p := &parsed{results: map[string]*result{}, skipped: map[string]string{}, failed: map[string]string{}}
	var logs []string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "cpu: "):
			p.cpu = strings.TrimPrefix(line, "cpu: ")
		case strings.HasPrefix(line, "--- SKIP: "), strings.HasPrefix(line, "--- FAIL: "):
			name := benchName(strings.Fields(line)[2])
			reason := strings.Join(logs, "; ")
			switch {
			case strings.HasPrefix(line, "--- SKIP"):
				p.skipped[name] = reason
			case strings.Contains(name, "/") || reason != "":
				// A parent benchmark fails with its child: count the child.
				p.failed[name] = reason
			}
			if strings.Contains(name, "/") {
				p.see(name)
			}
			logs = nil
		case strings.HasPrefix(line, "report: "), strings.HasPrefix(line, "panic: "):
			p.notes = append(p.notes, line)
		case logLine.MatchString(line):
			logs = append(logs, logLine.FindStringSubmatch(line)[1])
		case strings.HasPrefix(line, "Benchmark"):
			logs = nil
			m := benchLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			fields := strings.Fields(m[4])
			if len(fields) < 2 {
				continue
			}
			name := m[1]
			r := p.see(name)
			for i := 0; i+1 < len(fields); i += 2 {
				v, err := strconv.ParseFloat(fields[i], 64)
				if err != nil {
					continue
				}
				r.values[fields[i+1]] = append(r.values[fields[i+1]], v)
			}
		}
	}
	return p
}

// see returns the result of name, creating it in first-seen order.
func (p *parsed) see(name string) *result {
	if r, ok := p.results[name]; ok {
		return r
	}
	scenario, library, _ := strings.Cut(name, "/")
	r := &result{scenario: scenario, library: library, values: map[string][]float64{}}
	p.results[name] = r
	p.order = append(p.order, name)
	return r
}

// get returns the result of scenario/library if it has the unit.
func (p *parsed) get(scenario, library, unit string) (*result, bool) {
	r, ok := p.results[scenario+"/"+library]
	if !ok || len(r.values[unit]) == 0 {
		return nil, false
	}
	return r, true
}

// libraries returns the libraries of a scenario in first-seen order.
func (p *parsed) libraries(scenario string) []string {
	var libs []string
	for _, n := range p.order {
		if r := p.results[n]; r.scenario == scenario && r.library != "" {
			libs = append(libs, r.library)
		}
	}
	return libs
}

// benchName strips "Benchmark" and the -GOMAXPROCS suffix.
func benchName(s string) string {
	s = strings.TrimPrefix(s, "Benchmark")
	if i := strings.LastIndexByte(s, '-'); i >= 0 {
		if _, err := strconv.Atoi(s[i+1:]); err == nil {
			s = s[:i]
		}
	}
	return s
}
