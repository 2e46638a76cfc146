package cluster

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/checkpoint"
	"github.com/softsync/softsync/ps/param"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
)

// ErrConfig is wrapped by every configuration error of a job (the same
// value as param.ErrInvalidConfig); the error is a *param.FieldError naming
// the Config field.
var ErrConfig = param.ErrInvalidConfig

// Config describes one training job run in this process (Start, Run):
// every role of the job over the in-memory transport or loopback TCP: a
// coordinator, one shard server of Shards shards, Learners learners and an
// evaluator. The single learner is the case Learners = 1 under hardsync
// (or softsync with N = 1, the same thing).
type Config struct {
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
	Shards       int // 1 … MaxShardsFor(Learners)
	Solver       sgd.Config

	Transport string // "inmem" (also "") or "tcp" (loopback)
	// Job is the job id every message carries (0 means 1; see
	// rdma.Options.Job): across processes, the id of the job's network.
	Job     uint32
	Codec   rdma.Codec // gradients; weights too when the codec is lossless
	Overlap bool       // learners prefetch the next weights while computing
	Seed    uint64     // weight initialisation and data shuffling
	Init    []float32  // initial weights; nil: the spec's fillers drawn from Seed
	// Normalizer maps pixels to inputs; nil: the per-pixel mean of Train
	// (data.MeanNormalizer). Pass the one saved with loaded weights.
	Normalizer *data.Normalizer
	EvalBatch  int // images per evaluation forward pass (0: 100)
	// Workers is the number of goroutines each learner's network splits
	// its mini-batch over (nn.Config.Workers; 0 means 1). With the
	// engine's BLAS on one thread, this is how one learner uses several
	// cores (see learner.PlanThreads). The evaluation network uses
	// Workers·Learners goroutines.
	Workers int
	// OnEpoch, if set, receives each epoch's history entry once it is
	// complete, in order; it is called from a job goroutine and must not
	// block for long.
	OnEpoch func(Epoch)
	// OnAuthFailure, if set, is told of every connection to the job's TCP
	// listeners that failed authentication (rdma.Options.OnAuthFailure).
	OnAuthFailure func(peer string, err error)
	// PSTimeout is every role's Member.PSTimeout: how long a dial that
	// the listener closes during the handshake, or a lost connection to
	// the shard server, is tried again (0: the job fails at once).
	PSTimeout time.Duration
	// OnServe and OnClient, if set, receive the live ps.Server of the
	// job's shard server and each learner's ps.Client as they start, for
	// their counters (see ServerConfig.OnServe, LearnerConfig.OnClient).
	OnServe  func(*ps.Server)
	OnClient func(learner int, c *ps.Client)
	// Report is how often each learner reports its progress (0: half a
	// second; see LearnerConfig.Report).
	Report time.Duration
	// Checkpoints, if set, is where the job writes checkpoints, every
	// CheckpointEvery mini-batches or CheckpointInterval (0: not) and
	// when it is interrupted (see CoordinatorConfig).
	Checkpoints        *checkpoint.Store
	CheckpointEvery    int
	CheckpointInterval time.Duration
	// Resume, if set, continues the job from a checkpoint (LoadResume,
	// re-split onto Shards shards).
	Resume *Resume
	// Logger, if set, receives the roles' events (checkpoints, lost
	// learners).
	Logger *slog.Logger

	// listening, if set (by tests), is called with the coordinator's and
	// the shard server's listeners before any role starts.
	listening func(coord, server rdma.Listener)
}

// ResumeKeys returns the settings a job must share with the checkpoint it
// resumes from (Settings keys: the flag names): the network, the data,
// the batch, the seed of the data order, the learners and the protocol
// (the chunks of the data). The rest (rates, epochs, shards, …) may
// change. It returns a new slice at every call.
func ResumeKeys() []string {
	return []string{"model", "data", "train-subset", "batch", "seed", "learners", "protocol"}
}

// Validate returns a *param.FieldError naming the first invalid field.
// Data sets are checked against the network by StartJob.
func (c *Config) Validate() error {
	switch {
	case c.Spec == nil:
		return param.Fieldf("Spec", "no network")
	case c.Engine == nil:
		return param.Fieldf("Engine", "no compute engine")
	case c.Train == nil || c.Train.N == 0:
		return param.Fieldf("Train", "no training data")
	}
	return c.ValidateSettings()
}

