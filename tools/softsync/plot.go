package main

import (
	"fmt"
	"image/color"
	"os"

	"github.com/softsync/softsync/learner/cluster"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// writePlot draws the run's training loss and test error per epoch and,
// for runs with a parameter server of several learners or shards, the
// staleness histogram of shard 0, side by side, as a PNG at path.
func writePlot(path string, r *cluster.Report) error {
	var loss, test plotter.XYs
	for _, h := range r.History {
		loss = append(loss, plotter.XY{X: float64(h.Epoch), Y: h.TrainLoss})
		if h.TestError != nil {
			test = append(test, plotter.XY{X: float64(h.Epoch), Y: 100 * *h.TestError})
		}
	}
	title := fmt.Sprintf("%s, %d learner(s) × batch %d", r.Model, r.Learners, r.Batch)
	plots := []*plot.Plot{
		seriesPlot("Training loss — "+title, "mean loss", loss, color.RGBA{R: 31, G: 119, B: 180, A: 255}),
		seriesPlot("Test error", "test error (%)", test, color.RGBA{R: 214, G: 39, B: 40, A: 255}),
	}
	if distributed(r) {
		h, err := histPlot(r)
		if err != nil {
			return err
		}
		plots = append(plots, h)
	}
	return drawGrid(path, [][]*plot.Plot{plots}, 5*vg.Inch, 4*vg.Inch)
}

// drawGrid draws rows of plots (nil leaves a tile empty), each tile
// colW × rowH, aligned, as a PNG at path.
func drawGrid(path string, rows [][]*plot.Plot, colW, rowH vg.Length) error {
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
	p.X.Tick.Marker = integerTicks{}
	return p
}

// histPlot is the staleness histogram (gradients per τ) of shard 0.
func histPlot(r *cluster.Report) (*plot.Plot, error) {
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
	p.X.Tick.Marker = integerTicks{}
	return p, nil
}

func protocolText(r *cluster.Report) string {
	if r.Protocol == "softsync" {
		return fmt.Sprintf("%d-softsync, λ=%d", r.N, r.Learners)
	}
	return fmt.Sprintf("hardsync, λ=%d", r.Learners)
}

// integerTicks labels whole numbers only, at most about ten of them.
type integerTicks struct{}

func (integerTicks) Ticks(min, max float64) []plot.Tick {
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
