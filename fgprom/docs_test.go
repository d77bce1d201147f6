package fgprom_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// tableRow matches a row of docs/observability.md's metric table:
// | `name` | type | `label`, `label` | meaning |
var tableRow = regexp.MustCompile("^\\| `(floodgate_[a-z_]+)` \\| (counter|gauge|histogram) \\| ([^|]*) \\|")

// TestDocsListEveryMetric checks that docs/observability.md's table has a
// row for every metric the adapter exports, with its type and labels, and
// none for a metric it does not.
func TestDocsListEveryMetric(t *testing.T) {
	raw, err := os.ReadFile("../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		typ    string
		labels []string
	}
	rows := map[string]row{}
	for _, line := range strings.Split(string(raw), "\n") {
		m := tableRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var labels []string
		for _, l := range strings.Split(m[3], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" {
				labels = append(labels, l)
			}
		}
		slices.Sort(labels)
		rows[m[1]] = row{m[2], labels}
	}
	types := map[dto.MetricType]string{dto.MetricType_COUNTER: "counter", dto.MetricType_GAUGE: "gauge", dto.MetricType_HISTOGRAM: "histogram"}
	mfs := families(t, newMetrics(t, nil))
	for name, mf := range mfs {
		r, ok := rows[name]
		if !ok {
			t.Errorf("docs/observability.md: no row for %s", name)
			continue
		}
		if want := types[mf.GetType()]; r.typ != want {
			t.Errorf("docs/observability.md: %s is a %s, the table says %s", name, want, r.typ)
		}
		var labels []string
		for _, l := range mf.Metric[0].Label {
			labels = append(labels, l.GetName())
		}
		slices.Sort(labels)
		if !slices.Equal(r.labels, labels) {
			t.Errorf("docs/observability.md: %s has labels %v, the table says %v", name, labels, r.labels)
		}
	}
	for name := range rows {
		if _, ok := mfs[name]; !ok {
			t.Errorf("docs/observability.md lists %s, which the adapter does not export", name)
		}
	}
}