// ValidateSettings checks the fields that are plain settings (everything
// but Engine, Train and Test; Spec may be nil, which skips the
// checks that need it), so that a command line can be checked before
// data is loaded or anything is started.
func (c *Config) ValidateSettings() error {
	switch {
	case c.Epochs < 0:
		return param.Fieldf("Epochs", "must be ≥ 0, got %d", c.Epochs)
	case c.MaxSteps < 0:
		return param.Fieldf("MaxSteps", "must be ≥ 0 (0: no limit), got %d", c.MaxSteps)
	case c.Chunk < 0:
		return param.Fieldf("Chunk", "must be ≥ 0 (0: %d), got %d", DefaultChunk, c.Chunk)
	case c.Transport != "" && c.Transport != "inmem" && c.Transport != "tcp":
		return param.Fieldf("Transport", "unknown transport %q (want inmem or tcp)", c.Transport)
	case c.EvalBatch < 0:
		return param.Fieldf("EvalBatch", "must be ≥ 0, got %d", c.EvalBatch)
	case c.Workers < 0:
		return param.Fieldf("Workers", "must be ≥ 0, got %d", c.Workers)
	case c.PSTimeout < 0:
		return param.Fieldf("PSTimeout", "must be ≥ 0 (0: none), got %v", c.PSTimeout)
	}
	if err := c.Codec.Validate(); err != nil {
		return param.Fieldf("Codec", "%v", err)
	}
	pc := c.PSConfig(nil, 1) // the data-set size is known once the data streams are made
	if err := pc.Validate(); err != nil {
		return err
	}
	if max := MaxShardsFor(c.Learners); c.Shards > max {
		return param.Fieldf("Shards", "at most %d shards with %d learner(s) (the control message that carries every shard's counters must stay within %d MiB), got %d",
			max, c.Learners, maxControl>>20, c.Shards)
	}
	if c.Spec == nil {
		return nil
	}
	if c.Init != nil && len(c.Init) != c.Spec.NumParams() {
		return param.Fieldf("Init", "has %d values, %s has %d parameters", len(c.Init), c.Spec.Name, c.Spec.NumParams())
	}
	if c.Shards > c.Spec.NumParams() {
		return param.Fieldf("Shards", "%d shards for %d parameters", c.Shards, c.Spec.NumParams())
	}
	return nil
}

// PSConfig returns the parameter server's configuration of the job: the
// network's layout and, for the schedule's epochs, the samples of an
// epoch (0 leaves it to RunServer, which takes it from the coordinator's
// plan).
func (c *Config) PSConfig(layout []param.Segment, dataSize int) ps.Config {
	return ps.Config{Job: cmp.Or(c.Job, 1), Learners: c.Learners, Protocol: c.Protocol, N: c.N, MaxStaleness: c.MaxStaleness,
		Shards: c.Shards, Batch: c.Batch, DataSize: dataSize, Layout: layout, Solver: c.Solver}
}

// DefaultChunk is the number of mini-batches a learner takes at a time
// unless Config.Chunk says otherwise: few enough that the last
// learners of a job finish within a few steps of each other, enough that
// asking costs nothing next to computing.
const DefaultChunk = 8

// Plan returns the job's data plan over a training set of images images.
func (c *Config) Plan(images int) data.Plan {
	p := data.Plan{Images: images, Batch: c.Batch, Group: 1, Chunk: c.Chunk, Epochs: c.Epochs, MaxBatches: c.MaxSteps, Seed: c.Seed}
	if c.Protocol == ps.Hardsync {
		p.Group = c.Learners
	}
	if p.Chunk == 0 {
		p.Chunk = DefaultChunk
	}
	return p
}

// Job is a training job running in this process (Start).
type Job struct {
	cfg    Config
	coord  *Coordinator
	addrs  []string // where the coordinator and the shard server listen
	cancel context.CancelFunc
	wg     sync.WaitGroup
	norm   data.Normalizer

	mu      sync.Mutex
	errs    []error // the roles' failures, in order
	stopped error   // the error of Start's context, when its end stopped the job
	res     *Result
	weights []float32
}

