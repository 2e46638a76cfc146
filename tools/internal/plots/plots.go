// Package plots draws softsync's PNG figures with gonum/plot: a run's
// training loss, test error and staleness histogram (train --plot), the
// predicted speedup against λ (sim --plot), and the pieces the harnesses'
// figures are made of (tools/repro): a grid of aligned panels, the
// staleness histogram of one run, ticks for whole numbers and for
// logarithmic axes.
package plots

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/ps/sim/costmodel"
)

// Run draws the run's training loss and its top-1 and top-5 test errors
// per epoch and, for runs with a parameter server of several learners
// or shards, the staleness histogram of shard 0, side by side, as a PNG
// at path.
func Run(path string, r *cluster.Report) error {
	var loss, test, top5 plotter.XYs
	for _, h := range r.History {
		loss = append(loss, plotter.XY{X: float64(h.Epoch), Y: h.TrainLoss})
		if h.TestError != nil {
			test = append(test, plotter.XY{X: float64(h.Epoch), Y: 100 * *h.TestError})
		}
		if h.TestError5 != nil {
			top5 = append(top5, plotter.XY{X: float64(h.Epoch), Y: 100 * *h.TestError5})
		}
	}
	title := fmt.Sprintf("%s, %d learner(s) × batch %d", r.Model, r.Learners, r.Batch)
	errPlot := seriesPlot("Test error: top-1 (solid), top-5 (dashed)", "test error (%)", test, color.RGBA{R: 214, G: 39, B: 40, A: 255})
	if len(top5) > 0 {
		if line, err := plotter.NewLine(top5); err == nil {
			line.Color, line.Width, line.Dashes = color.RGBA{R: 214, G: 39, B: 40, A: 255}, vg.Points(1.5), []vg.Length{vg.Points(4), vg.Points(2)}
			errPlot.Add(line)
		}
	}
	plots := []*plot.Plot{
		seriesPlot("Training loss — "+title, "mean loss", loss, color.RGBA{R: 31, G: 119, B: 180, A: 255}),
		errPlot,
	}
	if r.Learners > 1 || r.Shards > 1 { // a parameter server of several learners or shards
		h, err := Staleness(r)
		if err != nil {
			return err
		}
		plots = append(plots, h)
	}
	return Grid(path, [][]*plot.Plot{plots}, 5*vg.Inch, 4*vg.Inch)
}

// Grid draws rows of plots (nil leaves a tile empty), each tile
// colW × rowH, aligned, as a PNG at path.
func Grid(path string, rows [][]*plot.Plot, colW, rowH vg.Length) error {
	cols := 0
	for _, r := range rows {
		cols = max(cols, len(r))
	}
	for i, r := range rows { // plot.Align takes a full grid
		rows[i] = append(r, make([]*plot.Plot, cols-len(r))...)
	}
	img := vgimg.NewWith(vgimg.UseWH(colW*vg.Length(cols), rowH*vg.Length(len(rows))), vgimg.UseDPI(110))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(rows), Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	canvases := plot.Align(rows, tiles, dc)
	for i, r := range rows {
		for j, p := range r {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
	}
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

// seriesPlot is one per-epoch series with points and a line.
func seriesPlot(title, ylabel string, xy plotter.XYs, c color.Color) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "epoch"
	p.Y.Label.Text = ylabel
	p.Add(plotter.NewGrid())
	if len(xy) == 0 {
		p.Title.Text += " (no complete epoch)"
		return p
	}
	line, points, err := plotter.NewLinePoints(xy)
	if err == nil {
		line.Color, points.Color = c, c
		line.Width = vg.Points(1.5)
		points.Shape = draw.CircleGlyph{}
		p.Add(line, points)
	}
	p.X.Min, p.X.Max = 0, xy[len(xy)-1].X+0.5
	p.Y.Min = 0
	p.X.Tick.Marker = IntegerTicks{}
	return p
}

// Staleness is the staleness histogram (gradients per τ) of shard 0.
func Staleness(r *cluster.Report) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Staleness, %s (mean %.2f, max %d)", protocolText(r), r.Staleness.Mean, r.Staleness.Max)
	p.X.Label.Text = "staleness τ (updates)"
	p.Y.Label.Text = "gradients"
	h, hidden := clipTail(r.Staleness.Histogram, 0.999)
	if hidden > 0 {
		p.X.Label.Text += fmt.Sprintf("; %d gradients with τ > %d not shown", hidden, len(h)-1)
	}
	vals := make(plotter.Values, len(h))
	for i, n := range h {
		vals[i] = float64(n)
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(max(2, 200/float64(len(h)))))
	if err != nil {
		return nil, err
	}
	bars.Color = color.RGBA{R: 44, G: 160, B: 44, A: 255}
	bars.LineStyle.Width = 0
	p.Add(plotter.NewGrid(), bars)
	p.X.Tick.Marker = IntegerTicks{}
	return p, nil
}

