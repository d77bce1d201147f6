// Command regions renders, from package region's simulator, what each
// region holds of the current window and what it admits per second over
// five minutes of the scenario: Q = 10,000 per minute over three
// regions (floors of 5%), demand 60/30/10 at 1.2·Q, turning to 10/30/60
// at 2:30, and region a cut off from the coordinator at 3:20. It writes
// an SVG (no plotting dependency: the figure is a few polylines).
//
//	cd bench && go run ./regions -o regions/regions.svg
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/region"
	"github.com/floodgate-go/floodgate/region/regionsim"
)

const (
	q      = 10_000
	window = time.Minute
)

func main() {
	out := flag.String("o", "regions.svg", "the SVG to write")
	seed := flag.Uint64("seed", 1, "the simulator's seed")
	flag.Parse()
	f, err := os.Create(*out)
	if err != nil {
		log.Fatal(err)
	}
	if err := render(f, *seed); err != nil {
		log.Fatal(err)
	}
	if err := f.Close(); err != nil {
		log.Fatal(err)
	}
}

func render(w io.Writer, seed uint64) error {
	regions := []region.Region{{Name: "a", Floor: 0.05}, {Name: "b", Floor: 0.05}, {Name: "c", Floor: 0.05}}
	step, cut := 150*time.Second, 200*time.Second
	res, err := regionsim.Run(regionsim.Config{Seed: seed, Regions: regions, Limit: q, Window: window,
		Duration: 5 * window, MaxSkew: 200 * time.Millisecond, Noise: 0.02,
		Demand: func(r int, t time.Duration) float64 {
			shares := []float64{0.6, 0.3, 0.1}
			if t >= step {
				shares = []float64{0.1, 0.3, 0.6}
			}
			return shares[r] * 1.2 * q / window.Seconds()
		},
		Cut: func(r int, t time.Duration) bool { return r == 0 && t >= cut },
	})
	if err != nil {
		return err
	}
	// Admissions per second, from the samples' running totals per window.
	n := len(res.Samples)
	perSec := make([][3]float64, n)
	for i := 1; i < n; i++ {
		for r := range 3 {
			d := res.Samples[i].Used[r]
			if res.Samples[i].Window == res.Samples[i-1].Window {
				d -= res.Samples[i-1].Used[r]
			}
			perSec[i][r] = float64(d) / (res.Samples[i].T - res.Samples[i-1].T).Seconds()
		}
	}
	const W, H, left, right, top, ph, gap = 900, 560, 70, 20, 40, 200, 70
	colors := []string{"#1f77b4", "#ff7f0e", "#2ca02c"}
	x := func(t time.Duration) float64 { return left + float64(t)/float64(5*window)*(W-left-right) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", W, H)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	panel := func(y0 float64, title string, ymax float64, yticks []float64, series func(i, r int) float64) {
		y := func(v float64) float64 { return y0 + ph - v/ymax*ph }
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" font-weight="bold">%s</text>`+"\n", left, y0-10, title)
		for _, v := range yticks {
			fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%.0f</text>`+"\n",
				left, W-right, y(v), y(v), left-6, y(v)+4, v)
		}
		for m := 0; m <= 5; m++ {
			t := time.Duration(m) * window
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" stroke="#bbb" stroke-dasharray="3,3"/><text x="%.1f" y="%.0f" text-anchor="middle">%d:00</text>`+"\n",
				x(t), x(t), y0, y0+ph, x(t), y0+ph+16, m)
		}
		for _, ev := range []struct {
			t    time.Duration
			text string
		}{{step, "demand shifts"}, {cut, "a cut off"}} {
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" stroke="#c00"/><text x="%.1f" y="%.0f" fill="#c00">%s</text>`+"\n",
				x(ev.t), x(ev.t), y0, y0+ph, x(ev.t)+4, y0+12, ev.text)
		}
		for r := range 3 {
			var pts []string
			for i, s := range res.Samples {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.T), y(series(i, r))))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", colors[r], strings.Join(pts, " "))
		}
	}
	panel(top, "held of the current window (granted − given back), units; Q = 10,000 per minute", q*0.7,
		[]float64{0, 2000, 4000, 6000}, func(i, r int) float64 { return float64(res.Samples[i].Held[r]) })
	panel(top+ph+gap, "admitted per second", 150, []float64{0, 50, 100, 150}, func(i, r int) float64 { return perSec[i][r] })
	for r, reg := range regions {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="14" height="3" fill="%s"/><text x="%d" y="%d">region %s (demand %s)</text>`+"\n",
			left+r*220, H-22, colors[r], left+r*220+20, H-17, reg.Name, []string{"60% → 10%", "30%", "10% → 60%"}[r])
	}
	var totals []string
	for i, a := range res.Admitted[:5] {
		totals = append(totals, fmt.Sprintf("%d:00 %d", i, a[0]+a[1]+a[2]))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#444">admitted per window: %s (seed %d)</text>`+"\n", left, H-40, strings.Join(totals, ", "), seed)
	b.WriteString("</svg>\n")
	_, err = io.WriteString(w, b.String())
	return err
}
