package sim

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/param"
	"github.com/softsync/softsync/ps/sgd"
)

// softmaxProblem is a small softmax regression: K classes over D features,
// parameters W (K×D, row-major) then b (K), mean cross-entropy loss.
type softmaxProblem struct {
	x      [][]float64
	labels []int
}

const (
	smD, smK = 5, 3
	smTotal  = smK*smD + smK
)

var smLayout = []param.Segment{
	{Name: "fc.weight", Offset: 0, Len: smK * smD, LRMult: 1, DecayMult: 1},
	{Name: "fc.bias", Offset: smK * smD, Len: smK, LRMult: 2, DecayMult: 0},
}

func newSoftmaxProblem(n int, seed uint64) *softmaxProblem {
	r := rand.New(rand.NewPCG(seed, 1))
	var truth [smK][smD]float64
	for k := range truth {
		for d := range truth[k] {
			truth[k][d] = r.NormFloat64()
		}
	}
	p := &softmaxProblem{}
	for range n {
		x := make([]float64, smD)
		for d := range x {
			x[d] = r.NormFloat64()
		}
		best, arg := math.Inf(-1), 0
		for k := range smK {
			s := r.NormFloat64() * 0.3
			for d := range x {
				s += truth[k][d] * x[d]
			}
			if s > best {
				best, arg = s, k
			}
		}
		p.x, p.labels = append(p.x, x), append(p.labels, arg)
	}
	return p
}

// gradient writes into grad the gradient of the mean loss over samples
// first, first+1, …, first+count−1 (indices modulo the data-set size).
func (p *softmaxProblem) gradient(w, grad []float32, first, count int) {
	var g [smTotal]float64
	for s := first; s < first+count; s++ {
		i := s % len(p.x)
		var z [smK]float64
		zmax := math.Inf(-1)
		for k := range smK {
			z[k] = float64(w[smK*smD+k])
			for d := range smD {
				z[k] += float64(w[k*smD+d]) * p.x[i][d]
			}
			zmax = max(zmax, z[k])
		}
		var sum float64
		for k := range z {
			z[k] = math.Exp(z[k] - zmax)
			sum += z[k]
		}
		for k := range smK {
			dz := z[k] / sum
			if k == p.labels[i] {
				dz--
			}
			for d := range smD {
				g[k*smD+d] += dz * p.x[i][d] / float64(count)
			}
			g[smK*smD+k] += dz / float64(count)
		}
	}
	for j := range grad {
		grad[j] = float32(g[j])
	}
}

// TestHardsyncEqualsLargeBatch checks the paper's equivalence: λ learners
// of batch μ under hardsync, through three shards with random compute
// times, end with the weights of a single learner (the sgd.Solver on the
// whole vector, as the single-learner trainer runs it) of batch μλ on the
// same samples, schedule, momentum, decay and multipliers included.
func TestHardsyncEqualsLargeBatch(t *testing.T) {
	const learners, mu, n, epochs = 4, 4, 64, 3
	prob := newSoftmaxProblem(n, 11)
	solverCfg := sgd.Config{LR: 0.5, Momentum: 0.9, WeightDecay: 0.01, LRSteps: []int{2}, LRGamma: 0.1, LRMode: sgd.LRStaleness}
	init := make([]float32, smTotal)
	r := rand.New(rand.NewPCG(12, 1))
	for i := range init {
		init[i] = float32(0.1 * r.NormFloat64())
	}
	steps := epochs * n / (mu * learners)

	// Single learner, batch μλ.
	single, err := sgd.NewSolver(solverCfg, smLayout, 0, smTotal)
	if err != nil {
		t.Fatal(err)
	}
	ref := append([]float32(nil), init...)
	grad := make([]float32, smTotal)
	for s := range steps {
		prob.gradient(ref, grad, s*mu*learners, mu*learners)
		single.Update(ref, grad, sgd.MaxAbs(grad), 0, s*mu*learners/n)
	}

	run := func(proto ps.Protocol, nSoft int) []float32 {
		cfg := Config{
			PS: ps.Config{Learners: learners, Protocol: proto, N: nSoft, Shards: 3, Batch: mu, DataSize: n,
				Layout: smLayout, Solver: solverCfg},
			Init: init, Steps: steps, Seed: 5, Latency: 0.01,
			Compute: Dist{Kind: LogNormal, Mean: 1, Spread: 0.4},
			Gradient: func(l, step int, w, grad []float32) {
				prob.gradient(w, grad, step*mu*learners+l*mu, mu)
			},
		}
		res, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return res.Weights
	}
	maxDiff := func(a, b []float32) float64 {
		var d float64
		for i := range a {
			d = max(d, math.Abs(float64(a[i])-float64(b[i])))
		}
		return d
	}
	if d := maxDiff(run(ps.Hardsync, 0), ref); d > 1e-5 {
		t.Fatalf("hardsync differs from the single learner by %g", d)
	}
	if d := maxDiff(ref, init); d < 0.1 {
		t.Fatalf("training moved the weights by only %g: the comparison is vacuous", d)
	}
	// The comparison is sensitive: asynchronous training on the same
	// samples ends elsewhere.
	if d := maxDiff(run(ps.Softsync, learners), ref); d < 1e-3 {
		t.Fatalf("async differs from the single learner by only %g", d)
	}
}
