// Command dashboard renders a Grafana dashboard's panels as one PNG from a
// real Prometheus: it reads the dashboard's JSON, runs every query of
// every panel as a range query against the Prometheus at -prom, and draws
// one chart per panel, in the dashboard's order, two to a row. It is how
// docs/observability.md's picture is made from a real scrape, without a
// Grafana server:
//
//	cd bench && go run ./cmd/dashboard -prom http://127.0.0.1:9090 \
//	    -dashboard ../fgprom/dashboard/floodgate.json \
//	    -since 5m -out ../docs/observability-dashboard.png
//
// Grafana's variables are replaced before a query runs: $__rate_interval
// and $__interval by -rate, $__range by the queried span, and any other
// $name or ${name} by ".*" (the dashboards' variables select with =~, so
// every series is drawn).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"math"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

func main() {
	prom := flag.String("prom", "http://127.0.0.1:9090", "the Prometheus server's base URL")
	dash := flag.String("dashboard", "", "the Grafana dashboard JSON file")
	since := flag.Duration("since", 5*time.Minute, "the span drawn, ending now")
	rate := flag.String("rate", "30s", "what $__rate_interval and $__interval stand for")
	out := flag.String("out", "dashboard.png", "the PNG file written")
	flag.Parse()
	if err := run(*prom, *dash, *since, *rate, *out); err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
}

// dashboard is the part of a Grafana dashboard's JSON this command reads.
type dashboard struct {
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Type    string   `json:"type"`
	Title   string   `json:"title"`
	Targets []target `json:"targets"`
	Panels  []panel  `json:"panels"` // a collapsed row's panels
}

type target struct {
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
}

// series is one line of a chart.
type series struct {
	label  string
	points plotter.XYs
}

func run(prom, dashFile string, since time.Duration, rate, out string) error {
	if dashFile == "" {
		return fmt.Errorf("-dashboard is required")
	}
	raw, err := os.ReadFile(dashFile)
	if err != nil {
		return err
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		return fmt.Errorf("%s: %w", dashFile, err)
	}
	var panels []panel
	for _, p := range d.Panels {
		if p.Type == "row" {
			panels = append(panels, p.Panels...)
			continue
		}
		panels = append(panels, p)
	}
	end := time.Now()
	start := end.Add(-since)
	step := max(since/240, time.Second)
	var charts []*plot.Plot
	for _, p := range panels {
		if len(p.Targets) == 0 {
			continue
		}
		var lines []series
		for _, t := range p.Targets {
			q := expand(t.Expr, rate, since)
			s, err := queryRange(prom, q, start, end, step)
			if err != nil {
				return fmt.Errorf("panel %q: %s: %w", p.Title, q, err)
			}
			for i := range s {
				s[i].label = legend(t.LegendFormat, s[i].label)
			}
			lines = append(lines, s...)
		}
		c, err := chart(p.Title, lines, start)
		if err != nil {
			return fmt.Errorf("panel %q: %w", p.Title, err)
		}
		charts = append(charts, c)
	}
	if len(charts) == 0 {
		return fmt.Errorf("%s: no panel with a query", dashFile)
	}
	return save(out, d.Title, charts)
}

var variable = regexp.MustCompile(`\$\{?(\w+)\}?`)

// expand replaces Grafana's variables in a query.
func expand(q, rate string, span time.Duration) string {
	return variable.ReplaceAllStringFunc(q, func(v string) string {
		switch strings.Trim(v, "${}") {
		case "__rate_interval", "__interval":
			return rate
		case "__range":
			return fmt.Sprintf("%ds", int(span.Seconds()))
		}
		return ".*"
	})
}

