package main

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

var (
	colorFloodgate = color.RGBA{R: 0x1f, G: 0x6f, B: 0xd0, A: 0xff}
	colorPeer      = color.RGBA{R: 0x9a, G: 0x9a, B: 0x9a, A: 0xff}
	colorQuota     = color.RGBA{R: 0xd0, G: 0x30, B: 0x30, A: 0xff}
	// series are the line and bar colours of the time-series charts.
	series = []color.Color{
		color.RGBA{R: 0x1f, G: 0x6f, B: 0xd0, A: 0xff},
		color.RGBA{R: 0xe0, G: 0x7b, B: 0x10, A: 0xff},
		color.RGBA{R: 0x2a, G: 0x9d, B: 0x4a, A: 0xff},
		color.RGBA{R: 0x8e, G: 0x44, B: 0xad, A: 0xff},
		color.RGBA{R: 0xc0, G: 0x39, B: 0x2b, A: 0xff},
		color.RGBA{R: 0x55, G: 0x55, B: 0x55, A: 0xff},
	}
)

// useSans makes gonum draw with Liberation Sans instead of its default
// serif, and the SVG files name Arial and sans-serif after it.
func useSans() {
	plot.DefaultFont = font.Font{Typeface: "Liberation", Variant: "Sans"}
	plotter.DefaultFont = plot.DefaultFont
}

// bar is one bar of a panel.
type bar struct {
	label string
	value float64
	text  string // written at the end of the bar
}

// panel is one horizontal bar chart of a chart file.
type panel struct {
	title  string
	xLabel string
	bars   []bar
	refX   float64 // when > 0, a vertical reference line (the quota)
	refTxt string
}

// chart is a named picture made of panels stacked vertically.
type chart struct {
	file   string
	title  string
	panels []panel
}

// renderCharts writes every chart the data allows and records which.
func (r *report) renderCharts() error {
	dir := filepath.Join(r.opts.out, "charts")
	for _, c := range r.benchmarkCharts() {
		if len(c.panels) == 0 {
			continue
		}
		path := filepath.Join(dir, c.file+"."+r.opts.format)
		if err := savePanels(path, c.panels); err != nil {
			return fmt.Errorf("%s: %w", c.file, err)
		}
		r.charts = append(r.charts, chartFile{name: c.file, title: c.title, path: path})
	}
	if r.quickstartCSV != "" {
		path := filepath.Join(dir, "quickstart."+r.opts.format)
		if err := quickstartChart(r.quickstartCSV, path); err != nil {
			r.quickstartErr = "quickstart chart: " + err.Error()
		} else {
			r.charts = append(r.charts, chartFile{name: "quickstart", title: "The five algorithms on the quickstart traffic", path: path})
		}
	}
	if r.adaptiveCSV != "" {
		path := filepath.Join(dir, "adaptive."+r.opts.format)
		if err := adaptiveChart(r.adaptiveCSV, path); err != nil {
			r.adaptiveErr = "adaptive chart: " + err.Error()
		} else {
			r.charts = append(r.charts, chartFile{name: "adaptive", title: "Adaptive concurrency on the simulated server", path: path})
		}
	}
	return nil
}

// chartFile is a rendered chart.
type chartFile struct {
	name, title, path string
}