// Start validates cfg and starts every role of the job in this process:
// the coordinator, one shard server running every shard, the learners and
// the evaluator, over the in-memory transport (Transport "inmem") or
// loopback TCP with a secret of the job's own. It returns while they
// train; errors before any goroutine starts are returned here, later ones
// by Wait.
//
// Data: the coordinator hands the learners the job's mini-batches in
// chunks (data.Plan, data.Dispatcher): each learner takes a chunk, pushes
// its mini-batches and takes the next, until the job's Epochs (or
// MaxSteps) are handed out; faster learners take more. Under hardsync the
// chunks are strided so that each round holds λ consecutive mini-batches,
// the images of one mini-batch of λμ for a single learner.
//
// Epochs and evaluation: an epoch is P mini-batches, all learners
// together (data.Plan.BatchesPerEpoch); the shards' epoch counter for the
// learning-rate schedule counts the same mini-batches (ps.Config.DataSize
// = P·μ). The evaluator measures the test error of epoch e < Epochs on the
// weights each shard held right after it consumed (accepted or dropped)
// its (e·P)-th gradient (ps.ServerConfig.Snapshots); accepted gradients
// still pending in an update (softsync with c₀ = ⌊λ/n⌋ > 1) are not in
// them. The last epoch is measured on the final weights, after every
// learner has left and every accepted gradient is applied. Evaluation
// runs on its own goroutine and network, concurrently with training.
func Start(ctx context.Context, cfg Config) (*Job, error) { return start(ctx, cfg, nil) }

// start is Start with the network of every role but the coordinator
// passed through wrap (nil: as it is), so that tests can stand between a
// role and the rest of the job.
func start(ctx context.Context, cfg Config, wrap func(Role, rdma.Network) rdma.Network) (*Job, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Transport == "" {
		cfg.Transport = "inmem"
	}
	in := cfg.Spec.Input
	for _, ds := range []*data.Dataset{cfg.Train, cfg.Test} {
		if ds != nil {
			if err := ds.CheckShape(in.C, in.H, in.W, cfg.Spec.Classes()); err != nil {
				return nil, err
			}
		}
	}
	plan := cfg.Plan(cfg.Train.N)
	if err := plan.Validate(); err != nil {
		return nil, param.Fieldf("Batch", "%v", err)
	}
	j := &Job{cfg: cfg}
	if cfg.Normalizer != nil {
		j.norm = *cfg.Normalizer
	} else {
		j.norm = data.MeanNormalizer(cfg.Train)
	}
	net, err := nn.New(cfg.Spec, cfg.Engine, nn.Config{Batch: 1})
	if err != nil {
		return nil, err
	}
	layout, init := net.Layout(), cfg.Init
	if init == nil {
		net.Init(cfg.Seed)
		init = slices.Clone(net.Params())
	}
	net.Close()
	network, err := openNetwork(cfg.Transport, cfg.OnAuthFailure)
	if err != nil {
		return nil, param.Fieldf("Transport", "%v", err)
	}
	addr := ""
	if cfg.Transport == "tcp" {
		addr = "127.0.0.1:0"
	}
	coordLn, err := network.Listen(addr)
	if err != nil {
		return nil, err
	}
	psLn, err := network.Listen(addr)
	if err != nil {
		coordLn.Close()
		return nil, err
	}
	shards := make([]int, cfg.Shards)
	for k := range shards {
		shards[k] = k
	}
	coord, err := NewCoordinator(CoordinatorConfig{Plan: plan, Learners: cfg.Learners, Servers: [][]int{shards},
		Evaluator: true, OnEpoch: cfg.OnEpoch, Checkpoints: cfg.Checkpoints, CheckpointEvery: cfg.CheckpointEvery,
		CheckpointInterval: cfg.CheckpointInterval, Resume: cfg.Resume, Logger: cfg.Logger})
	if err != nil {
		coordLn.Close()
		psLn.Close()
		return nil, err
	}
	j.coord, j.addrs = coord, []string{coordLn.Addr(), psLn.Addr()}
	if cfg.listening != nil {
		cfg.listening(coordLn, psLn)
	}
	parent := ctx
	ctx, j.cancel = context.WithCancel(ctx)
	member := func(role Role, id int) Member {
		n := network
		if wrap != nil {
			n = wrap(role, n)
		}
		return Member{Network: n, Coordinator: coordLn.Addr(), PSTimeout: cfg.PSTimeout, Process: Process{Rank: -1, Role: role, ID: id, Host: "localhost", PID: os.Getpid()}}
	}
	j.wg.Go(func() {
		res, err := coord.Serve(ctx, coordLn)
		j.mu.Lock()
		j.res, j.stopped = res, parent.Err()
		j.mu.Unlock()
		if !errors.Is(err, ErrInterrupted) || res == nil { // interrupted before it started: no result
			j.fail(err)
		}
	})
	wcodec := rdma.Codec{}
	if cfg.Codec.ID.Lossless() {
		wcodec = cfg.Codec
	}
	j.wg.Go(func() {
		m := member(RoleServer, 0)
		m.Logger = cfg.Logger
		j.fail(RunServer(ctx, ServerConfig{Member: m, PS: cfg.PSConfig(layout, plan.BatchesPerEpoch()*cfg.Batch), Shards: shards,
			Init: init, Codec: wcodec, Listener: psLn, Checkpoints: cfg.Checkpoints, Resume: cfg.Resume, OnServe: cfg.OnServe}))
	})
	j.wg.Go(func() {
		w, err := RunEvaluator(ctx, EvaluatorConfig{Member: member(RoleEvaluator, 0), Spec: cfg.Spec, Engine: cfg.Engine,
			Test: cfg.Test, Normalizer: j.norm, Batch: cfg.EvalBatch, Workers: max(cfg.Workers, 1) * cfg.Learners, Shards: cfg.Shards})
		j.mu.Lock()
		j.weights = w
		j.mu.Unlock()
		j.fail(err)
	})
	for r := range cfg.Learners {
		j.wg.Go(func() {
			j.fail(RunLearner(ctx, LearnerConfig{Member: member(RoleLearner, r), ID: r, Spec: cfg.Spec, Engine: cfg.Engine,
				Train: cfg.Train, Normalizer: j.norm, Workers: cfg.Workers, Protocol: cfg.Protocol, Shards: cfg.Shards,
				Codec: cfg.Codec, Overlap: cfg.Overlap, Report: cfg.Report, OnClient: cfg.OnClient}))
		})
	}
	return j, nil
}