// queryRange runs one range query; each series' label is its metric's
// labels as JSON, for legend to format.
func queryRange(prom, q string, start, end time.Time, step time.Duration) ([]series, error) {
	v := url.Values{}
	v.Set("query", q)
	v.Set("start", strconv.FormatInt(start.Unix(), 10))
	v.Set("end", strconv.FormatInt(end.Unix(), 10))
	v.Set("step", strconv.FormatFloat(step.Seconds(), 'f', -1, 64))
	resp, err := http.Get(strings.TrimRight(prom, "/") + "/api/v1/query_range?" + v.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("prometheus: %s", body.Error)
	}
	var out []series
	for _, r := range body.Data.Result {
		labels, _ := json.Marshal(r.Metric)
		s := series{label: string(labels)}
		for _, p := range r.Values {
			ts, _ := p[0].(float64)
			str, _ := p[1].(string)
			y, err := strconv.ParseFloat(str, 64)
			if err != nil || math.IsNaN(y) || math.IsInf(y, 0) {
				continue
			}
			s.points = append(s.points, plotter.XY{X: ts, Y: y})
		}
		if len(s.points) > 0 {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].label < out[j].label })
	return out, nil
}

var placeholder = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)

// legend formats a series' name from Grafana's legendFormat and its labels
// (JSON, from queryRange).
func legend(format, labelsJSON string) string {
	var labels map[string]string
	_ = json.Unmarshal([]byte(labelsJSON), &labels)
	if format == "" || format == "__auto" {
		var parts []string
		for k, v := range labels {
			if k != "__name__" {
				parts = append(parts, k+"="+v)
			}
		}
		sort.Strings(parts)
		return strings.Join(parts, " ")
	}
	return placeholder.ReplaceAllStringFunc(format, func(m string) string {
		return labels[strings.TrimSpace(strings.Trim(m, "{}"))]
	})
}

var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x6f, B: 0xd0, A: 0xff},
	color.RGBA{R: 0xe0, G: 0x7b, B: 0x10, A: 0xff},
	color.RGBA{R: 0x2a, G: 0x9d, B: 0x4a, A: 0xff},
	color.RGBA{R: 0x8e, G: 0x44, B: 0xad, A: 0xff},
	color.RGBA{R: 0xc0, G: 0x39, B: 0x2b, A: 0xff},
	color.RGBA{R: 0x55, G: 0x55, B: 0x55, A: 0xff},
}

// chart draws one panel: its series as lines, x in seconds from start.
func chart(title string, lines []series, start time.Time) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "seconds"
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = vg.Points(7)
	if len(lines) == 0 {
		p.Title.Text = title + " (no data)"
		return p, nil
	}
	for i, s := range lines {
		pts := make(plotter.XYs, len(s.points))
		for j, pt := range s.points {
			pts[j] = plotter.XY{X: pt.X - float64(start.Unix()), Y: pt.Y}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		l.Color = palette[i%len(palette)]
		l.Width = vg.Points(1.2)
		p.Add(l)
		if i < 8 {
			p.Legend.Add(s.label, l)
		}
	}
	return p, nil
}

// save draws the charts two to a row under the dashboard's title.
func save(path, title string, charts []*plot.Plot) error {
	plot.DefaultFont = font.Font{Typeface: "Liberation", Variant: "Sans"}
	plotter.DefaultFont = plot.DefaultFont
	const cols = 2
	rows := (len(charts) + cols - 1) / cols
	w, h := vg.Points(1200), vg.Points(float64(260*rows+40))
	img := vgimg.New(w, h)
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	top := draw.Crop(dc, 0, 0, 0, -vg.Points(40))
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, cols)
		for j := range cols {
			if k := i*cols + j; k < len(charts) {
				grid[i][j] = charts[k]
			}
		}
	}
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(12), PadY: vg.Points(12), PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(6)}
	canvases := plot.Align(grid, tiles, top)
	for i := range grid {
		for j := range grid[i] {
			if grid[i][j] != nil {
				grid[i][j].Draw(canvases[i][j])
			}
		}
	}
	titleFont := plot.DefaultFont
	titleFont.Size = vg.Points(14)
	dc.FillText(draw.TextStyle{Color: color.Black, Font: titleFont, Handler: plot.DefaultTextHandler}, vg.Point{X: vg.Points(12), Y: h - vg.Points(28)}, title)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