// benchmarkCharts builds the bar charts from the parsed results.
func (r *report) benchmarkCharts() []chart {
	p := r.parsed
	nsPanel := func(scenario, title string) (panel, bool) {
		pn := panel{title: title, xLabel: "ns per decision (median; shorter is better)"}
		for _, lib := range p.libraries(scenario) {
			res, ok := p.get(scenario, lib, "ns/op")
			if !ok {
				continue
			}
			med, _, _, _ := res.median("ns/op")
			allocs, _, _, _ := res.median("allocs/op")
			pn.bars = append(pn.bars, bar{label: lib, value: med, text: fmt.Sprintf("%s ns, %s allocs", fmtNum(med), fmtNum(allocs))})
		}
		return pn, len(pn.bars) > 0
	}
	var out []chart

	in := chart{file: "inprocess", title: "In-process decisions"}
	for _, s := range []struct{ id, title string }{
		{"InProcessOneKeyAllowed", "One key, serial, every call admitted"},
		{"InProcessOneKeyDenied", "One key, serial, every call denied"},
		{"InProcess100kKeysParallel", "100,000 keys, RunParallel"},
	} {
		if pn, ok := nsPanel(s.id, s.title); ok {
			in.panels = append(in.panels, pn)
		}
	}
	out = append(out, in)

	rd := chart{file: "redis", title: "Redis-backed decisions"}
	if res := p.libraries("RedisSerial"); len(res) > 0 {
		pn := panel{title: "Redis, one decision at a time (latency)", xLabel: "µs per decision (median; shorter is better)"}
		for _, lib := range res {
			if rr, ok := p.get("RedisSerial", lib, "ns/op"); ok {
				med, _, _, _ := rr.median("ns/op")
				pn.bars = append(pn.bars, bar{label: lib, value: med / 1e3, text: fmt.Sprintf("%.1f µs", med/1e3)})
			}
		}
		if len(pn.bars) > 0 {
			rd.panels = append(rd.panels, pn)
		}
	}
	for _, s := range []struct{ id, title string }{
		{"Redis64Goroutines", "Redis, 64 goroutines over 1,000 keys (throughput)"},
		{"Lease64GoroutinesOneKey", "Lease vs plain Redis, 64 goroutines, one hot key"},
		{"Lease64Goroutines1000Keys", "Lease vs plain Redis, 64 goroutines, 1,000 keys"},
	} {
		pn := panel{title: s.title, xLabel: "decisions per second (median; longer is better)"}
		for _, lib := range p.libraries(s.id) {
			if rr, ok := p.get(s.id, lib, "ns/op"); ok {
				med, _, _, _ := rr.median("ns/op")
				pn.bars = append(pn.bars, bar{label: lib, value: 1e9 / med, text: fmtRate(1e9 / med)})
			}
		}
		if len(pn.bars) > 0 {
			rd.panels = append(rd.panels, pn)
		}
	}
	out = append(out, rd)

	mem := chart{file: "memory", title: "Memory per key"}
	for _, s := range []struct{ id, title string }{
		{"MemoryPerKey", "In-process: heap bytes per tracked key"},
		{"RedisMemoryPerKey", "Redis: MEMORY USAGE per key"},
	} {
		pn := panel{title: s.title, xLabel: "bytes per key (median; shorter is better)"}
		for _, lib := range p.libraries(s.id) {
			if rr, ok := p.get(s.id, lib, "B/key"); ok {
				med, _, _, _ := rr.median("B/key")
				pn.bars = append(pn.bars, bar{label: lib, value: med, text: fmt.Sprintf("%.0f B", med)})
			}
		}
		if len(pn.bars) > 0 {
			mem.panels = append(mem.panels, pn)
		}
	}
	out = append(out, mem)

	acc := chart{file: "accuracy", title: "Accuracy under concurrency"}
	pn := panel{title: "4 instances on one Redis, 1,000 concurrent requests, quota 100", xLabel: "most requests admitted in any round (the quota is 100)", refX: 100, refTxt: "quota"}
	for _, lib := range p.libraries("Accuracy") {
		if rr, ok := p.get("Accuracy", lib, "admitted"); ok {
			most, _ := rr.max("admitted")
			pn.bars = append(pn.bars, bar{label: lib, value: most, text: fmt.Sprintf("%.0f", most)})
		}
	}
	if len(pn.bars) > 0 {
		acc.panels = append(acc.panels, pn)
	}
	out = append(out, acc)

	ad := chart{file: "adaptive-overhead", title: "Adaptive concurrency overhead"}
	for _, s := range []struct{ id, title string }{
		{"AdaptiveSerial", "Acquire + Success, serial"},
		{"AdaptiveParallel", "Acquire + Success, GOMAXPROCS goroutines"},
	} {
		if pn, ok := nsPanel(s.id, s.title); ok {
			ad.panels = append(ad.panels, pn)
		}
	}
	out = append(out, ad)
	return out
}

