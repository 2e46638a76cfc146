package learner

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
)

// ErrConfig is wrapped by every configuration error of a job (the same
// value as sgd.ErrInvalidConfig); the error is a *sgd.FieldError naming
// the JobConfig field.
var ErrConfig = sgd.ErrInvalidConfig

// JobConfig describes one training job run in this process: a parameter
// server of Shards shards and Learners learners, connected by an
// in-memory or loopback TCP transport. The single learner is the case
// Learners = 1 under hardsync (or softsync with N = 1, the same thing).
type JobConfig struct {
	Spec   *nn.Spec       // the network
	Engine kernels.Engine // shared by every learner and the evaluator
	Train  *data.Dataset  // handed out to the learners in chunks (see data.Plan)
	Test   *data.Dataset  // evaluated at each epoch end; nil: no evaluation

	Learners int // λ ≥ 1
	Batch    int // μ ≥ 1, images per learner step
	Epochs   int // passes over the training set, ≥ 0 (0: evaluate Init only)
	// MaxSteps, if > 0, ends the job after at most MaxSteps mini-batches,
	// all learners together (under hardsync rounded down to a multiple of
	// Learners): a short run; the last epoch may then be incomplete and
	// has no history entry.
	MaxSteps int
	// Chunk is the number of mini-batches handed to a learner at a time
	// (data.Plan.Chunk; 0: DefaultChunk).
	Chunk int

	Protocol     ps.Protocol
	N            int // softsync's n, 1 ≤ N ≤ Learners
	MaxStaleness int // softsync only; 0 = unbounded
	Shards       int // ≥ 1
	Solver       sgd.Config

	Transport string     // "inmem" (also "") or "tcp" (loopback)
	Codec     rdma.Codec // gradients; weights too when the codec is lossless
	Overlap   bool       // learners prefetch the next weights while computing
	Seed      uint64     // weight initialisation and data shuffling
	Init      []float32  // initial weights; nil: the spec's fillers drawn from Seed
	// Normalizer maps pixels to inputs; nil: the per-pixel mean of Train
	// (data.MeanNormalizer). Pass the one saved with loaded weights.
	Normalizer *data.Normalizer
	EvalBatch  int // images per evaluation forward pass (0: 100)
	// Workers is the number of goroutines each learner's network splits
	// its mini-batch over (nn.Config.Workers; 0 means 1). With the
	// engine's BLAS on one thread, this is how one learner uses several
	// cores (see ThreadsPerLearner). The evaluation network uses
	// Workers·Learners goroutines.
	Workers int
	// OnEpoch, if set, receives each epoch's history entry once it is
	// complete, in order; it is called from a job goroutine and must not
	// block for long.
	OnEpoch func(Epoch)
}

// Epoch is one entry of a job's history.
type Epoch struct {
	Epoch     int     // 1-based
	TrainLoss float64 // mean loss of the mini-batches of this epoch, over all learners
	TestError float64 // fraction of the test set misclassified (NaN without a test set)
	Seconds   float64 // wall time from the start of training to the epoch's end
}

// Result is what a finished job reports.
type Result struct {
	History      []Epoch
	TestError    float64         // on the final weights (NaN without a test set)
	Weights      []float32       // the final weights
	Normalizer   data.Normalizer // the input normalisation used
	Steps        int64           // gradients pushed, all learners
	LearnerSteps []int64         // gradients pushed by each learner
	Images       int64           // Steps·Batch
	Seconds      float64         // training wall time (first step to last push)
	ImagesPerSec float64         // Images/Seconds
	// BatchesPerEpoch is P, the mini-batches of one epoch over all
	// learners (data.Plan.BatchesPerEpoch).
	BatchesPerEpoch int
	Shards          []ps.ServerStats // each shard's counters, in shard order
	Traffic         rdma.Stats       // every learner connection, both directions
}

// Progress is a snapshot of a running job.
type Progress struct {
	Epoch      int     // epoch in progress, 1-based (by gradients pushed)
	Epochs     int     // epochs of the job
	Batch      int     // mini-batches of this epoch pushed so far, all learners
	Batches    int     // mini-batches per epoch (P)
	Steps      int64   // gradients pushed so far, all learners
	TotalSteps int64   // gradients the job will push
	Loss       float64 // moving average of recent mini-batch losses (NaN before the first)
	Images     int64
	Elapsed    time.Duration
}

