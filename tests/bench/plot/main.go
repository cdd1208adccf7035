// Command plot draws throughput against worker count as an SVG line chart
// from a CSV file: a header row "workers,<series>,<series>…", then one row
// per worker count with each series' throughput (an empty cell skips that
// point). Lines starting with '#' are comments. The x axis is log2, since
// worker counts double.
//
//	go run ./bench/plot -in ../docs/throughput-vs-workers.csv \
//		-out ../docs/throughput-vs-workers.svg -subtitle "server, fsync, producers, duration"
package main

import (
	"encoding/csv"
	"flag"
	"fmt"
	"html"
	"math"
	"os"
	"strconv"
	"strings"
)

const (
	width, height            = 760, 460
	left, right, top, bottom = 80, 30, 70, 60 // margins
)

var colors = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd"}

func main() {
	in := flag.String("in", "docs/throughput-vs-workers.csv", "input CSV")
	out := flag.String("out", "docs/throughput-vs-workers.svg", "output SVG")
	title := flag.String("title", "Lifecycle throughput against worker slots (no-op handler)", "chart title")
	sub := flag.String("subtitle", "", "second title line (setup)")
	ylabel := flag.String("ylabel", "completed per second (within the window)", "y axis label")
	xlabel := flag.String("xlabel", "worker slots (log scale)", "x axis label")
	flag.Parse()
	if err := run(*in, *out, *title, *sub, *ylabel, *xlabel); err != nil {
		fmt.Fprintln(os.Stderr, "plot:", err)
		os.Exit(1)
	}
}

func run(in, out, title, sub, ylabel, xlabel string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.Comment = '#'
	rows, err := r.ReadAll()
	if err != nil {
		return err
	}
	if len(rows) < 2 || len(rows[0]) < 2 {
		return fmt.Errorf("%s: want a header and at least one row of two or more columns", in)
	}
	names := rows[0][1:]
	var xs []float64
	ys := make([][]float64, len(names)) // NaN: no point
	ymax := 0.0
	for _, row := range rows[1:] {
		x, err := strconv.ParseFloat(strings.TrimSpace(row[0]), 64)
		if err != nil || x <= 0 {
			return fmt.Errorf("%s: bad worker count %q", in, row[0])
		}
		xs = append(xs, x)
		for i := range names {
			y := math.NaN()
			if s := strings.TrimSpace(row[i+1]); s != "" {
				if y, err = strconv.ParseFloat(s, 64); err != nil {
					return fmt.Errorf("%s: %w", in, err)
				}
				ymax = math.Max(ymax, y)
			}
			ys[i] = append(ys[i], y)
		}
	}
	xlo, xhi := math.Log2(xs[0]), math.Log2(xs[0])
	for _, x := range xs {
		xlo, xhi = math.Min(xlo, math.Log2(x)), math.Max(xhi, math.Log2(x))
	}
	if xhi == xlo {
		xhi = xlo + 1
	}
	step := niceStep(ymax / 5)
	ytop := math.Max(step, math.Ceil(ymax*1.25/step)*step) // headroom for the legend
	pw, ph := float64(width-left-right), float64(height-top-bottom)
	px := func(x float64) float64 { return left + (math.Log2(x)-xlo)/(xhi-xlo)*pw }
	py := func(y float64) float64 { return top + ph - y/ytop*ph }

	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`, width, height, width, height)
	p(`<rect width="100%%" height="100%%" fill="white"/>`)
	p(`<text x="%d" y="26" text-anchor="middle" font-size="15" font-weight="bold">%s</text>`, width/2, html.EscapeString(title))
	p(`<text x="%d" y="46" text-anchor="middle">%s</text>`, width/2, html.EscapeString(sub))
	for y := 0.0; y <= ytop+step/2; y += step { // y grid, ticks, labels
		p(`<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`, left, py(y), left+pw, py(y))
		p(`<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%g</text>`, left-8, py(y), y)
	}
	for _, x := range xs { // x ticks at the measured worker counts
		p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`, px(x), top+ph, px(x), top+ph+5)
		p(`<text x="%.1f" y="%.1f" text-anchor="middle">%g</text>`, px(x), top+ph+20, x)
	}
	p(`<path d="M%d %d V%.1f H%.1f" fill="none" stroke="black"/>`, left, top, top+ph, left+pw)
	p(`<text x="%.1f" y="%d" text-anchor="middle">%s</text>`, left+pw/2, height-14, html.EscapeString(xlabel))
	p(`<text transform="translate(22 %.1f) rotate(-90)" text-anchor="middle">%s</text>`, top+ph/2, html.EscapeString(ylabel))
	// Legend box, top left inside the plot, then each series.
	lw := 0
	for _, name := range names {
		lw = max(lw, 50+7*len([]rune(name))) // about 7 px a character at 12 px
	}
	p(`<rect x="%d" y="%d" width="%d" height="%d" fill="white" stroke="#999"/>`, left+12, top+8, lw, 22*len(names)+8)
	for i, name := range names {
		c := colors[i%len(colors)]
		var d []string
		for j, x := range xs {
			if y := ys[i][j]; !math.IsNaN(y) {
				d = append(d, fmt.Sprintf("%.1f,%.1f", px(x), py(y)))
				p(`<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s, %g workers: %g/s</title></circle>`, px(x), py(y), c, html.EscapeString(name), x, y)
			}
		}
		p(`<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`, strings.Join(d, " "), c)
		ly := top + 23 + 22*i
		p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>`, left+20, ly, left+44, ly, c)
		p(`<text x="%d" y="%d" dominant-baseline="middle">%s</text>`, left+50, ly, html.EscapeString(name))
	}
	p(`</svg>`)
	return os.WriteFile(out, []byte(b.String()), 0o644)
}

// niceStep rounds raw up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*pow {
			return m * pow
		}
	}
	return 10 * pow
}