// barPlot draws a panel: floodgate's bars in blue, the others in grey,
// first bar on top, the value written after each bar.
func barPlot(pn panel) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = pn.title
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.X.Label.Text = pn.xLabel
	p.X.Min = 0
	n := len(pn.bars)
	fg := make(plotter.Values, n)
	other := make(plotter.Values, n)
	names := make([]string, n)
	var xys plotter.XYs
	var texts []string
	maxV := 0.0
	for i, b := range pn.bars {
		j := n - 1 - i // first bar on top
		names[j] = b.label
		if strings.HasPrefix(b.label, "floodgate") {
			fg[j] = b.value
		} else {
			other[j] = b.value
		}
		xys = append(xys, plotter.XY{X: b.value, Y: float64(j)})
		texts = append(texts, b.text)
		maxV = max(maxV, b.value)
	}
	// A bar far longer than the others (a peer 20 times slower) would
	// flatten them: the axis stops at four times the median bar and the
	// longer bars are cut there, their label saying so.
	vals := make([]float64, 0, n)
	for _, b := range pn.bars {
		vals = append(vals, b.value)
	}
	if limit := 4 * median(vals); limit > 0 && maxV > limit && pn.refX == 0 {
		for i := range xys {
			if xys[i].X > limit {
				xys[i].X = limit
				texts[i] += " (off the scale)"
				j := int(xys[i].Y)
				fg[j], other[j] = min(fg[j], limit), min(other[j], limit)
			}
		}
		maxV = limit
	}
	for _, vs := range []struct {
		v plotter.Values
		c color.Color
	}{{fg, colorFloodgate}, {other, colorPeer}} {
		bc, err := plotter.NewBarChart(vs.v, vg.Points(11))
		if err != nil {
			return nil, err
		}
		bc.Horizontal = true
		bc.Color = vs.c
		bc.LineStyle.Width = 0
		p.Add(bc)
	}
	labels, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: texts})
	if err != nil {
		return nil, err
	}
	for i := range labels.TextStyle {
		labels.TextStyle[i].Font.Size = vg.Points(8)
		labels.TextStyle[i].YAlign = draw.YCenter
	}
	labels.Offset = vg.Point{X: vg.Points(4)}
	p.Add(labels)
	if pn.refX > 0 {
		line, err := plotter.NewLine(plotter.XYs{{X: pn.refX, Y: -0.6}, {X: pn.refX, Y: float64(n) - 0.4}})
		if err != nil {
			return nil, err
		}
		line.Color = colorQuota
		line.Width = vg.Points(1.2)
		line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(line)
		maxV = max(maxV, pn.refX)
	}
	p.NominalY(names...)
	p.X.Tick.Marker = humanTicks{}
	p.X.Max = maxV * 1.45
	if maxV == 0 {
		p.X.Max = 1
	}
	p.Y.Min, p.Y.Max = -0.6, float64(n)-0.4
	return p, nil
}

// savePanels stacks the panels vertically, each as tall as its bars need,
// and writes them to path (SVG or PNG by extension).
func savePanels(path string, panels []panel) error {
	const width = 7.5 * vg.Inch
	heights := make([]vg.Length, len(panels))
	var total vg.Length
	for i, pn := range panels {
		heights[i] = vg.Points(70) + vg.Points(17)*vg.Length(len(pn.bars))
		total += heights[i]
	}
	plots := make([]*plot.Plot, len(panels))
	for i, pn := range panels {
		p, err := barPlot(pn)
		if err != nil {
			return err
		}
		plots[i] = p
	}
	return drawStacked(path, width, heights, plots)
}

// drawStacked draws plots from top to bottom with the given heights.
func drawStacked(path string, width vg.Length, heights []vg.Length, plots []*plot.Plot) error {
	var total vg.Length
	for _, h := range heights {
		total += h
	}
	var canvas vg.CanvasWriterTo
	if strings.HasSuffix(path, ".png") {
		canvas = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(width, total), vgimg.UseDPI(144))}
	} else {
		canvas = vgsvg.New(width, total)
	}
	dc := draw.New(canvas)
	// A white background: GitHub's dark theme would otherwise show the
	// black text on a dark page.
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	top := total
	for i, p := range plots {
		sub := dc
		sub.Rectangle = vg.Rectangle{Min: vg.Point{X: 0, Y: top - heights[i]}, Max: vg.Point{X: width, Y: top}}
		sub = draw.Crop(sub, vg.Points(6), -vg.Points(10), vg.Points(4), -vg.Points(6))
		p.Draw(sub)
		top -= heights[i]
	}
	var buf bytes.Buffer
	if _, err := canvas.WriteTo(&buf); err != nil {
		return err
	}
	data := buf.Bytes()
	if strings.HasSuffix(path, ".svg") {
		// gonum names only its own font; readers without Liberation Sans
		// would fall back to a serif font. Arial has the same metrics.
		data = bytes.ReplaceAll(data, []byte("font-family:Liberation Sans;"), []byte("font-family:'Liberation Sans',Arial,Helvetica,sans-serif;"))
	}
	return os.WriteFile(path, data, 0o644)
}

