package fgprom_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/fgprom/dashboard"
	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"
)

// exported returns the series names the metrics export: each metric's
// name, and a histogram's _bucket, _sum and _count.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for name, mf := range families(t, newMetrics(t, nil)) {
		names[name] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[name+suffix] = true
			}
		}
	}
	return names
}

// checkNames fails for every metric name of expr that is not exported.
func checkNames(t *testing.T, where, expr string, names map[string]bool) {
	t.Helper()
	found := metricNames(expr)
	if len(found) == 0 {
		t.Errorf("%s: %q names no metric", where, expr)
	}
	for _, n := range found {
		if !names[n] {
			t.Errorf("%s: %q names %s, which the adapter does not export", where, expr, n)
		}
	}
}

// labelValues matches a Grafana variable's label_values(metric, label).
var labelValues = regexp.MustCompile(`^label_values\(\s*(.*?)\s*,\s*(\w+)\s*\)$`)

func TestDashboardNamesExportedMetrics(t *testing.T) {
	names := exported(t)
	panels, err := dashboard.Panels()
	if err != nil {
		t.Fatal(err)
	}
	if len(panels) < 12 {
		t.Errorf("%d panels with queries, want the 12 or more the issue lists", len(panels))
	}
	for _, p := range panels {
		if p.Title == "" || p.Description == "" {
			t.Errorf("panel %q: a panel has a title and a description", p.Title)
		}
		for _, q := range p.Queries {
			checkNames(t, "panel "+p.Title, q.Expr, names)
		}
	}

	var d struct {
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(dashboard.JSON, &d); err != nil {
		t.Fatal(err)
	}
	vars := 0
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		vars++
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil || m[1] == "" {
			t.Errorf("variable %s: query %q, want label_values(metric, label)", v.Name, q.Query)
			continue
		}
		checkNames(t, "variable "+v.Name, m[1], names)
	}
	if vars == 0 {
		t.Error("the dashboard has no query variable")
	}
}

// rulesFile is the part of a Prometheus rules file the tests read.
type rulesFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func TestRulesNameExportedMetrics(t *testing.T) {
	names := exported(t)
	raw, err := os.ReadFile("rules/floodgate.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f rulesFile
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	alerts := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = true
			checkNames(t, "alert "+r.Alert, r.Expr, names)
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: want a severity label, a summary and a description", r.Alert)
			}
		}
	}
	// The conditions the issue asks alerts for.
	for _, a := range []string{"FloodgateDeniedRatioHigh", "FloodgateStoreFallbacks", "FloodgateBreakerOpen", "FloodgateStoreTimeouts"} {
		if !alerts[a] {
			t.Errorf("no alert %s", a)
		}
	}
}

// TestRulesPromtool runs promtool check rules and promtool test rules,
// when promtool is installed (Debian's prometheus package has it) or
// FLOODGATE_PROMTOOL names it.
func TestRulesPromtool(t *testing.T) {
	promtool := os.Getenv("FLOODGATE_PROMTOOL")
	if promtool == "" {
		var err error
		if promtool, err = exec.LookPath("promtool"); err != nil {
			t.Skip("no promtool on PATH; install Debian's prometheus package or set FLOODGATE_PROMTOOL")
		}
	}
	for _, args := range [][]string{
		{"check", "rules", "floodgate.rules.yml"},
		{"test", "rules", "floodgate.rules.test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "rules"
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