func protocolText(r *cluster.Report) string {
	if r.Protocol == "softsync" {
		return fmt.Sprintf("%d-softsync, λ=%d", r.N, r.Learners)
	}
	return fmt.Sprintf("hardsync, λ=%d", r.Learners)
}

// IntegerTicks labels whole numbers only, at most about ten of them.
type IntegerTicks struct{}

func (IntegerTicks) Ticks(min, max float64) []plot.Tick {
	step := 1
	for (max-min)/float64(step) > 10 {
		step *= 2
	}
	var ts []plot.Tick
	for v := int(min); float64(v) <= max; v++ {
		if v%step == 0 && float64(v) >= min {
			ts = append(ts, plot.Tick{Value: float64(v), Label: fmt.Sprint(v)})
		}
	}
	return ts
}

// clipTail returns the shortest prefix of the histogram h holding at
// least the fraction q of its counts (at least one bucket), and how many
// counts it leaves out, so that a few very stale gradients do not squash
// the bulk of the distribution into one corner.
func clipTail(h []uint64, q float64) ([]uint64, uint64) {
	var total uint64
	for _, n := range h {
		total += n
	}
	var sum uint64
	for i, n := range h {
		sum += n
		if float64(sum) >= q*float64(total) {
			return h[:i+1], total - sum
		}
	}
	if len(h) == 0 {
		return []uint64{0}, 0
	}
	return h, 0
}

// LogTicks labels a logarithmic axis at 1, 2 and 5 times the powers of
// ten within its range, with minor ticks at the other integer multiples.
type LogTicks struct{}

func (LogTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for p := math.Pow(10, math.Floor(math.Log10(lo))); p <= hi; p *= 10 {
		for m := 1; m < 10; m++ {
			v := float64(m) * p
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = strconv.FormatFloat(v, 'g', 3, 64)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// Speedup draws the speedup against λ of each protocol of rows, with
// the ideal line, as a PNG at path; paper adds the paper's 22–28× at λ = 30.
func Speedup(path string, in *costmodel.Inputs, rows []costmodel.Row, paper bool) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Predicted speedup, %s μ = %d (%s)", in.Model, in.Batch, in.Source)
	p.X.Label.Text = "learners λ"
	p.Y.Label.Text = "speedup over one learner"
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	maxL := 1
	for _, r := range rows {
		maxL = max(maxL, r.Learners)
	}
	ideal, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: float64(maxL), Y: float64(maxL)}})
	if err != nil {
		return err
	}
	ideal.Color, ideal.Dashes = color.Gray{Y: 150}, []vg.Length{vg.Points(3), vg.Points(3)}
	p.Add(ideal)
	p.Legend.Add("linear", ideal)
	var names []string
	for _, r := range rows {
		if !slices.Contains(names, r.Protocol) {
			names = append(names, r.Protocol)
		}
	}
	for k, name := range names {
		var xy plotter.XYs
		for _, r := range rows {
			if r.Protocol == name {
				xy = append(xy, plotter.XY{X: float64(r.Learners), Y: r.Speedup})
			}
		}
		line, points, err := plotter.NewLinePoints(xy)
		if err != nil {
			return err
		}
		c := plotutil.Color(k)
		line.Color, points.Color, points.Shape, line.Width = c, c, draw.CircleGlyph{}, vg.Points(1.5)
		p.Add(line, points)
		p.Legend.Add(name, line, points)
	}
	if paper {
		band, err := plotter.NewLine(plotter.XYs{{X: 30, Y: 22}, {X: 30, Y: 28}})
		if err != nil {
			return err
		}
		band.Color, band.Width = color.RGBA{R: 200, A: 255}, vg.Points(6)
		p.Add(band)
		p.Legend.Add("paper: 22–28× at λ = 30", band)
	}
	p.X.Min, p.Y.Min = 0, 0
	return Grid(path, [][]*plot.Plot{{p}}, 7*vg.Inch, 5*vg.Inch)
}
