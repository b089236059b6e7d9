// Package perfplot draws the perftest tools' results against message size
// (gonum.org/v1/plot): bandwidth and message rate for the bandwidth tools,
// latency percentiles for the latency tools, each with its baseline where
// one was measured in the same run. The file's extension picks SVG or PNG.
package perfplot

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/softverbs/softverbs/internal/perftest"
)

// ErrFormat is returned for a file name that is neither .svg nor .png.
var ErrFormat = errors.New("plot file must end in .svg or .png")

// Series is one line: y against message size in bytes.
type Series struct {
	Name     string
	Sizes    []float64
	Y        []float64
	Baseline bool // drawn dashed and grey
}

// Panel is one plot of a figure.
type Panel struct {
	Title, YLabel string
	Series        []Series
}

// Baselines are what was measured beside a run, per message size; either
// may be empty.
type Baselines struct {
	Name string // for the legend, e.g. "memcpy (same run)"
	BW   []perftest.BWReport
	Lat  []perftest.LatRow
}

// Panels returns the panels of a tool's results: for bandwidth rows,
// average bandwidth and message rate; for latency rows, t_typical, 99% and
// 99.9%. gbits says the bandwidth is in Gb/s.
func Panels(tool string, res perftest.Results, base Baselines, gbits bool) []Panel {
	var out []Panel
	if len(res.BW) > 0 {
		unit := "MB/s"
		if gbits {
			unit = "Gb/s"
		}
		bw := Panel{Title: tool + ": bandwidth", YLabel: "BW average [" + unit + "]"}
		rate := Panel{Title: tool + ": message rate", YLabel: "MsgRate [Mpps]"}
		bw.Series = append(bw.Series, bwSeries(tool, res.BW, func(r perftest.BWReport) float64 { return r.Avg }, false))
		rate.Series = append(rate.Series, bwSeries(tool, res.BW, func(r perftest.BWReport) float64 { return r.MsgRate }, false))
		if len(base.BW) > 0 {
			bw.Series = append(bw.Series, bwSeries(base.Name, base.BW, func(r perftest.BWReport) float64 { return r.Avg }, true))
			rate.Series = append(rate.Series, bwSeries(base.Name, base.BW, func(r perftest.BWReport) float64 { return r.MsgRate }, true))
		}
		out = append(out, bw, rate)
	}
	if len(res.Lat) > 0 {
		lat := Panel{Title: tool + ": latency", YLabel: "latency [usec]"}
		for _, f := range []struct {
			name string
			get  func(perftest.LatRow) float64
		}{
			{"t_typical", func(r perftest.LatRow) float64 { return r.Typical }},
			{"99%", func(r perftest.LatRow) float64 { return r.P99 }},
			{"99.9%", func(r perftest.LatRow) float64 { return r.P999 }},
		} {
			lat.Series = append(lat.Series, latSeries(tool+" "+f.name, res.Lat, f.get, false))
		}
		if len(base.Lat) > 0 {
			lat.Series = append(lat.Series, latSeries(base.Name+" t_typical", base.Lat, func(r perftest.LatRow) float64 { return r.Typical }, true))
		}
		out = append(out, lat)
	}
	return out
}

func bwSeries(name string, rows []perftest.BWReport, get func(perftest.BWReport) float64, baseline bool) Series {
	s := Series{Name: name, Baseline: baseline}
	for _, r := range rows {
		s.Sizes = append(s.Sizes, float64(r.Size))
		s.Y = append(s.Y, get(r))
	}
	return s
}

func latSeries(name string, rows []perftest.LatRow, get func(perftest.LatRow) float64, baseline bool) Series {
	s := Series{Name: name, Baseline: baseline}
	for _, r := range rows {
		s.Sizes = append(s.Sizes, float64(r.Size))
		s.Y = append(s.Y, get(r))
	}
	return s
}