// openNetwork opens the transport of an in-process job: TCP listens on
// loopback only and authenticates with a random secret of the job's own.
func openNetwork(kind string, onAuthFailure func(string, error)) (rdma.Network, error) {
	opts := rdma.Options{Job: 1, OnAuthFailure: onAuthFailure}
	if kind == "tcp" {
		opts.Secret = make([]byte, 32)
		rand.Read(opts.Secret)
	}
	return rdma.Open(kind, opts)
}

// fail records a role's failure and stops the others.
func (j *Job) fail(err error) {
	if err == nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.errs = append(j.errs, err)
	if !errors.Is(err, ErrJobFailed) && !errors.Is(err, ErrInterrupted) { // the coordinator stops the others itself
		j.cancel()
	}
}

// cause returns the failure that explains the others: the first one that
// is not the consequence of another role's (a job stopped, a peer gone,
// a cancelled context); j.mu is held.
func (j *Job) cause() error {
	for _, err := range j.errs {
		if !errors.Is(err, ErrJobFailed) && !errors.Is(err, context.Canceled) && !errors.Is(err, rdma.ErrClosed) {
			return err
		}
	}
	if len(j.errs) > 0 {
		return j.errs[0]
	}
	return nil
}

// Progress returns a snapshot of the job's progress; it is safe to call
// from any goroutine.
func (j *Job) Progress() Progress { return j.coord.Progress() }

// Interrupt ends the job early (see Coordinator.Interrupt): Wait then
// returns the result so far with ErrInterrupted (no result if the job
// had not started).
func (j *Job) Interrupt() { j.coord.Interrupt() }

// Wait waits for the job to end and returns its result: the final
// weights, their test error, the history and the servers' counters.
func (j *Job) Wait() (*Result, error) {
	j.wg.Wait()
	j.cancel()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.res != nil && j.res.Interrupted && j.weights != nil {
		j.res.Weights, j.res.Normalizer = j.weights, j.norm
		return j.res, ErrInterrupted
	}
	if err := j.cause(); err != nil {
		if j.stopped != nil && !errors.Is(err, j.stopped) { // a consequence of the caller's cancellation
			err = fmt.Errorf("%w: %w", j.stopped, err)
		}
		return nil, err
	}
	if j.res == nil {
		return nil, fmt.Errorf("cluster: the job ended without a result: %w", ErrJobFailed)
	}
	res := j.res
	res.Weights, res.Normalizer = j.weights, j.norm
	return res, nil
}

// Run is Start followed by Wait.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	j, err := Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return j.Wait()
}
