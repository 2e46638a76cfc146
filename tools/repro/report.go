package repro

import (
	"cmp"
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/ps"

	"github.com/softsync/softsync/tools/internal/plots"
	"github.com/softsync/softsync/tools/internal/textfmt"
)

// Entry is one run of softsync repro in report.json: the run report
// of softsync train --json (docs/report.md) plus the run's label, how it
// ran and whether it diverged (docs/repro.md).
type Entry struct {
	Run         string `json:"run"`
	Mode        string `json:"mode"` // "real" or "sim"
	Diverged    bool   `json:"diverged"`
	DivergedWhy string `json:"diverged_reason"`
	// Timing is the simulator's timing model of the learners under
	// --rules: "homogeneous" or "heterogeneous".
	Timing string `json:"timing,omitempty"`
	*cluster.Report

	protocol ps.Protocol
	n        int
	lrMode   string
}

func newEntry(cfg *cluster.Config, r run, mode string, res *cluster.Result) *Entry {
	rep := cluster.NewReport(cfg, res)
	if mode == "sim" {
		rep.Transport = "sim"
	}
	rep.LRMode = r.rule // as spelled in --lr-modes
	e := &Entry{Run: r.name(), Mode: mode, Report: rep, protocol: r.protocol, n: r.n, lrMode: r.rule}
	if r.rules {
		e.Timing = r.timing.String()
	}
	return e
}

