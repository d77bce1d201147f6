package dashboard_test

import (
	"testing"

	"github.com/floodgate-go/floodgate/fgprom/dashboard"
)

func TestPanels(t *testing.T) {
	panels, err := dashboard.Panels()
	if err != nil {
		t.Fatal(err)
	}
	titles := map[string]bool{}
	for _, p := range panels {
		if titles[p.Title] {
			t.Errorf("two panels are titled %q", p.Title)
		}
		titles[p.Title] = true
		for _, q := range p.Queries {
			if q.Expr == "" || q.Legend == "" {
				t.Errorf("panel %q: a query without an expression or a legend: %+v", p.Title, q)
			}
		}
	}
	for _, want := range []string{"Decision rate by limiter", "Denied (429) rate by limiter", "Denied ratio", "Breaker state"} {
		if !titles[want] {
			t.Errorf("no panel %q", want)
		}
	}
}
