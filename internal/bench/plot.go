package bench

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"strconv"
)

// Plot geometry and colours.
const (
	plotW, plotH                       = 1000, 600
	marginL, marginR, marginT, marginB = 100, 100, 70, 80
)

var (
	colAxis       = color.RGBA{0x33, 0x33, 0x33, 0xff}
	colGrid       = color.RGBA{0xe4, 0xe4, 0xe4, 0xff}
	colThroughput = color.RGBA{0x1f, 0x5f, 0xbf, 0xff}
	colP99        = color.RGBA{0xd0, 0x3a, 0x2a, 0xff}
)

// Plot draws throughput (sagas/s, left axis) and p99 latency (ms, right
// axis) against concurrency for the results of a sweep, as a PNG.
func Plot(w io.Writer, rs []Result, title string) error {
	if len(rs) == 0 {
		return errors.New("bench: plot: no results")
	}
	xs := make([]float64, len(rs))
	tp := make([]float64, len(rs))
	p99 := make([]float64, len(rs))
	logX := true
	for i, r := range rs {
		xs[i], tp[i], p99[i] = float64(r.Concurrency), r.SagasPerSecond, r.LatencyP99Ms
		if r.Mode == "open" {
			xs[i] = r.Rate
		}
		if xs[i] <= 0 {
			logX = false
		}
	}
	img := image.NewRGBA(image.Rect(0, 0, plotW, plotH))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	x0, x1, y0, y1 := marginL, plotW-marginR, plotH-marginB, marginT // y0 is the bottom

	xmin, xmax := minMax(xs)
	fx := func(v float64) int {
		if xmax == xmin {
			return (x0 + x1) / 2
		}
		if logX {
			return x0 + int(math.Round((math.Log2(v)-math.Log2(xmin))/(math.Log2(xmax)-math.Log2(xmin))*float64(x1-x0)))
		}
		return x0 + int(math.Round((v-xmin)/(xmax-xmin)*float64(x1-x0)))
	}
	_, tmax := minMax(tp)
	_, lmax := minMax(p99)
	tTop, tStep := niceScale(tmax)
	fyT := func(v float64) int { return y0 - int(math.Round(v/tTop*float64(y0-y1))) }
	// Grid and left ticks (throughput), right ticks (latency) on the same
	// grid lines: the latency step is a nice number with as many ticks.
	n := int(math.Round(tTop / tStep))
	lStep := niceStep(lmax / float64(n))
	lTop := lStep * float64(n)
	fyL := func(v float64) int { return y0 - int(math.Round(v/lTop*float64(y0-y1))) }
	for i := 0; i <= n; i++ {
		y := y0 - i*(y0-y1)/n
		hline(img, x0, x1, y, colGrid)
		label := fmtNum(float64(i) * tStep)
		drawText(img, x0-10-textWidth(label, 2), y-7, label, 2, colThroughput, false)
		lv := fmtNum(float64(i) * lStep)
		drawText(img, x1+10, y-7, lv, 2, colP99, false)
	}
	for _, v := range xs {
		x := fx(v)
		vline(img, x, y1, y0, colGrid)
		vline(img, x, y0, y0+6, colAxis)
		label := fmtNum(v)
		drawText(img, x-textWidth(label, 2)/2, y0+12, label, 2, colAxis, false)
	}
	// Axes.
	hline(img, x0, x1, y0, colAxis)
	vline(img, x0, y1, y0, colAxis)
	vline(img, x1, y1, y0, colAxis)

	// Series.
	series := func(ys []float64, fy func(float64) int, c color.Color) {
		for i := range xs {
			x, y := fx(xs[i]), fy(ys[i])
			fillRect(img, x-4, y-4, x+4, y+4, c)
			if i > 0 {
				thickLine(img, fx(xs[i-1]), fy(ys[i-1]), x, y, c)
			}
		}
	}
	series(tp, fyT, colThroughput)
	series(p99, fyL, colP99)

	// Labels.
	drawText(img, (plotW-textWidth(title, 2))/2, 20, title, 2, colAxis, false)
	xl := "concurrency (sagas in flight)"
	if rs[0].Mode == "open" {
		xl = "offered rate (sagas/s)"
	}
	if logX {
		xl += ", log scale"
	}
	drawText(img, (x0+x1-textWidth(xl, 2))/2, plotH-30, xl, 2, colAxis, false)
	yl := "throughput, sagas/s"
	drawText(img, 18, (y0+y1+textWidth(yl, 2))/2, yl, 2, colThroughput, true)
	yr := "p99 latency, ms"
	drawText(img, plotW-22, (y0+y1+textWidth(yr, 2))/2, yr, 2, colP99, true)
	// Legend.
	fillRect(img, x0+20, y1+12, x0+40, y1+16, colThroughput)
	drawText(img, x0+48, y1+7, "sagas/s", 2, colThroughput, false)
	fillRect(img, x0+180, y1+12, x0+200, y1+16, colP99)
	drawText(img, x0+208, y1+7, "p99 ms", 2, colP99, false)

	if err := png.Encode(w, img); err != nil {
		return fmt.Errorf("bench: plot: encode PNG: %w", err)
	}
	return nil
}

func minMax(xs []float64) (float64, float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

// niceScale returns an axis top >= v and a tick step from {1, 2, 5} x 10^k,
// with 4 to 10 ticks.
func niceScale(v float64) (top, step float64) {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1, 0.2
	}
	raw := v / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if step = m * mag; step >= raw {
			break
		}
	}
	top = math.Ceil(v/step) * step
	if top == v {
		top += step
	}
	return top, step
}

// niceStep is the smallest of {1, 2, 5} x 10^k at least v.
func niceStep(v float64) float64 {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= v {
			return m * mag
		}
	}
	return 10 * mag
}

func fmtNum(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e9 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

func hline(img *image.RGBA, xa, xb, y int, c color.Color) {
	for x := xa; x <= xb; x++ {
		img.Set(x, y, c)
	}
}

func vline(img *image.RGBA, x, ya, yb int, c color.Color) {
	for y := ya; y <= yb; y++ {
		img.Set(x, y, c)
	}
}

func fillRect(img *image.RGBA, xa, ya, xb, yb int, c color.Color) {
	draw.Draw(img, image.Rect(xa, ya, xb+1, yb+1), image.NewUniform(c), image.Point{}, draw.Src)
}

// thickLine draws a 3-pixel wide line (Bresenham with a square pen).
func thickLine(img *image.RGBA, xa, ya, xb, yb int, c color.Color) {
	dx, dy := abs(xb-xa), -abs(yb-ya)
	sx, sy := sign(xb-xa), sign(yb-ya)
	e := dx + dy
	for {
		fillRect(img, xa-1, ya-1, xa+1, ya+1, c)
		if xa == xb && ya == yb {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			xa += sx
		}
		if e2 <= dx {
			e += dx
			ya += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}