// readCSV returns the rows of a CSV file, header first.
func readCSV(path string) ([][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(rows) < 2 {
		return nil, fmt.Errorf("%s: no data rows", path)
	}
	return rows, nil
}

// quickstartChart plots, per tick, the offered requests and what each
// algorithm admitted, one row per series on a shared time axis. The CSV is
// the quickstart's: t_seconds, offered, then "<alg> admitted" and
// "<alg> denied" per algorithm.
func quickstartChart(csvPath, path string) error {
	rows, err := readCSV(csvPath)
	if err != nil {
		return err
	}
	header := rows[0]
	if len(header) < 3 || header[0] != "t_seconds" || header[1] != "offered" {
		return fmt.Errorf("%s: unexpected header %q", csvPath, header)
	}
	ts := make([]float64, 0, len(rows)-1)
	for _, row := range rows[1:] {
		t, err := strconv.ParseFloat(row[0], 64)
		if err != nil {
			return err
		}
		ts = append(ts, t)
	}
	tick := 0.1
	if len(ts) > 1 {
		tick = ts[1] - ts[0]
	}
	column := func(i int) ([]float64, error) {
		vs := make([]float64, 0, len(rows)-1)
		for _, row := range rows[1:] {
			v, err := strconv.ParseFloat(row[i], 64)
			if err != nil {
				return nil, err
			}
			vs = append(vs, v)
		}
		return vs, nil
	}
	type row struct {
		name  string
		vals  []float64
		color color.Color
	}
	offered, err := column(1)
	if err != nil {
		return err
	}
	rowsOut := []row{{name: "offered", vals: offered, color: colorPeer}}
	for i := 2; i < len(header); i++ {
		name, ok := strings.CutSuffix(header[i], " admitted")
		if !ok {
			continue
		}
		vals, err := column(i)
		if err != nil {
			return err
		}
		rowsOut = append(rowsOut, row{name: name, vals: vals, color: series[(len(rowsOut)-1)%len(series)]})
	}
	window := int(math.Round(1 / tick))
	ymax := 0.0
	for _, r := range rowsOut[1:] {
		ymax = max(ymax, slices.Max(r.vals))
	}
	var plots []*plot.Plot
	var heights []vg.Length
	for i, r := range rowsOut {
		p := plot.New()
		total, most := 0.0, 0.0
		for j := range r.vals {
			total += r.vals[j]
			sum := 0.0
			for k := j; k < min(j+window, len(r.vals)); k++ {
				sum += r.vals[k]
			}
			most = max(most, sum)
		}
		if i == 0 {
			p.Title.Text = fmt.Sprintf("offered: %.0f requests (steady 10/s, a burst of 30, 10 + 10 across the 4 s boundary)", total)
		} else {
			p.Title.Text = fmt.Sprintf("%s: %.0f admitted, at most %.0f in any 1 s (the limit is 10)", r.name, total, most)
		}
		p.Title.TextStyle.Font.Size = vg.Points(9.5)
		p.Title.Padding = vg.Points(2)
		bins := make([]plotter.HistogramBin, len(ts))
		for j, t := range ts {
			bins[j] = plotter.HistogramBin{Min: t, Max: t + tick, Weight: r.vals[j]}
		}
		h := &plotter.Histogram{Bins: bins, Width: tick, FillColor: r.color}
		h.LineStyle.Width = 0
		p.Add(h)
		p.X.Min, p.X.Max = ts[0], ts[len(ts)-1]+tick
		var xt []plot.Tick
		for x := math.Ceil(p.X.Min); x <= p.X.Max; x++ {
			xt = append(xt, plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'f', -1, 64)})
		}
		p.X.Tick.Marker = plot.ConstantTicks(xt)
		p.Y.Min = 0
		p.Y.Max = ymax
		if i == 0 {
			p.Y.Max = slices.Max(r.vals)
		}
		p.Y.Label.Text = "per tick"
		p.Y.Label.TextStyle.Font.Size = vg.Points(8)
		p.Y.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 0, Label: "0"}, {Value: p.Y.Max, Label: strconv.FormatFloat(p.Y.Max, 'f', 0, 64)}})
		if i == len(rowsOut)-1 {
			p.X.Label.Text = fmt.Sprintf("seconds (one bar per %.0f ms tick)", tick*1000)
		}
		plots = append(plots, p)
		heights = append(heights, vg.Points(88))
	}
	heights[len(heights)-1] += vg.Points(22)
	return drawStacked(path, 7.5*vg.Inch, heights, plots)
}

