package repro

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/softsync/softsync/learner"
	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/ps/sim"
)

// The time model of softsync repro --sim: a learner's compute time per
// mini-batch is μ·simImageSeconds times a log-normal factor of mean 1 and
// σ = simComputeSpread (a homogeneous cluster's jitter), and each message
// takes simLatency plus a uniform draw from [0, simJitter). Only the order
// of events depends on them (and the virtual images/s of the table);
// every gradient is computed for real.
const (
	simImageSeconds  = 0.5e-3
	simComputeSpread = 0.15
	simLatency       = 50e-6
	simJitter        = 50e-6
)

// simRun runs r in the simulator (ps/sim): the real shard core in virtual
// time, a real gradient of a real mini-batch for every step on the
// weights the learner pulled. Mini-batches are the job's data.Plan (the
// epoch orders and batches a real job's dispatcher hands out; under
// hardsync a round holds λ consecutive ones), handed out one at a time in
// the order learners start computing. The test error of
// epoch e is measured on the shard's weights right after it consumed its
// (e·P)-th gradient (P mini-batches per epoch), as in a real job; the
// last epoch's on the final weights.
func (rs *Table) simRun(ctx context.Context, r run) (*Entry, error) {
	cfg := rs.jobConfig(r)
	net, err := nn.New(rs.spec, rs.engine, nn.Config{Batch: r.batch, Workers: 1})
	if err != nil {
		return nil, err
	}
	defer net.Close()
	evalNet, err := nn.New(rs.spec, rs.engine, nn.Config{Batch: 100, Workers: 1, Inference: true})
	if err != nil {
		return nil, err
	}
	defer evalNet.Close()
	// The job's plan (data.Plan, as the real job's dispatcher uses):
	// under hardsync a round of λ consecutive mini-batches.
	plan := cfg.Plan(rs.train.Info().Len)
	if err := plan.Validate(); err != nil {
		return nil, err
	}
	layout, init, err := cfg.InitialWeights()
	if err != nil {
		return nil, err
	}
	P, E := plan.BatchesPerEpoch(), cfg.Epochs

	ds := rs.train.(*data.Dataset) // Prepare checked
	g := &simGradients{net: net, ds: ds, norm: rs.norm, plan: plan, lossSum: make([]float64, E), lossCnt: make([]int, E),
		x: make([]float32, r.batch*ds.ImageLen()), labels: make([]int32, r.batch)}
	history := make([]cluster.Epoch, 0, E)
	consumed := 0
	compute, speeds := r.timing.model(r.learners, r.batch, cfg.Seed)
	sc := sim.Config{PS: cfg.PSConfig(layout, P*r.batch), Init: init, TotalSteps: plan.Total(), Seed: cfg.Seed,
		Compute: compute, Speed: speeds,
		Latency: simLatency, Jitter: simJitter, Gradient: g.compute,
		ObserveWeights: func(at float64, _ int, in ps.Msg, w []float32) {
			if in.Type != ps.MsgPush || g.diverged != nil {
				return
			}
			if consumed++; consumed%P != 0 || consumed/P >= E {
				return
			}
			e := consumed / P
			te, te5, _ := learner.Evaluate(evalNet, w, rs.test, rs.norm) // in memory: no failure
			history = append(history, cluster.Epoch{Epoch: e, TrainLoss: g.meanLoss(e - 1), TestError: te, TestErrorTop5: te5, Seconds: at})
		},
		Stop: func() bool { return g.diverged != nil || ctx.Err() != nil },
	}
	res, err := sim.Run(sc)
	if errors.Is(err, ps.ErrDiverged) && g.diverged == nil { // the shards kept refusing updates
		g.diverged, err = fmt.Errorf("%w: %w", learner.ErrDiverged, err), nil
	}
	if err != nil && !errors.Is(err, sim.ErrStopped) {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	testError, top5 := nan(), nan()
	if g.diverged == nil {
		testError, top5, _ = learner.Evaluate(evalNet, res.Weights, rs.test, rs.norm)
		history = append(history, cluster.Epoch{Epoch: E, TrainLoss: g.meanLoss(E - 1), TestError: testError, TestErrorTop5: top5, Seconds: res.Time})
	}
	sr := cfg.SimResult(res, history, testError)
	sr.TestErrorTop5 = top5
	e := newEntry(&cfg, r, "sim", sr)
	if g.diverged != nil {
		e.Diverged, e.DivergedWhy = true, g.diverged.Error()
	}
	return e, nil
}

// simGradients computes the gradients of a simulated run on one network,
// in the order the simulator asks for them: the k-th gradient is the
// plan's k-th mini-batch (epoch k / P, batch k mod P).
type simGradients struct {
	net      *nn.Net
	ds       *data.Dataset
	norm     data.Normalizer
	plan     data.Plan
	order    []int // the current epoch's order (data.EpochOrder)
	epoch    int   // of order
	batches  int   // mini-batches handed out
	x        []float32
	labels   []int32
	lossSum  []float64 // per epoch
	lossCnt  []int
	diverged error // set at the first non-finite loss or gradient, or when the shards keep refusing updates
}

// next fills x and labels with the next mini-batch of the plan and
// returns its epoch and index.
func (g *simGradients) next() (epoch, index int) {
	P, mu := g.plan.BatchesPerEpoch(), g.plan.Batch
	epoch, index = g.batches/P, g.batches%P
	g.batches++
	if g.order == nil || epoch != g.epoch {
		g.order, g.epoch = data.EpochOrder(g.plan.Seed, epoch, g.ds.N), epoch
	}
	il := g.ds.ImageLen()
	for i, k := range g.order[index*mu : (index+1)*mu] {
		g.norm.Fill(g.ds, k, g.x[i*il:(i+1)*il])
		g.labels[i] = g.ds.Labels[k]
	}
	return epoch, index
}

// compute is sim.Config.Gradient: the next mini-batch's gradient on the
// weights w the learner pulled. After a divergence it returns zeros (the
// run is being stopped).
func (g *simGradients) compute(l, step int, w, grad []float32) {
	if g.diverged != nil {
		clear(grad)
		return
	}
	epoch, index := g.next()
	copy(g.net.Params(), w)
	loss := g.net.Gradient(g.x, g.labels)
	bad := sgd.FirstNonFinite(g.net.Grads())
	if math.IsNaN(float64(loss)) || math.IsInf(float64(loss), 0) || bad >= 0 {
		g.diverged = fmt.Errorf("learner %d step %d (epoch %d, batch %d): loss %v, first non-finite gradient element %d: %w",
			l, step, epoch, index, loss, bad, learner.ErrDiverged)
		clear(grad)
		return
	}
	if epoch < len(g.lossSum) {
		g.lossSum[epoch] += float64(loss)
		g.lossCnt[epoch]++
	}
	copy(grad, g.net.Grads())
}

// meanLoss is the mean mini-batch loss of epoch e (0-based).
func (g *simGradients) meanLoss(e int) float64 {
	if e < 0 || e >= len(g.lossCnt) || g.lossCnt[e] == 0 {
		return nan()
	}
	return g.lossSum[e] / float64(g.lossCnt[e])
}

func nan() float64 { return math.NaN() }
