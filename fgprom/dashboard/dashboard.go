// Package dashboard holds floodgate's Grafana dashboard, floodgate.json,
// for programs that show or install it: import it into Grafana
// (Dashboards, New, Import), or read its panels' PromQL queries with
// Panels. Every query names metrics of the adapter package
// github.com/floodgate-go/floodgate/fgprom (a test checks it); the
// panels select limiters and stores with the dashboard's variables,
// $limiter and $store, and rates with Grafana's $__rate_interval.
package dashboard

import (
	_ "embed"
	"encoding/json"
	"fmt"
)

// JSON is the dashboard, in Grafana's dashboard JSON model.
//
//go:embed floodgate.json
var JSON []byte

// Panel is a panel of the dashboard: its title and its queries, in order.
type Panel struct {
	Title       string
	Description string
	Queries     []Query
}

// Query is one query of a panel.
type Query struct {
	// Expr is the PromQL expression, with the dashboard's variables.
	Expr string
	// Legend is the legend format of its series ("{{limiter}}").
	Legend string
}

// panel is the part of a panel of Grafana's JSON model that Panels reads.
type panel struct {
	Type        string  `json:"type"`
	Title       string  `json:"title"`
	Description string  `json:"description"`
	Panels      []panel `json:"panels"` // a collapsed row's
	Targets     []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
}

// Panels returns the panels that have queries, in the dashboard's
// order; the panels of a collapsed row come after it.
func Panels() ([]Panel, error) {
	var d struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(JSON, &d); err != nil {
		return nil, fmt.Errorf("dashboard: floodgate.json: %w", err)
	}
	var out []Panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if len(p.Targets) > 0 {
				q := Panel{Title: p.Title, Description: p.Description}
				for _, t := range p.Targets {
					q.Queries = append(q.Queries, Query{Expr: t.Expr, Legend: t.LegendFormat})
				}
				out = append(out, q)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out, nil
}