// Validate returns a *sgd.FieldError naming the first invalid field.
// Data sets are checked against the network by StartJob.
func (c *JobConfig) Validate() error {
	switch {
	case c.Spec == nil:
		return sgd.Fieldf("Spec", "no network")
	case c.Engine == nil:
		return sgd.Fieldf("Engine", "no compute engine")
	case c.Train == nil || c.Train.N == 0:
		return sgd.Fieldf("Train", "no training data")
	}
	return c.ValidateSettings()
}

// ValidateSettings checks the fields that are plain settings (everything
// but Engine, Train and Test; Spec may be nil, which skips the
// checks that need it), so that a command line can be checked before
// data is loaded or anything is started.
func (c *JobConfig) ValidateSettings() error {
	switch {
	case c.Epochs < 0:
		return sgd.Fieldf("Epochs", "must be ≥ 0, got %d", c.Epochs)
	case c.MaxSteps < 0:
		return sgd.Fieldf("MaxSteps", "must be ≥ 0 (0: no limit), got %d", c.MaxSteps)
	case c.Chunk < 0:
		return sgd.Fieldf("Chunk", "must be ≥ 0 (0: %d), got %d", DefaultChunk, c.Chunk)
	case c.Transport != "" && c.Transport != "inmem" && c.Transport != "tcp":
		return sgd.Fieldf("Transport", "unknown transport %q (want inmem or tcp)", c.Transport)
	case c.EvalBatch < 0:
		return sgd.Fieldf("EvalBatch", "must be ≥ 0, got %d", c.EvalBatch)
	case c.Workers < 0:
		return sgd.Fieldf("Workers", "must be ≥ 0, got %d", c.Workers)
	}
	if err := c.Codec.Validate(); err != nil {
		return sgd.Fieldf("Codec", "%v", err)
	}
	pc := c.psConfig(nil, 1) // the data-set size is known once the data streams are made
	if err := pc.Validate(); err != nil {
		return err
	}
	if c.Spec == nil {
		return nil
	}
	if c.Init != nil && len(c.Init) != c.Spec.NumParams() {
		return sgd.Fieldf("Init", "has %d values, %s has %d parameters", len(c.Init), c.Spec.Name, c.Spec.NumParams())
	}
	if c.Shards > c.Spec.NumParams() {
		return sgd.Fieldf("Shards", "%d shards for %d parameters", c.Shards, c.Spec.NumParams())
	}
	return nil
}

func (c *JobConfig) psConfig(layout []sgd.Segment, dataSize int) ps.Config {
	return ps.Config{Job: 1, Learners: c.Learners, Protocol: c.Protocol, N: c.N, MaxStaleness: c.MaxStaleness,
		Shards: c.Shards, Batch: c.Batch, DataSize: dataSize, Layout: layout, Solver: c.Solver}
}

// DefaultChunk is the number of mini-batches a learner takes at a time
// unless JobConfig.Chunk says otherwise: few enough that the last
// learners of a job finish within a few steps of each other, enough that
// asking costs nothing next to computing.
const DefaultChunk = 8

// plan returns the job's data plan over Train.
func (c *JobConfig) plan() data.Plan {
	p := data.Plan{Images: c.Train.N, Batch: c.Batch, Group: 1, Chunk: c.Chunk, Epochs: c.Epochs, MaxBatches: c.MaxSteps, Seed: c.Seed}
	if c.Protocol == ps.Hardsync {
		p.Group = c.Learners
	}
	if p.Chunk == 0 {
		p.Chunk = DefaultChunk
	}
	return p
}

// Job is a running training job (StartJob).
type Job struct {
	cfg      JobConfig
	ctx      context.Context
	cancel   context.CancelFunc
	norm     data.Normalizer
	eval     *nn.Net // nil without a test set
	nets     []*nn.Net
	disp     *data.Dispatcher
	loaders  []*data.Loader
	clients  []*ps.Client
	group    *ps.Group
	total    int64
	perEpoch int // P, mini-batches per epoch, all learners
	init     []float32

	start time.Time
	wg    sync.WaitGroup // learners
	errMu sync.Mutex
	err   error

	mu      sync.Mutex // guards the fields below
	pushed  int64
	steps   []int64 // per learner
	ema     float64
	lossSum []float64 // per epoch, 0-based
	lossCnt []int
	ended   []bool    // the shards consumed the epoch's last gradient
	done    []bool    // ended and, with a test set, evaluated
	testErr []float64 // NaN without a test set
	secs    []float64
	history []Epoch
	snaps   map[int]*snapshot // epoch (1-based) → weights being gathered from the shards
	ranges  []ps.Range
	evalCh  chan *snapshot
	evalWG  sync.WaitGroup
	trained time.Duration // set when the last learner is done
}

