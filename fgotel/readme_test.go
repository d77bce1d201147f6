package fgotel_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// row is one instrument of README.md's table.
type row struct {
	kind, unit string
	attrs      map[string]bool
}

var backticked = regexp.MustCompile("`([^`]*)`")

// readmeInstruments parses the instrument table of README.md: the rows
// of its section "Instruments" whose first cell is a backticked name.
func readmeInstruments(t *testing.T) map[string]row {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]row{}
	inherit := map[string]string{}
	section := ""
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "## ") {
			section = strings.TrimPrefix(line, "## ")
		}
		if section != "Instruments" || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 6 {
			t.Fatalf("README row with %d cells, want 6: %s", len(cells), line)
		}
		name := strings.Trim(strings.TrimSpace(cells[0]), "`")
		r := row{kind: strings.ToLower(strings.TrimSpace(cells[1])), unit: strings.Trim(strings.TrimSpace(cells[2]), "`"), attrs: map[string]bool{}}
		a := strings.TrimSpace(cells[3])
		if strings.HasPrefix(a, "as ") {
			inherit[name] = strings.Trim(strings.TrimPrefix(a, "as "), "`")
		}
		for _, m := range backticked.FindAllStringSubmatch(a, -1) {
			r.attrs[m[1]] = true
		}
		if _, dup := rows[name]; dup {
			t.Errorf("README lists %s twice", name)
		}
		rows[name] = r
	}
	for name, from := range inherit {
		src, ok := rows[from]
		if !ok {
			t.Errorf("README: %s has the attributes of %s, which it does not list", name, from)
			continue
		}
		rows[name] = row{kind: rows[name].kind, unit: rows[name].unit, attrs: src.attrs}
	}
	return rows
}

// asynchronous are the instruments whose values a callback observes:
// the decision counts, read from the Tally.
var asynchronous = map[string]bool{
	"floodgate.rate_limiting.requests": true,
	"floodgate.rate_limiting.units":    true,
}

// TestREADMEListsEveryInstrument checks README.md's table against the
// instruments that one event of every kind creates: the same names, each
// with its type and unit, and every attribute key a point has listed.
func TestREADMEListsEveryInstrument(t *testing.T) {
	m, r := newMetrics(t, nil)
	everyEvent(t, m, "k")
	got := collect(t, r)
	rows := readmeInstruments(t)
	for name, in := range got {
		row, ok := rows[name]
		if !ok {
			t.Errorf("README does not list %s", name)
			continue
		}
		// A collected sum does not say whether its instrument was
		// synchronous: the asynchronous ones are named here.
		kind := in.kind
		if asynchronous[name] {
			kind = "asynchronous " + kind
		}
		if row.kind != kind || row.unit != in.unit {
			t.Errorf("README lists %s as a %s in %q; it is a %s in %q", name, row.kind, row.unit, kind, in.unit)
		}
		for set := range in.points {
			for _, kv := range strings.Split(set, ",") {
				if k, _, _ := strings.Cut(kv, "="); !row.attrs[k] {
					t.Errorf("README does not list attribute %s of %s", k, name)
				}
			}
		}
	}
	for name := range rows {
		if _, ok := got[name]; !ok {
			t.Errorf("README lists %s, which the package does not export", name)
		}
	}
	if len(got) != 21 {
		t.Errorf("%d instruments, want 21: %v", len(got), names(got))
	}
}
