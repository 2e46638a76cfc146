package repro

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/softsync/softsync/ps/sim"

	"github.com/softsync/softsync/tools/internal/plots"
)

// The rules and n values of softsync repro --rules. Parameters: FedAsync's
// (Xie et al. 2019) a = 0.5 for poly and b = 4, a = 10 for hinge; Zheng
// et al.'s (2017) λ = 0.04 for dc and λ = 2 for dc-adaptive.
const (
	DefaultRules  = "constant,staleness,average,poly:0.5,hinge:4,10,dc:0.04,dc-adaptive:2,gap,staleness+momentum-comp"
	DefaultRulesN = "1,4,30"
)

// timing is a model of the learners' compute times in the simulator.
type timing uint8

const (
	// timingHomogeneous: every learner at the same speed, a log-normal
	// jitter of σ = simComputeSpread per mini-batch.
	timingHomogeneous timing = iota
	// timingHeterogeneous: learner l's compute times are multiplied by a
	// speed drawn once, uniformly from [simSlowMin, simSlowMax], and the
	// jitter per mini-batch is log-normal with σ = simHeteroSpread: the
	// long staleness tail of a shared or uneven cluster.
	timingHeterogeneous
)

// The heterogeneous timing model's parameters.
const (
	simSlowMin, simSlowMax = 1.0, 3.0
	simHeteroSpread        = 0.5
)

func (t timing) String() string {
	if t == timingHeterogeneous {
		return "heterogeneous"
	}
	return "homogeneous"
}

// model is the simulator's compute-time distribution of one mini-batch of
// μ = batch and the speed multipliers of λ = learners (nil: all 1). The
// speeds come from a PCG stream seeded with (seed, 0x5eed5bee), apart
// from the simulator's own streams, in learner order.
func (t timing) model(learners, batch int, seed uint64) (sim.Dist, []float64) {
	d := sim.Dist{Kind: sim.LogNormal, Mean: float64(batch) * simImageSeconds, Spread: simComputeSpread}
	if t != timingHeterogeneous {
		return d, nil
	}
	d.Spread = simHeteroSpread
	r := rand.New(rand.NewPCG(seed, 0x5eed5bee))
	speeds := make([]float64, learners)
	for i := range speeds {
		speeds[i] = simSlowMin + (simSlowMax-simSlowMin)*r.Float64()
	}
	return d, speeds
}

// rulesTables is the part of table.md that --rules adds: for each
// timing model, the test error of every rule (rows) at every n (columns),
// then the staleness of each n (mean and max τ over the rules' runs that
// did not diverge).
func rulesTables(entries []*Entry) string {
	var b strings.Builder
	for _, t := range []timing{timingHomogeneous, timingHeterogeneous} {
		var rules []string
		var ns []int
		cell := map[string]*Entry{}
		for _, e := range entries {
			if e.Timing != t.String() {
				continue
			}
			if !slices.Contains(rules, e.lrMode) {
				rules = append(rules, e.lrMode)
			}
			if !slices.Contains(ns, e.n) {
				ns = append(ns, e.n)
			}
			cell[e.lrMode+"|"+strconv.Itoa(e.n)] = e
		}
		if len(rules) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n### Test error, %s learners\n\n| rule |", t)
		for _, n := range ns {
			fmt.Fprintf(&b, " n = %d |", n)
		}
		b.WriteString("\n|---|" + strings.Repeat("---:|", len(ns)) + "\n")
		for _, r := range rules {
			fmt.Fprintf(&b, "| %s |", r)
			for _, n := range ns {
				fmt.Fprintf(&b, " %s |", errorText(cell[r+"|"+strconv.Itoa(n)]))
			}
			b.WriteString("\n")
		}
		b.WriteString("| mean τ / max τ |")
		for _, n := range ns {
			sum, cnt, hi := 0.0, 0, 0
			for _, r := range rules {
				if e := cell[r+"|"+strconv.Itoa(n)]; e != nil && !e.Diverged {
					sum, cnt, hi = sum+e.Staleness.Mean, cnt+1, max(hi, e.Staleness.Max)
				}
			}
			if cnt == 0 {
				b.WriteString(" – |")
				continue
			}
			fmt.Fprintf(&b, " %.2f / %d |", sum/float64(cnt), hi)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// writeRulesPlot draws the final test error against n, one line per
// rule, one panel per timing model; a diverged run is a cross at 100%.
// Both axes are logarithmic, the panels share their scales.
func writeRulesPlot(path string, rs *Table, entries []*Entry) error {
	var panels []*plot.Plot
	var ticks nTicks
	for _, t := range []timing{timingHomogeneous, timingHeterogeneous} {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s, %s, %s learners", rs.dataName, rs.spec.Name, t)
		p.X.Label.Text, p.Y.Label.Text = "n (softsync)", "final test error (%)"
		p.X.Scale, p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogScale{}, plots.LogTicks{}
		p.Legend.Top = true
		p.Add(plotter.NewGrid())
		var rules []string
		for _, e := range entries {
			if e.Timing == t.String() && !slices.Contains(rules, e.lrMode) {
				rules = append(rules, e.lrMode)
			}
		}
		for k, r := range rules {
			var xy, crosses plotter.XYs
			for _, e := range entries {
				if e.Timing != t.String() || e.lrMode != r {
					continue
				}
				if !slices.Contains(ticks, float64(e.n)) {
					ticks = append(ticks, float64(e.n))
				}
				switch {
				case e.Diverged:
					crosses = append(crosses, plotter.XY{X: float64(e.n), Y: 100})
				case e.TestError != nil && *e.TestError > 0:
					xy = append(xy, plotter.XY{X: float64(e.n), Y: 100 * *e.TestError})
				}
			}
			c := plotutil.Color(k)
			dashes := plotutil.Dashes(k / 7) // the palette has 7 colours
			if len(xy) > 0 {
				line, points, err := plotter.NewLinePoints(xy)
				if err != nil {
					return err
				}
				line.Color, line.Dashes, line.Width = c, dashes, vg.Points(1.5)
				points.Color, points.Shape = c, draw.CircleGlyph{}
				p.Add(line, points)
				p.Legend.Add(r, line, points)
			}
			if len(crosses) > 0 {
				sc, err := plotter.NewScatter(crosses)
				if err != nil {
					return err
				}
				sc.Shape, sc.Color, sc.Radius = draw.CrossGlyph{}, c, vg.Points(5)
				p.Add(sc)
				if len(xy) == 0 {
					p.Legend.Add(r+": diverged", sc)
				}
			}
		}
		panels = append(panels, p)
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range panels {
		lo, hi = min(lo, p.Y.Min), max(hi, p.Y.Max)
	}
	for _, p := range panels {
		p.Y.Min, p.Y.Max = lo, hi
		p.X.Tick.Marker = ticks
		if len(ticks) > 0 {
			p.X.Min, p.X.Max = slices.Min(ticks)/1.3, slices.Max(ticks)*1.3
		}
	}
	return plots.Grid(path, [][]*plot.Plot{panels}, 6*vg.Inch, 5*vg.Inch)
}

// nTicks labels the n values of a --rules plot.
type nTicks []float64

func (t nTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for _, v := range t {
		if v >= lo && v <= hi {
			ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)})
		}
	}
	return ts
}