// writeJSONFile writes v as indented JSON to path.
func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// tableText is table.md. In --sim mode every figure in it is a function
// of the flags and the seed alone.
func tableText(rs *Table, entries []*Entry) string {
	var b strings.Builder
	s := rs.sched
	fmt.Fprintf(&b, "# softsync repro: %s, %s\n\n", rs.dataName, rs.spec.Name)
	mode := "real: concurrent learners in one process (softsync train's job runner)"
	ips := "images/s"
	if rs.cfg.Sim {
		mode = fmt.Sprintf("sim: the deterministic simulator, virtual time (compute %.2g ms per image, log-normal σ = %g; messages %g–%g µs); seed %d",
			1e3*simImageSeconds, simComputeSpread, 1e6*simLatency, 1e6*(simLatency+simJitter), rs.cfg.Seed)
		ips = "images/s (virtual)"
	}
	if rs.cfg.Rules {
		mode += fmt.Sprintf("; heterogeneous learners: speeds %g–%g× drawn once per learner, compute log-normal σ = %g",
			simSlowMin, simSlowMax, simHeteroSpread)
	}
	fmt.Fprintf(&b, "Mode: %s.  \n", mode)
	fmt.Fprintf(&b, "Data: %s, %s training and %s test images.  \n", rs.dataName, textfmt.Thousands(int64(rs.train.Info().Len)), textfmt.Thousands(int64(rs.test.Info().Len)))
	steps := "no rate steps"
	if len(s.steps) > 0 {
		steps = fmt.Sprintf("rate ×%g after epoch(s) %s", cmp.Or(s.gamma, 0.1), strings.Trim(strings.Join(strings.Fields(fmt.Sprint(s.steps)), ", "), "[]"))
	}
	fmt.Fprintf(&b, "Schedule: %d epochs; α0 = %g, momentum %g, weight decay %g, %s.  \n", s.epochs, s.lr, s.momentum, s.decay, steps)
	if rs.cfg.Rules {
		fmt.Fprintf(&b, "Runs: λ = %d learners × μ = %d under n-softsync, each rule as spelled in --lr-modes.\n", rs.cfg.Learners, rs.cfg.Batch)
		b.WriteString(rulesTables(entries))
		b.WriteString("\n### Every run\n\n")
	} else {
		fmt.Fprintf(&b, "Distributed runs: λ = %d learners × μ = %d; single learner: μ = %d. α0 is the constant rate, α0/τ the staleness-aware one.\n\n",
			rs.cfg.Learners, rs.cfg.Batch, rs.cfg.Single)
	}
	if rs.cfg.ImageNet {
		fmt.Fprintf(&b, "| run | λ × μ | top-1 error | top-5 error | mean τ | max τ | updates | %s | data wait |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n", ips)
	} else {
		fmt.Fprintf(&b, "| run | λ × μ | test error | mean τ | max τ | updates | %s |\n|---|---|---:|---:|---:|---:|---:|\n", ips)
	}
	for _, e := range entries {
		top5 := ""
		if rs.cfg.ImageNet {
			top5 = " " + fracText(e.TestError5) + " |"
			if e.Diverged {
				top5 = " – |"
			}
		}
		fmt.Fprintf(&b, "| %s | %d × %d | %s |%s %.2f | %d | %s | %s |", e.Run, e.Learners, e.Batch, errorText(e), top5,
			e.Staleness.Mean, e.Staleness.Max, textfmt.Thousands(int64(e.Updates)), textfmt.Thousands(int64(e.ImagesPerSec+0.5)))
		if rs.cfg.ImageNet {
			fmt.Fprintf(&b, " %.1f%% |", 100*e.DataWaitFraction)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// errorOf picks a test error of an epoch: top-1 or top-5.
type errorOf struct {
	name string
	of   func(h *cluster.ReportEpoch) *float64
}

var (
	top1 = errorOf{"test error", func(h *cluster.ReportEpoch) *float64 { return h.TestError }}
	top5 = errorOf{"top-5 test error", func(h *cluster.ReportEpoch) *float64 { return h.TestError5 }}
)

// writeErrorPlot draws the test error (top-1 or top-5, which) per epoch
// of every run, one panel per rate mode of the softsync runs; the single
// learner and hardsync appear in each panel. The axis is logarithmic:
// errors of a few tenths of a percent and of a diverged run share it.
func writeErrorPlot(path string, rs *Table, entries []*Entry, which errorOf) error {
	var modes []string
	for _, e := range entries {
		if e.protocol == ps.Softsync && !slices.Contains(modes, e.lrMode) {
			modes = append(modes, e.lrMode)
		}
	}
	if len(modes) == 0 {
		modes = []string{""}
	}
	var panels []*plot.Plot
	for _, m := range modes {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s, %s: %s", rs.dataName, rs.spec.Name, which.name)
		if m != "" {
			p.Title.Text += ", softsync with lr-mode " + m
		}
		p.X.Label.Text = "epoch"
		p.Y.Label.Text = which.name + " (%)"
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plots.LogTicks{}
		p.X.Tick.Marker = plots.IntegerTicks{}
		p.Legend.Top = true
		p.Add(plotter.NewGrid())
		k := 0
		for _, e := range entries {
			if e.protocol == ps.Softsync && e.lrMode != m {
				continue
			}
			c := plotutil.Color(k)
			if e.protocol == ps.Hardsync {
				c = color.Gray{Y: uint8(40 + 80*min(k, 1))}
			}
			k++
			if e.Diverged { // a cross at 100%, at the epoch of the NaN
				sc, err := plotter.NewScatter(plotter.XYs{{X: e.EpochsDone, Y: 100}})
				if err != nil {
					return err
				}
				sc.Shape, sc.Color, sc.Radius = draw.CrossGlyph{}, c, vg.Points(5)
				p.Add(sc)
				p.Legend.Add(fmt.Sprintf("%s: diverged in epoch %d", e.Run, int(e.EpochsDone)+1), sc)
			}
			var xy plotter.XYs
			for _, h := range e.History {
				if v := which.of(&h); v != nil && *v > 0 {
					xy = append(xy, plotter.XY{X: float64(h.Epoch), Y: 100 * *v})
				}
			}
			if len(xy) == 0 {
				continue
			}
			line, points, err := plotter.NewLinePoints(xy)
			if err != nil {
				return err
			}
			if e.protocol == ps.Hardsync {
				line.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
			}
			line.Color, points.Color, points.Shape = c, c, draw.CircleGlyph{}
			line.Width = vg.Points(1.5)
			p.Add(line, points)
			p.Legend.Add(e.Run, line, points)
		}
		panels = append(panels, p)
	}
	// One scale for every panel, from epoch 0.
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range panels {
		lo, hi = min(lo, p.Y.Min), max(hi, p.Y.Max)
	}
	if !(lo > 0 && lo <= hi) { // no error above 0 (a top-5 error of few classes): a linear axis
		lo, hi = 0, 100
		for _, p := range panels {
			p.Y.Scale, p.Y.Tick.Marker = plot.LinearScale{}, plot.DefaultTicks{}
		}
	}
	for _, p := range panels {
		p.X.Min, p.Y.Min, p.Y.Max = 0, lo, hi
	}
	return plots.Grid(path, [][]*plot.Plot{panels}, 6*vg.Inch, 4.5*vg.Inch)
}

// writeStalenessPlot draws the staleness histogram of every softsync
// run for which row returns a key, a row per key.
func writeStalenessPlot(path string, entries []*Entry, row func(*Entry) (string, bool)) error {
	var rows [][]*plot.Plot
	var modes []string
	for _, e := range entries {
		key, ok := row(e)
		if !ok || e.protocol != ps.Softsync || len(e.Staleness.Histogram) == 0 {
			continue
		}
		p, err := plots.Staleness(e.Report)
		if err != nil {
			return err
		}
		p.Title.Text = fmt.Sprintf("%s (mean %.2f, max %d)", e.Run, e.Staleness.Mean, e.Staleness.Max)
		i := slices.Index(modes, key)
		if i < 0 {
			modes, rows = append(modes, key), append(rows, nil)
			i = len(rows) - 1
		}
		rows[i] = append(rows[i], p)
	}
	if len(rows) == 0 {
		p := plot.New()
		p.Title.Text = "no softsync run"
		rows = [][]*plot.Plot{{p}}
	}
	return plots.Grid(path, rows, 4*vg.Inch, 3*vg.Inch)
}
