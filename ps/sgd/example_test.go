package sgd_test

import (
	"fmt"

	"github.com/softsync/softsync/ps/param"
	"github.com/softsync/softsync/ps/sgd"
)

// A single learner is the case λ = 1: one gradient per update, staleness
// 0, through the same Solver a parameter-server shard uses. By hand, with
// Caffe's rule: epoch 0, diff = g + 0.5·decay_mult·w = (1, 0, 1),
// v = 0.1·lr_mult·diff = (0.1, 0, 0.2); epoch 1 (rate ÷10), diff =
// (0.95, 0, 1), v = 0.9·v + 0.01·lr_mult·diff = (0.0995, 0, 0.2).
func ExampleSolver_single() {
	layout := []param.Segment{
		{Name: "fc.weight", Offset: 0, Len: 2, LRMult: 1, DecayMult: 1},
		{Name: "fc.bias", Offset: 2, Len: 1, LRMult: 2, DecayMult: 0},
	}
	cfg := sgd.Config{LR: 0.1, Momentum: 0.9, WeightDecay: 0.5, LRSteps: []int{1}, LRGamma: 0.1}
	s, err := sgd.NewSolver(cfg, layout, 0, 3)
	if err != nil {
		panic(err)
	}
	w := []float32{1, -1, 0}
	grad := []float32{0.5, 0.5, 1}
	for epoch := range 2 {
		info := s.Update(w, grad, sgd.MaxAbs(grad), 0, epoch)
		fmt.Printf("epoch %d: rate %.2g, w = %.4f\n", epoch, info.Rate, w)
	}
	// Output:
	// epoch 0: rate 0.1, w = [0.9000 -1.0000 -0.2000]
	// epoch 1: rate 0.01, w = [0.8005 -1.0000 -0.4000]
}

// A parameter-server shard under "dc:0.5": a gradient of staleness 1
// comes with the weights its learner pulled, which the rule compares with
// the current ones. By hand: g' = g + 0.5·g²·(w − pulled) = (1 + 0.5·1·0.5,
// 2 + 0.5·4·0) = (1.25, 2); without momentum w −= 0.1·g'.
func ExampleSolver_UpdateGrad() {
	cfg := sgd.Config{LR: 0.1}
	if err := cfg.ParseRule("dc:0.5"); err != nil {
		panic(err)
	}
	s, err := sgd.NewSolver(cfg, nil, 0, 2)
	if err != nil {
		panic(err)
	}
	w := []float32{1, 2}
	g := sgd.Grad{G: []float32{1, 2}, Tau: 1, Pulled: []float32{0.5, 2}}
	g.Max = sgd.MaxAbs(g.G)
	s.UpdateGrad(w, g, 0)
	fmt.Printf("%s: w = %.4f\n", cfg.RuleString(), w)
	// Output:
	// dc:0.5: w = [0.8750 1.8000]
}