// snapshot gathers the shards' weights at one epoch end.
type snapshot struct {
	epoch int
	w     []float32 // nil without a test set
	left  int       // shards still to deliver
}

// StartJob validates cfg, builds every learner's network and data
// stream, starts the parameter server and the learners, and returns while
// they train. Errors before any goroutine starts are returned here; later
// ones by Wait.
//
// Data: a dispatcher hands the learners the job's mini-batches in chunks
// (data.Plan, data.Dispatcher): each learner takes a chunk, pushes its
// mini-batches and takes the next, until the job's Epochs (or MaxSteps)
// are handed out; faster learners take more. Under hardsync the chunks
// are strided so that each round holds λ consecutive mini-batches, the
// images of one mini-batch of λμ for a single learner.
//
// Epochs and evaluation: an epoch is P mini-batches, all learners
// together (data.Plan.BatchesPerEpoch). The shards' epoch counter for the
// learning-rate schedule counts the same mini-batches (ps.Config.DataSize
// = P·μ). The test error of
// epoch e < Epochs is measured on the weights each shard holds right
// after it consumed (accepted or dropped) its (e·P)-th gradient, copied
// on the shard's goroutine at that moment (ps.GroupConfig.OnPush) while
// the learners keep training; accepted gradients still pending in an
// update (softsync with c = ⌊λ/n⌋ > 1) are not in them. The last epoch is
// measured on the final weights, after every learner has left and every
// accepted gradient is applied. Evaluation runs on its own goroutine and
// network, concurrently with training.
func StartJob(ctx context.Context, cfg JobConfig) (*Job, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Transport == "" {
		cfg.Transport = "inmem"
	}
	if cfg.EvalBatch == 0 {
		cfg.EvalBatch = 100
	}
	in := cfg.Spec.Input
	for _, ds := range []*data.Dataset{cfg.Train, cfg.Test} {
		if ds != nil {
			if err := ds.CheckShape(in.C, in.H, in.W, cfg.Spec.Classes()); err != nil {
				return nil, err
			}
		}
	}
	j := &Job{cfg: cfg, snaps: map[int]*snapshot{}}
	if cfg.Normalizer != nil {
		j.norm = *cfg.Normalizer
	} else {
		j.norm = data.MeanNormalizer(cfg.Train)
	}
	j.ctx, j.cancel = context.WithCancel(ctx)
	ok := false
	defer func() {
		if !ok {
			j.cleanup()
		}
	}()
	if err := j.build(); err != nil {
		return nil, err
	}
	if j.total > 0 {
		if err := j.startPS(); err != nil {
			return nil, err
		}
	}
	ok = true
	j.start = time.Now()
	if j.eval != nil {
		j.evalWG.Go(j.evaluator)
	}
	for r := range j.clients { // none when there is nothing to train
		j.wg.Go(func() { j.runLearner(r) })
	}
	return j, nil
}

// build makes the networks, the dispatcher, the loaders and the initial
// weights.
func (j *Job) build() error {
	c := &j.cfg
	plan := c.plan()
	disp, err := data.NewDispatcher(plan)
	if err != nil {
		if errors.Is(err, data.ErrConfig) {
			return sgd.Fieldf("Batch", "%v", err)
		}
		return err
	}
	j.disp, j.perEpoch, j.total = disp, plan.BatchesPerEpoch(), int64(plan.Total())
	perNet := 1
	if c.Overlap {
		perNet = 2
	}
	for r := range c.Learners {
		ld, err := data.NewLoader(c.Train, data.LoaderConfig{Plan: plan, Source: data.Local{D: disp, Learner: r}, Normalizer: j.norm})
		if err != nil {
			return err
		}
		j.loaders = append(j.loaders, ld)
		for range perNet {
			net, err := newNet(c.Spec, c.Engine, c.Batch, c.Workers)
			if err != nil {
				return err
			}
			j.nets = append(j.nets, net)
		}
	}
	j.steps = make([]int64, c.Learners)
	j.init = c.Init
	if j.init == nil {
		j.nets[0].Init(c.Seed)
		j.init = slices.Clone(j.nets[0].Params())
	}
	if c.Test != nil && c.Test.N > 0 {
		net, err := newNet(c.Spec, c.Engine, c.EvalBatch, max(c.Workers, 1)*c.Learners)
		if err != nil {
			return err
		}
		j.eval = net
		j.evalCh = make(chan *snapshot, max(c.Epochs, 1))
	}
	E := c.Epochs
	j.lossSum, j.lossCnt = make([]float64, E), make([]int, E)
	j.ended, j.done, j.testErr, j.secs = make([]bool, E), make([]bool, E), make([]float64, E), make([]float64, E)
	for e := range j.testErr {
		j.testErr[e] = math.NaN()
	}
	j.ema = math.NaN()
	j.ranges, err = ps.Ranges(len(j.init), c.Shards)
	return err
}