// Write draws the panels one above the other into path (.svg or .png).
func Write(path string, panels []Panel) error {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".svg" && ext != ".png" {
		return fmt.Errorf("%s: %w", path, ErrFormat)
	}
	if len(panels) == 0 {
		return errors.New("nothing to plot")
	}
	plots := make([][]*plot.Plot, len(panels))
	for i, pn := range panels {
		p, err := makePlot(pn)
		if err != nil {
			return err
		}
		plots[i] = []*plot.Plot{p}
	}
	w, h := 7*vg.Inch, vg.Length(len(panels))*3.2*vg.Inch
	var c draw.Canvas
	var svg *vgsvg.Canvas
	var img *vgimg.Canvas
	if ext == ".svg" {
		svg = vgsvg.New(w, h)
		c = draw.New(svg)
	} else {
		img = vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(110), vgimg.UseBackgroundColor(color.White))
		c = draw.New(img)
	}
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadTop: 4, PadBottom: 4, PadLeft: 4, PadRight: 8, PadY: 10}
	canvases := plot.Align(plots, tiles, c)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if svg != nil {
		_, err = svg.WriteTo(f)
	} else {
		_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

// makePlot draws one panel: log-scale size and y axes, points joined.
func makePlot(pn Panel) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = pn.Title
	p.X.Label.Text = "message size [bytes]"
	p.Y.Label.Text = pn.YLabel
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = sizeTicks{}
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	k, entries := 0, 0
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range pn.Series {
		var xy plotter.XYs
		for i := range s.Sizes {
			if s.Sizes[i] > 0 && s.Y[i] > 0 && !math.IsInf(s.Y[i], 0) && !math.IsNaN(s.Y[i]) {
				xy = append(xy, plotter.XY{X: s.Sizes[i], Y: s.Y[i]})
			}
		}
		if len(xy) == 0 {
			continue
		}
		for _, v := range xy {
			lo, hi = min(lo, v.Y), max(hi, v.Y)
		}
		l, pts, err := plotter.NewLinePoints(xy)
		if err != nil {
			return nil, err
		}
		if s.Baseline {
			l.Color = color.Gray{Y: 0x70}
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
			pts.Shape = draw.BoxGlyph{}
		} else {
			l.Color = palette[k%len(palette)]
			pts.Shape = draw.CircleGlyph{}
			k++
		}
		l.Width = vg.Points(1.5)
		pts.Color = l.Color
		pts.Radius = vg.Points(2.2)
		p.Add(l, pts)
		p.Legend.Add(s.Name, l, pts)
		entries++
	}
	if hi > 0 {
		// Room above the lines for the legend: a log axis, so a factor.
		p.Y.Min, p.Y.Max = lo/1.5, hi*math.Pow(10, 0.45*float64(entries))
	}
	return p, nil
}

// sizeTicks marks powers of two on the size axis, labelled every other
// power (4, 16, 64, ..., 1K, ..., 1M, 4M).
type sizeTicks struct{}

func (sizeTicks) Ticks(lo, hi float64) []plot.Tick {
	var t []plot.Tick
	for e := 0; e <= 40; e++ {
		v := math.Ldexp(1, e)
		if v < lo/1.01 || v > hi*1.01 {
			continue
		}
		tk := plot.Tick{Value: v}
		if e%2 == 0 || hi/lo < 64 {
			tk.Label = SizeLabel(int64(v))
		}
		t = append(t, tk)
	}
	return t
}

// SizeLabel writes a byte count as 2, 512, 4K, 64K, 1M.
func SizeLabel(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return fmt.Sprint(n)
}

// Names of the baselines in legends and tables.
const (
	MemcpyName   = "memcpy (same run)"
	PingPongName = "Go channel ping-pong (same run)"
)

// MeasureBaselines measures, for every size in res, the in-process
// baseline of test: Go's copy() for the bandwidth tools (for d at each
// size), a Go channel ping-pong copying the message at each hop for the
// latency tools (iters round trips, reduced as the tool reduces its own).
func MeasureBaselines(test perftest.Test, res perftest.Results, iters int, d time.Duration, gbits bool) (Baselines, error) {
	if test.Latency() {
		b := Baselines{Name: PingPongName}
		rtt := 2
		if test == perftest.ReadLat {
			rtt = 1
		}
		for _, r := range res.Lat {
			l, err := perftest.ChanPingPong(nil, r.Size, max(iters, 10), rtt)
			if err != nil {
				return b, err
			}
			b.Lat = append(b.Lat, perftest.LatRow{Size: r.Size, Iters: iters, LatResult: l})
		}
		return b, nil
	}
	b := Baselines{Name: MemcpyName}
	for _, r := range res.BW {
		b.BW = append(b.BW, perftest.MemcpyBW(nil, int(r.Size), d, gbits))
	}
	return b, nil
}
