package cluster

import (
	"cmp"
	"context"
	"crypto/rand"
	"log/slog"
	"slices"
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

// Config describes a training job, the same in every process of it
// (Settings are what they must agree on), and this process's hooks. A
// job in one process (Start, Run) runs every role of it over the
// in-memory transport or loopback TCP: a coordinator, one shard server
// of Shards shards, Learners learners and an evaluator; StartProcess runs
// one process's part of a job of several. The single learner is the case
// Learners = 1 under hardsync (or softsync with N = 1, the same thing).
//
// A command fills it from its flags: Model, Data, the subsets and
// InitFile by name (LoadModel, LookupData and UseData, LoadInit load what
// they name; DefaultsFor gives the model's defaults of the rest); a
// library caller may set Spec, Train, Test and Init directly instead.
type Config struct {
	Spec   *nn.Spec       // the network
	Engine kernels.Engine // shared by every learner and the evaluator
	Train  data.Set       // handed out to the learners in chunks (see data.Plan)
	Test   data.Set       // evaluated at each epoch end; nil: no evaluation

	// Model names the network: a built-in one or a spec file (LoadModel).
	Model string
	// Data names the data set (LookupData); DataName is how reports name
	// it (UseData sets it).
	Data, DataName string
	// TrainSubset and TestSubset, if > 0, keep that many images of the
	// data set only (UseData, data.Subset: the first of MNIST or
	// CIFAR-10, images spread evenly through an image folder or list).
	TrainSubset, TestSubset int
	// Images are how image data (a folder or list file, IsImageData) is
	// read: FitImages, LookupImages.
	Images ImageOptions
	// InitFile is the file Init is read from (LoadInit); "" for weights
	// drawn from Seed or given directly.
	InitFile string

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

	Protocol ps.Protocol
	N        int // softsync's n, 1 ≤ N ≤ Learners; with NSchedule, its first n
	// NSchedule, if set, is softsync's n by epoch (ps.Config.NSchedule):
	// c₀ = ⌊λ/n⌋ follows it at epoch boundaries.
	NSchedule    sgd.NSchedule
	MaxStaleness int // softsync only; 0 = unbounded
	Shards       int // 1 … MaxShardsFor(Learners)
	Solver       sgd.Config

	// Transport is the job's transport: in one process "inmem" (also "")
	// or "tcp" (loopback); across processes the network's kind ("tcp",
	// "verbs", "auto"), which every process must share.
	Transport string
	// Job is the job id every message carries (rdma.Options.Job; 0 means
	// 1): across processes, the id of the job's network (JobID of its
	// secret); Start derives it from the secret of its own network.
	Job     uint32
	Codec   rdma.Codec // gradients; weights too when the codec is lossless
	Overlap bool       // learners prefetch the next weights while computing
	// EarlyPush: learners send each shard its slice of the gradient as
	// soon as backward has produced it (learner.Config.EarlyPush).
	EarlyPush bool
	Seed      uint64    // weight initialisation and data shuffling
	Init      []float32 // initial weights; nil: the spec's fillers drawn from Seed
	// Normalizer maps pixels to inputs; nil: the training set's mean
	// (data.Set.Mean: the per-pixel mean of MNIST or CIFAR-10, the
	// per-channel mean of MeanImages images of an image set), or the one a
	// resumed job's checkpoint kept. The coordinator decides it and
	// welcomes the learners and the evaluator with it, so that every
	// process normalises alike. Pass the one saved with loaded weights.
	Normalizer *data.Normalizer
	EvalBatch  int // images per evaluation forward pass (0: 100)
	// Workers is the number of goroutines each learner's network splits
	// its mini-batch over (nn.Config.Workers; 0 means 1). With the
	// engine's BLAS on one thread, this is how one learner uses several
	// cores (see learner.PlanThreads). The evaluation network uses
	// EvalWorkers goroutines.
	Workers int
	// OnEpoch, if set, receives each epoch's history entry once it is
	// complete, in order; it is called from a job goroutine and must not
	// block for long.
	OnEpoch func(Epoch)
	// OnResult, if set, receives the job's result in the coordinator's
	// process, final weights included, before the other processes are
	// told to stop (CoordinatorConfig.OnResult): the place to write the
	// job's outputs, so that a head that dies while it writes them is
	// restarted with the job still there. It is called from a job
	// goroutine; Wait returns the same result after it. A result that
	// lacks the evaluator's final weights is not given to it: Wait fails.
	OnResult func(*Result)
	// OnAuthFailure, if set, is told of every connection to the job's TCP
	// listeners that failed authentication (rdma.Options.OnAuthFailure).
	OnAuthFailure func(peer string, err error)
	// PSTimeout is every role's Member.PSTimeout: how long a dial that
	// the listener closes during the handshake, or a lost connection to
	// the shard server, is tried again (0: the job fails at once); and
	// the coordinator's ServerTimeout.
	PSTimeout time.Duration
	// Heartbeat and Rendezvous are the coordinator's (CoordinatorConfig):
	// how long a silent learner stays in the job, how long the processes
	// have to arrive (0: no bound); Rendezvous also bounds every role's
	// wait for the coordinator (Member.Rendezvous).
	Heartbeat, Rendezvous time.Duration
	// WaitWarn is how long a wait at start-up is normal, logged at debug
	// level, before it is a warning: the coordinator's for the processes
	// and each role's for the coordinator (CoordinatorConfig.WaitWarn,
	// Member.WaitWarn; 0: DefaultWaitWarn).
	WaitWarn time.Duration
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
	// Planned, if set, is the job's memory plan (Memory) as its command
	// checked it, for the report.
	Planned *JobMemory

	// listening, if set (by tests), is called with the coordinator's and
	// the shard server's listeners before any role starts.
	listening func(coord, server rdma.Listener)
}

// ResumeKeys returns the settings a job must share with the checkpoint it
// resumes from (Settings keys: the flag names): the network, the data,
// (its path and, for image data, its classes), the batch, the seed of
// the data order, the learners and the protocol (the chunks of the
// data). The rest (rates, epochs, shards, …) may
// change. It returns a new slice at every call.
func ResumeKeys() []string {
	return []string{"model", "data", "classes", "train-subset", "batch", "seed", "learners", "protocol"}
}

// Validate returns a *param.FieldError naming the first invalid field of
// a job in one process, or an error wrapping data.ErrShape for data sets
// the network does not take.
func (c *Config) Validate() error {
	return c.validateFor(Roles{Coordinator: true, Evaluator: true, Learners: []int{0}})
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
	case c.Transport != "" && !slices.Contains(rdma.Kinds(), c.Transport):
		return param.Fieldf("Transport", "unknown transport %q (want inmem or tcp in one process; tcp, shm, verbs or auto across processes)", c.Transport)
	case c.EvalBatch < 0:
		return param.Fieldf("EvalBatch", "must be ≥ 0, got %d", c.EvalBatch)
	case c.Workers < 0:
		return param.Fieldf("Workers", "must be ≥ 0, got %d", c.Workers)
	case c.PSTimeout < 0:
		return param.Fieldf("PSTimeout", "must be ≥ 0 (0: none), got %v", c.PSTimeout)
	case c.Heartbeat < 0:
		return param.Fieldf("Heartbeat", "must be ≥ 0 (0: none), got %v", c.Heartbeat)
	case c.Rendezvous < 0:
		return param.Fieldf("Rendezvous", "must be ≥ 0 (0: none), got %v", c.Rendezvous)
	case c.WaitWarn < 0:
		return param.Fieldf("WaitWarn", "must be ≥ 0 (0: %v), got %v", DefaultWaitWarn, c.WaitWarn)
	case c.TrainSubset < 0:
		return param.Fieldf("TrainSubset", "must be ≥ 0 (0: all), got %d", c.TrainSubset)
	case c.TestSubset < 0:
		return param.Fieldf("TestSubset", "must be ≥ 0 (0: all), got %d", c.TestSubset)
	case c.Images.Resize < 0:
		return param.Fieldf("Images.Resize", "must be ≥ 0 (0: the network's input × 256/224), got %d", c.Images.Resize)
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
	if c.Init != nil && len(c.Init) != c.Spec.VectorLen() {
		return param.Fieldf("Init", "has %d values, %s's parameter vector has %d", len(c.Init), c.Spec.Name, c.Spec.VectorLen())
	}
	if c.Shards > c.Spec.VectorLen() {
		return param.Fieldf("Shards", "%d shards for a parameter vector of %d values", c.Shards, c.Spec.VectorLen())
	}
	if n := c.largestShard(); n > rdma.MaxElems {
		return param.Fieldf("Shards", "a shard of %s's %d values holds %d of them, more than the %d (1 GiB of float32) one message carries: use --shards %d or more",
			c.Spec.Name, c.Spec.VectorLen(), n, rdma.MaxElems, (c.Spec.VectorLen()+rdma.MaxElems-1)/rdma.MaxElems)
	}
	if c.Codec.ID == rdma.CodecTopK && c.Spec.NumState() > 0 {
		return param.Fieldf("Codec", "topk keeps the values a push leaves out for later pushes, which would add up the batch norm statistics of several mini-batches of %s: use none, fp16, bf16 or a lossless codec", c.Spec.Name)
	}
	return nil
}

// largestShard returns the values of the job's largest shard (Spec set,
// Shards valid): what one push, pull or snapshot of it carries.
func (c *Config) largestShard() int {
	rs, err := ps.Ranges(c.Spec.VectorLen(), c.Shards)
	if err != nil {
		return 0
	}
	n := 0
	for _, r := range rs {
		n = max(n, r.Len())
	}
	return n
}

// MessageLimit returns the most float32 values a message of the job's
// network must carry: rdma.Options.MaxElems of every process's network,
// the largest shard's range (its pushes, pulls and snapshots travel
// whole) and at least rdma.DefaultLimits' 64 Mi. ValidateSettings
// refuses a job whose shards exceed rdma.MaxElems.
func (c *Config) MessageLimit() uint32 {
	n := uint32(rdma.DefaultLimits().MaxElems)
	if c.Spec != nil {
		n = max(n, uint32(min(c.largestShard(), rdma.MaxElems)))
	}
	return n
}

// PSConfig returns the parameter server's configuration of the job: the
// network's layout and, for the schedule's epochs, the samples of an
// epoch (0 leaves it to RunServer, which takes it from the coordinator's
// plan).
func (c *Config) PSConfig(layout []param.Segment, dataSize int) ps.Config {
	return ps.Config{Job: cmp.Or(c.Job, 1), Learners: c.Learners, Protocol: c.Protocol, N: c.N, NSchedule: c.NSchedule, MaxStaleness: c.MaxStaleness,
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

// Start validates cfg and starts every role of the job in this process
// (StartProcess with the topology InProcess): the coordinator, one shard
// server running every shard, the learners and the evaluator, over the
// in-memory transport (Transport "inmem") or loopback TCP with a secret
// of the job's own. It returns while they train; errors before any
// goroutine starts are returned here, later ones by Wait.
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
	if err := cfg.Validate(); err != nil { // before the network is opened
		return nil, err
	}
	cfg.Transport = cmp.Or(cfg.Transport, "inmem")
	if cfg.Transport != "inmem" && cfg.Transport != "tcp" {
		return nil, param.Fieldf("Transport", "%s runs across processes; a job in one process runs inmem or tcp", cfg.Transport)
	}
	network, err := openNetwork(&cfg)
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
	if cfg.listening != nil {
		cfg.listening(coordLn, psLn)
	}
	j, err := StartProcess(ctx, cfg, ProcessConfig{Topology: InProcess(cfg.Learners, cfg.Shards), Network: network,
		Listeners: Listeners{Coordinator: coordLn, Servers: []rdma.Listener{psLn}}, wrap: wrap})
	if err == nil {
		j.addrs = []string{coordLn.Addr(), psLn.Addr()}
	}
	return j, err
}

// openNetwork opens the transport of an in-process job and sets cfg.Job
// unless it is set: TCP listens on loopback only and authenticates with
// a random secret of the job's own, from which the job id derives
// (JobID).
func openNetwork(cfg *Config) (rdma.Network, error) {
	var secret []byte
	if cfg.Transport == "tcp" {
		secret = make([]byte, 32)
		rand.Read(secret)
	}
	cfg.Job = cmp.Or(cfg.Job, JobID(secret))
	return rdma.Open(cfg.Transport, rdma.Options{Job: cfg.Job, Secret: secret, OnAuthFailure: cfg.OnAuthFailure, MaxElems: cfg.MessageLimit()})
}

// Run is Start followed by Wait.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	j, err := Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return j.Wait()
}