// newNet is the one place networks are made.
func newNet(spec *nn.Spec, e kernels.Engine, batch, workers int) (*nn.Net, error) {
	return nn.New(spec, e, nn.Config{Batch: batch, Workers: workers})
}

// startPS starts the parameter server group and connects every learner.
func (j *Job) startPS() error {
	c := &j.cfg
	net, err := rdma.Open(c.Transport, rdma.Options{Job: 1})
	if err != nil {
		return sgd.Fieldf("Transport", "%v", err)
	}
	addr := ""
	if c.Transport == "tcp" {
		addr = "127.0.0.1:0"
	}
	wcodec := rdma.Codec{}
	if c.Codec.ID.Lossless() {
		wcodec = c.Codec
	}
	pc := c.psConfig(j.nets[0].Layout(), j.perEpoch*c.Batch)
	gc := ps.GroupConfig{PS: pc, Init: j.init, Network: net, Addr: addr, Codec: wcodec, OnPush: j.onPush}
	if j.group, err = ps.StartGroup(j.ctx, gc); err != nil {
		return err
	}
	for r := range c.Learners {
		cl, err := j.group.Dial(j.ctx, net, uint32(r), c.Codec)
		if err != nil {
			return err
		}
		j.clients = append(j.clients, cl)
	}
	return nil
}

// cleanup stops everything after a failed start.
func (j *Job) cleanup() {
	j.cancel()
	for _, cl := range j.clients {
		cl.Close()
	}
	if j.group != nil {
		j.group.Wait()
	}
	j.closeNets()
	if j.eval != nil {
		j.eval.Close()
	}
}

// closeNets stops the data streams and the networks' worker goroutines.
func (j *Job) closeNets() {
	for _, ld := range j.loaders {
		ld.Close()
	}
	for _, n := range j.nets {
		n.Close()
	}
}

func (j *Job) fail(err error) {
	j.errMu.Lock()
	if j.err == nil {
		j.err = err
	}
	j.errMu.Unlock()
	j.cancel()
}

// runLearner runs learner r until the job's data is done.
func (j *Job) runLearner(r int) {
	cfg := Config{ID: r, Data: j.loaders[r], Client: j.clients[r], Overlap: j.cfg.Overlap,
		OnStep: func(b *data.Batch, loss float32) { j.onStep(r, b, loss) }}
	if j.cfg.Overlap {
		cfg.Net, cfg.Spare = j.nets[2*r], j.nets[2*r+1]
	} else {
		cfg.Net = j.nets[r]
	}
	l, err := New(cfg)
	if err == nil {
		err = l.Run(j.ctx)
	}
	if err != nil {
		j.fail(err)
	}
}

// onStep accounts one mini-batch pushed by learner r.
func (j *Job) onStep(r int, b *data.Batch, loss float32) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.pushed++
	j.steps[r]++
	if math.IsNaN(j.ema) {
		j.ema = float64(loss)
	} else {
		j.ema += 0.02 * (float64(loss) - j.ema)
	}
	if b.Epoch < len(j.lossSum) {
		j.lossSum[b.Epoch] += float64(loss)
		j.lossCnt[b.Epoch]++
		j.emit()
	}
	if j.pushed == j.total {
		j.trained = time.Since(j.start)
	}
}