// adaptiveChart plots the adaptive simulator's series: goodput against the
// offered load, the limit, and the p99 latency, per limiter. The CSV is
// examples/adaptive's: label, phase, t_s, offered_rps, goodput_rps,
// rejected_rps, limit, inflight, p50_ms, p99_ms.
func adaptiveChart(csvPath, path string) error {
	rows, err := readCSV(csvPath)
	if err != nil {
		return err
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	for _, need := range []string{"label", "t_s", "offered_rps", "goodput_rps", "limit", "p99_ms"} {
		if _, ok := col[need]; !ok {
			return fmt.Errorf("%s: no column %q in %q", csvPath, need, rows[0])
		}
	}
	type pts struct{ offered, goodput, limit, p99 plotter.XYs }
	var labels []string
	data := map[string]*pts{}
	num := func(row []string, name string) float64 {
		v, _ := strconv.ParseFloat(row[col[name]], 64)
		return v
	}
	for _, row := range rows[1:] {
		l := row[col["label"]]
		d, ok := data[l]
		if !ok {
			d = &pts{}
			data[l] = d
			labels = append(labels, l)
		}
		t := num(row, "t_s")
		d.offered = append(d.offered, plotter.XY{X: t, Y: num(row, "offered_rps")})
		d.goodput = append(d.goodput, plotter.XY{X: t, Y: num(row, "goodput_rps")})
		if l != "none" {
			d.limit = append(d.limit, plotter.XY{X: t, Y: num(row, "limit")})
		}
		if p99 := num(row, "p99_ms"); p99 > 0 {
			d.p99 = append(d.p99, plotter.XY{X: t, Y: min(p99, 200)})
		}
	}
	newPlot := func(title, ylabel string) *plot.Plot {
		p := plot.New()
		p.Title.Text = title
		p.Title.TextStyle.Font.Size = vg.Points(10)
		p.Y.Label.Text = ylabel
		p.Legend.Top = true
		p.Legend.Left = true
		p.Legend.XOffs = vg.Points(8)
		p.Legend.TextStyle.Font.Size = vg.Points(8)
		p.Y.Tick.Marker = humanTicks{}
		return p
	}
	good := newPlot("Goodput (completed within the deadline) against the offered load", "requests/s")
	limit := newPlot("Concurrency limit", "requests in flight")
	lat := newPlot("p99 latency of completed requests (clipped at 200 ms)", "ms")
	lat.X.Label.Text = "simulated time; each tick starts a phase of offered load, as a multiple of the server's capacity"
	addLine := func(p *plot.Plot, xys plotter.XYs, c color.Color, name string, dashed bool) error {
		if len(xys) == 0 {
			return nil
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.Color = c
		l.Width = vg.Points(1.1)
		if dashed {
			l.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
		}
		p.Add(l)
		if p == good {
			p.Legend.Add(name, l)
		}
		return nil
	}
	if err := addLine(good, data[labels[0]].offered, color.Black, "offered", true); err != nil {
		return err
	}
	for i, l := range labels {
		c := series[i%len(series)]
		if l == "none" {
			c = colorPeer
		}
		d := data[l]
		if err := addLine(good, d.goodput, c, l, false); err != nil {
			return err
		}
		if err := addLine(limit, d.limit, c, l, false); err != nil {
			return err
		}
		if err := addLine(lat, d.p99, c, l, false); err != nil {
			return err
		}
	}
	// The phases' boundaries as the time axis' ticks.
	var bounds []plot.Tick
	phaseCol, hasPhase := col["phase"]
	last := ""
	for _, row := range rows[1:] {
		if row[col["label"]] != labels[0] {
			break
		}
		if hasPhase && row[phaseCol] != last {
			last = row[phaseCol]
			t := num(row, "t_s") - tickOf(rows, col)
			bounds = append(bounds, plot.Tick{Value: t, Label: strconv.FormatFloat(math.Round(t), 'f', -1, 64) + "s " + last})
		}
	}
	for _, p := range []*plot.Plot{good, limit, lat} {
		p.Y.Min = 0
		p.X.Min = 0
		if len(bounds) > 0 {
			p.X.Tick.Marker = plot.ConstantTicks(bounds)
		}
	}
	return drawStacked(path, 7.5*vg.Inch, []vg.Length{vg.Points(190), vg.Points(160), vg.Points(180)}, []*plot.Plot{good, limit, lat})
}

// humanTicks are gonum's default ticks labelled without trailing zeros,
// thousands and millions abbreviated.
type humanTicks struct{}

func (humanTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = human(ts[i].Value)
		}
	}
	return ts
}

func human(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// tickOf returns the series interval of the adaptive CSV: the time of its
// first row.
func tickOf(rows [][]string, col map[string]int) float64 {
	v, _ := strconv.ParseFloat(rows[1][col["t_s"]], 64)
	return v
}

// fmtNum formats a median for a chart label: integers as such, small
// values with one decimal.
func fmtNum(v float64) string {
	if v >= 100 || v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// fmtRate formats decisions per second.
func fmtRate(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM/s", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk/s", v/1e3)
	}
	return fmt.Sprintf("%.0f/s", v)
}