// onPush runs on each shard's goroutine (ps.GroupConfig.OnPush): at
// every epoch end but the last it notes the time and, with a test set,
// copies the shard's weights for the evaluator.
func (j *Job) onPush(shard int, consumed uint64, w []float32) {
	if consumed%uint64(j.perEpoch) != 0 {
		return
	}
	e := int(consumed / uint64(j.perEpoch)) // 1-based epoch that just ended
	if e >= j.cfg.Epochs {
		return
	}
	j.mu.Lock()
	s := j.snaps[e]
	if s == nil {
		s = &snapshot{epoch: e, left: len(j.ranges)}
		if j.eval != nil {
			s.w = make([]float32, len(j.init))
		}
		j.snaps[e] = s
	}
	j.mu.Unlock()
	if s.w != nil {
		copy(s.w[j.ranges[shard].Lo:], w) // shards write disjoint ranges
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if s.left--; s.left > 0 {
		return
	}
	delete(j.snaps, e)
	j.ended[e-1], j.secs[e-1] = true, time.Since(j.start).Seconds()
	if j.eval != nil {
		j.evalCh <- s // buffered for every epoch: never blocks
	} else {
		j.done[e-1] = true
		j.emit()
	}
}

// evaluator measures the test error of each epoch snapshot.
func (j *Job) evaluator() {
	for s := range j.evalCh {
		te := Evaluate(j.eval, s.w, j.cfg.Test, j.norm)
		j.mu.Lock()
		j.testErr[s.epoch-1], j.done[s.epoch-1] = te, true
		j.emit()
		j.mu.Unlock()
	}
}

// emit appends the epochs whose loss and test error are both known, in
// order; j.mu is held.
func (j *Job) emit() {
	for e := len(j.history); e < len(j.lossSum); e++ {
		if j.lossCnt[e] < j.perEpoch || !j.done[e] {
			return
		}
		ep := Epoch{Epoch: e + 1, TrainLoss: j.lossSum[e] / float64(j.lossCnt[e]), TestError: j.testErr[e], Seconds: j.secs[e]}
		j.history = append(j.history, ep)
		if j.cfg.OnEpoch != nil {
			j.cfg.OnEpoch(ep)
		}
	}
}

// Progress returns a snapshot of the job's progress; it is safe to call
// from any goroutine.
func (j *Job) Progress() Progress {
	j.mu.Lock()
	defer j.mu.Unlock()
	p := Progress{Epochs: j.cfg.Epochs, Batches: j.perEpoch, Steps: j.pushed, TotalSteps: j.total, Loss: j.ema,
		Images: j.pushed * int64(j.cfg.Batch), Elapsed: time.Since(j.start)}
	if j.perEpoch > 0 {
		p.Epoch, p.Batch = int(j.pushed/int64(j.perEpoch))+1, int(j.pushed%int64(j.perEpoch))
		if p.Epoch > j.cfg.Epochs && j.cfg.Epochs > 0 {
			p.Epoch, p.Batch = j.cfg.Epochs, j.perEpoch
		}
	}
	return p
}

// Wait waits for the job to end and returns its result: the final
// weights, their test error, the history and the server's counters.
func (j *Job) Wait() (*Result, error) {
	j.wg.Wait()
	res := &Result{Steps: j.pushed, LearnerSteps: slices.Clone(j.steps), Images: j.pushed * int64(j.cfg.Batch),
		BatchesPerEpoch: j.perEpoch, Normalizer: j.norm}
	var gerr error
	if j.group != nil {
		gerr = j.group.Wait()
		res.Weights = j.group.Weights()
		res.Shards = j.group.Stats()
		for _, cl := range j.clients {
			st := cl.Stats()
			res.Traffic.Add(&st)
			cl.Close()
		}
	} else {
		res.Weights = slices.Clone(j.init)
	}
	j.closeNets()
	j.errMu.Lock()
	err := j.err
	j.errMu.Unlock()
	if err == nil && gerr != nil {
		err = gerr
	}
	if j.eval != nil {
		close(j.evalCh)
		j.evalWG.Wait()
		defer j.eval.Close()
	}
	j.cancel()
	if err != nil {
		return nil, err
	}
	res.TestError = math.NaN()
	if j.eval != nil {
		res.TestError = Evaluate(j.eval, res.Weights, j.cfg.Test, j.norm)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.trained == 0 {
		j.trained = time.Since(j.start)
	}
	res.Seconds = j.trained.Seconds()
	if res.Seconds > 0 {
		res.ImagesPerSec = float64(res.Images) / res.Seconds
	}
	if E := j.cfg.Epochs; E > 0 && int64(E)*int64(j.perEpoch) == j.total {
		j.ended[E-1], j.done[E-1], j.testErr[E-1], j.secs[E-1] = true, true, res.TestError, res.Seconds
		j.emit()
	}
	res.History = slices.Clone(j.history)
	return res, nil
}

// Run is StartJob followed by Wait.
func Run(ctx context.Context, cfg JobConfig) (*Result, error) {
	j, err := StartJob(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return j.Wait()
}

// Evaluate copies w into net's parameters and returns the fraction of ds
// that net misclassifies (ds normalised by z), walking ds once in order
// in batches of net.Batch() images.
func Evaluate(net *nn.Net, w []float32, ds *data.Dataset, z data.Normalizer) float64 {
	copy(net.Params(), w)
	x, labels := make([]float32, net.Batch()*ds.ImageLen()), make([]int32, net.Batch())
	correct := 0
	for n := range data.Batches(ds, z, x, labels) {
		net.Forward(x, labels)
		c, _ := net.Score(labels[:n])
		correct += c
	}
	return 1 - float64(correct)/float64(ds.N)
}
