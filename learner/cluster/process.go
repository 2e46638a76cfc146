package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/ps/param"
	"github.com/softsync/softsync/rdma"
)

// ProcessConfig is this process's place in a job: which part of the
// topology it runs, over which network, where it listens and where it
// finds the coordinator.
type ProcessConfig struct {
	Topology Topology
	Index    int // this process in Topology.Processes
	// Network is the job's network, opened with the job's id
	// (Config.Job).
	Network rdma.Network
	// Coordinator is the coordinator's address on Network, where the
	// coordinator runs in another process.
	Coordinator string
	Listeners   Listeners
	// Host names this host in the job's report ("": localhost).
	Host string
	// Locate, if set, is every role's Member.Locate: where a coordinator
	// that was lost and started again listens now.
	Locate func() string

	// wrap, if set (by tests), stands between each role but the
	// coordinator and its network.
	wrap func(Role, rdma.Network) rdma.Network
}

// Listeners are where the roles of this process listen. StartProcess
// owns them: the roles close them when they end, StartProcess when it
// fails.
type Listeners struct {
	Coordinator rdma.Listener   // set where this process runs the coordinator
	Servers     []rdma.Listener // one per shard server it runs, in the order of Roles.Servers
}

// Close closes every listener.
func (l Listeners) Close() {
	if l.Coordinator != nil {
		l.Coordinator.Close()
	}
	for _, ln := range l.Servers {
		ln.Close()
	}
}

// Job is this process's part of a training job: every role of a job in
// one process (Start), or the roles its topology gives a process of a
// job of several (StartProcess).
type Job struct {
	roles    Roles
	coord    *Coordinator  // nil where the coordinator runs elsewhere
	stop     chan struct{} // closed by Interrupt: shard servers stop after a checkpoint (no coordinator here)
	stopOnce sync.Once
	addrs    []string // in one process (Start): where the coordinator and the shard server listen
	parent   context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	norm     data.Normalizer

	mu      sync.Mutex
	errs    []error // the roles' failures, in order
	res     *Result
	weights []float32
}

// StartProcess validates cfg and starts the roles that p.Topology gives
// process p.Index: the coordinator, the evaluator, shard servers and
// learners, each of the last three joining the job at the coordinator
// (in this process, or at p.Coordinator). It returns while they run;
// errors before any goroutine starts are returned here, later ones by
// Wait. Every role has the job's Settings, id (Config.Job) and hooks.
//
// What a process needs of cfg depends on its roles: every role needs
// Spec and the settings; the coordinator Train (its size makes the data
// plan); learners Engine and Train; the evaluator Engine (and Test, to
// measure anything). A process of shard servers only loads no data.
func StartProcess(ctx context.Context, cfg Config, p ProcessConfig) (*Job, error) {
	j, err := startProcess(ctx, cfg, p)
	if err != nil {
		p.Listeners.Close()
	}
	return j, err
}

func startProcess(ctx context.Context, cfg Config, p ProcessConfig) (*Job, error) {
	if err := p.Topology.check(cfg.Learners, cfg.Shards); err != nil {
		return nil, err
	}
	if p.Index < 0 || p.Index >= len(p.Topology.Processes) {
		return nil, fmt.Errorf("%w: process %d of %d", ErrTopology, p.Index, len(p.Topology.Processes))
	}
	r := p.Topology.Processes[p.Index]
	if (p.Listeners.Coordinator != nil) != r.Coordinator || len(p.Listeners.Servers) != len(r.Servers) {
		return nil, fmt.Errorf("%w: process %d runs %+v, with %d shard-server listeners and a coordinator's: %t",
			ErrTopology, p.Index, r, len(p.Listeners.Servers), p.Listeners.Coordinator != nil)
	}
	if err := cfg.validateFor(r); err != nil {
		return nil, err
	}
	j := &Job{roles: r, stop: make(chan struct{}), parent: ctx}
	coordAddr := p.Coordinator
	// The settings are taken once: they hash the initial weights, which
	// are let go of below.
	settings := cfg.Settings()
	if r.Coordinator {
		plan := cfg.Plan(cfg.Train.Info().Len)
		if err := plan.Validate(); err != nil {
			return nil, param.Fieldf("Batch", "%v", err)
		}
		var err error
		if j.norm, err = cfg.normalizer(); err != nil {
			return nil, err
		}
		ccfg := cfg.coordinatorConfig(settings, p.Topology, plan, j.norm)
		ccfg.OnResult = j.onResult(cfg.OnResult)
		coord, err := NewCoordinator(ccfg)
		if err != nil {
			return nil, err
		}
		j.coord, coordAddr = coord, p.Listeners.Coordinator.Addr()
	}
	var layout []param.Segment
	var init []float32
	if len(r.Servers) > 0 {
		var err error
		if layout, init, err = cfg.InitialWeights(); err != nil {
			return nil, err
		}
	}
	host := cmp.Or(p.Host, "localhost")
	member := func(role Role, id int) Member {
		n := p.Network
		if p.wrap != nil {
			n = p.wrap(role, n)
		}
		return cfg.member(settings, n, coordAddr, j.coord != nil, p.Locate, Process{Rank: r.Rank, Role: role, ID: id, Host: host, PID: os.Getpid()})
	}
	ctx, j.cancel = context.WithCancel(ctx)
	if j.coord != nil {
		j.wg.Go(func() {
			res, err := j.coord.Serve(ctx, p.Listeners.Coordinator)
			j.mu.Lock()
			j.res = res
			j.mu.Unlock()
			if !errors.Is(err, ErrInterrupted) || res == nil { // interrupted before it started: no result
				j.fail(err)
			}
			if err != nil && !errors.Is(err, ErrInterrupted) {
				// The job failed: a role of this process that lost its
				// connection to the coordinator would dial it for ever
				// (its rendezvous is unbounded here).
				j.cancel()
			}
		})
	}
	servers := make([]ServerConfig, len(r.Servers))
	shardsHere := 0
	for _, k := range r.Servers {
		shardsHere += len(p.Topology.Servers[k])
	}
	updateThreads := cfg.UpdateThreads(len(r.Learners), shardsHere, runtime.GOMAXPROCS(0))
	for i, k := range r.Servers {
		var stop <-chan struct{}
		if j.coord == nil { // else the coordinator's interruption stops them
			stop = j.stop
		}
		servers[i] = cfg.serverConfig(member(RoleServer, k), p.Topology, k, layout, init)
		servers[i].Listener, servers[i].Stop = p.Listeners.Servers[i], stop
		servers[i].UpdateThreads = updateThreads
	}
	// The shard servers copy their ranges of the initial weights and of a
	// resume's shards as they start, and let them go (RunServer): nothing
	// here keeps them, so that a process of a large network holds them
	// only that long (alexnet's initial vector is 244 MB).
	init, cfg.Init, cfg.Resume = nil, nil, nil
	for i := range servers {
		j.wg.Go(func() { j.fail(RunServer(ctx, takeServer(&servers[i]))) })
	}
	if r.Evaluator {
		j.wg.Go(func() {
			w, err := RunEvaluator(ctx, EvaluatorConfig{Member: member(RoleEvaluator, 0), Spec: cfg.Spec, Engine: cfg.Engine,
				Test: cfg.Test, Batch: cfg.EvalBatch, Workers: cfg.EvalWorkers(len(r.Learners)), Shards: cfg.Shards,
				OnFinal: j.finalWeights})
			j.evaluatorEnded(w, err)
		})
	}
	for _, id := range r.Learners {
		j.wg.Go(func() {
			j.fail(RunLearner(ctx, LearnerConfig{Member: member(RoleLearner, id), ID: id, Spec: cfg.Spec, Engine: cfg.Engine,
				Train: cfg.Train, Workers: cfg.Workers, Protocol: cfg.Protocol, Shards: cfg.Shards,
				Codec: cfg.Codec, Overlap: cfg.Overlap, EarlyPush: cfg.EarlyPush, Report: cfg.Report, OnClient: cfg.OnClient}))
		})
	}
	return j, nil
}

// coordinatorConfig is the coordinator's configuration in a job of
// topology topo with settings (c.Settings()), the data plan and the
// input normalisation norm; OnResult is the caller's to set.
func (c *Config) coordinatorConfig(settings Settings, topo Topology, plan data.Plan, norm data.Normalizer) CoordinatorConfig {
	return CoordinatorConfig{Settings: settings, Plan: plan, Learners: c.Learners, Servers: topo.Servers, Evaluator: true,
		Expect: topo.expect(), Heartbeat: c.Heartbeat, Rendezvous: c.Rendezvous, WaitWarn: c.WaitWarn, ServerTimeout: c.PSTimeout,
		Checkpoints: c.Checkpoints, CheckpointEvery: c.CheckpointEvery, CheckpointInterval: c.CheckpointInterval, Resume: c.Resume.coordinatorOnly(),
		Logger: c.Logger, OnEpoch: c.OnEpoch, norm: packNorm(norm, c.Spec.Input)}
}

// member is the Member of a role (pr) of a job with settings
// (c.Settings()) over network n, joining the coordinator at coordinator: a coordinator in the same process
// (coordHere) bounds the rendezvous itself, naming who is missing; else
// the role's join is bounded by Rendezvous.
func (c *Config) member(settings Settings, n rdma.Network, coordinator string, coordHere bool, locate func() string, pr Process) Member {
	rendezvous := c.Rendezvous
	if coordHere {
		rendezvous = 0
	}
	return Member{Network: n, Job: c.Job, Coordinator: coordinator, Settings: settings, Rendezvous: rendezvous, WaitWarn: c.WaitWarn,
		PSTimeout: c.PSTimeout, Locate: locate, Logger: c.Logger, Process: pr}
}

// serverConfig is the configuration of shard server k of topology topo,
// as member m, with the network's layout and initial weights; Listener
// and Stop are the caller's to set.
func (c *Config) serverConfig(m Member, topo Topology, k int, layout []param.Segment, init []float32) ServerConfig {
	return ServerConfig{Member: m, PS: c.PSConfig(layout, 0), Shards: topo.Servers[k], Init: init, Codec: c.WeightsCodec(),
		Checkpoints: c.Checkpoints, Resume: c.Resume, OnServe: c.OnServe}
}

// finalWeights takes the evaluator's final weights (EvaluatorConfig.OnFinal),
// which the result gets.
func (j *Job) finalWeights(w []float32) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.weights = w
}

// evaluatorEnded takes the end of this process's evaluator: the final
// weights, or its failure. An evaluator that fails after it reported the
// final weights (this process is stopped while the coordinator finishes
// the job) keeps those it gave OnFinal: the coordinator's result, which
// may still be made, has them.
func (j *Job) evaluatorEnded(w []float32, err error) {
	if w != nil {
		j.finalWeights(w)
	}
	j.fail(err)
}

// takeServer returns *c and clears it, so that the caller's slice holds
// nothing RunServer lets go of.
func takeServer(c *ServerConfig) ServerConfig {
	v := *c
	*c = ServerConfig{}
	return v
}

// onResult wraps a Config.OnResult hook: the result it receives has the
// final weights where this process runs the evaluator (which measured
// them before it reported, see EvaluatorConfig.OnFinal). A result
// without them (the evaluator's weights lost: errNoWeights) does not
// reach the hook, which writes it as the trained model: the job fails
// instead (Wait).
func (j *Job) onResult(hook func(*Result)) func(*Result) {
	if hook == nil {
		return nil
	}
	return func(res *Result) {
		j.mu.Lock()
		if j.roles.Evaluator {
			res.Weights, res.Normalizer = j.weights, j.norm
		}
		missing := j.noWeights()
		j.mu.Unlock()
		if missing {
			return
		}
		hook(res)
	}
}

// errNoWeights is the failure of a job whose coordinator finished it
// while this process's evaluator, which reported the final weights, no
// longer had them.
var errNoWeights = errors.New("cluster: the job finished without the evaluator's final weights")

// noWeights reports whether the job's result lacks the final weights
// where this process runs the evaluator, and records errNoWeights as a
// failure if so; j.mu is held.
func (j *Job) noWeights() bool {
	if !j.roles.Evaluator || j.weights != nil {
		return false
	}
	if !slices.Contains(j.errs, errNoWeights) {
		j.errs = append(j.errs, errNoWeights)
	}
	return true
}

// validateFor checks cfg for a process that runs r.
func (c *Config) validateFor(r Roles) error {
	switch learns := len(r.Learners) > 0; {
	case c.Spec == nil:
		return param.Fieldf("Spec", "no network")
	case (learns || r.Evaluator) && c.Engine == nil:
		return param.Fieldf("Engine", "no compute engine")
	case (learns || r.Coordinator) && (c.Train == nil || c.Train.Info().Len == 0):
		return param.Fieldf("Train", "no training data")
	}
	if err := c.ValidateSettings(); err != nil {
		return err
	}
	in := c.Spec.Input
	for _, ds := range []data.Set{c.Train, c.Test} {
		if ds != nil {
			if err := ds.Info().CheckShape(in.C, in.H, in.W, c.Spec.Classes()); err != nil {
				return err
			}
		}
	}
	return nil
}

// normalizer returns the job's input normalisation (see
// Config.Normalizer): the one a resumed job's checkpoint kept, else
// Normalizer, else the training set's mean.
func (c *Config) normalizer() (data.Normalizer, error) {
	if c.Resume != nil {
		st, err := c.Resume.coordinatorState()
		if err != nil {
			return data.Normalizer{}, err
		}
		if st.Norm != nil {
			z, err := st.Norm.normalizer(c.Spec.Input)
			if err != nil {
				return z, fmt.Errorf("%s: %w", c.Resume.Snapshot.Path(coordinatorFile), err)
			}
			return z, nil
		}
	}
	if c.Normalizer != nil {
		return *c.Normalizer, nil
	}
	_, inMemory := c.Train.(*data.Dataset)
	if !inMemory && c.Logger != nil {
		c.Logger.Info("taking the input mean", "images", min(MeanImages, c.Train.Info().Len), "data", c.Train.Info().Name)
	}
	z, err := c.Train.Mean(MeanImages)
	if err == nil && !inMemory && c.Logger != nil && len(z.Mean) > 0 {
		plane := len(z.Mean) / c.Spec.Input.C
		var per []string
		for ch := range c.Spec.Input.C {
			per = append(per, fmt.Sprintf("%.2f", z.Mean[ch*plane]))
		}
		c.Logger.Info("input mean", "channels", strings.Join(per, " "))
	}
	return z, err
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

// Progress returns a snapshot of the job's progress where this process
// runs the coordinator (the zero Progress elsewhere); it is safe to call
// from any goroutine.
func (j *Job) Progress() Progress {
	if j.coord == nil {
		return Progress{}
	}
	return j.coord.Progress()
}

// Interruptible reports whether Interrupt ends this process's part of the
// job gracefully: it runs the coordinator or shard servers.
func (j *Job) Interruptible() bool { return j.coord != nil || len(j.roles.Servers) > 0 }

// Interrupt ends the job early where this process runs the coordinator
// (see Coordinator.Interrupt): Wait then returns the result so far with
// ErrInterrupted (no result if the job had not started). Elsewhere it
// stops this process's shard servers after a checkpoint
// (ServerConfig.Stop); learners are not interrupted.
func (j *Job) Interrupt() {
	if j.coord != nil {
		j.coord.Interrupt()
		return
	}
	j.stopOnce.Do(func() { close(j.stop) })
}

// Wait waits for this process's roles to end. Where the process runs the
// coordinator it returns the job's result: the final weights (where it
// runs the evaluator too), their test error, the history and the
// servers' counters; elsewhere nil and the roles' failure, if any.
func (j *Job) Wait() (*Result, error) {
	j.wg.Wait()
	j.cancel()
	stopped := j.parent.Err()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.res != nil && j.res.Interrupted && (j.weights != nil || !j.roles.Evaluator) {
		j.res.Weights, j.res.Normalizer = j.weights, j.norm
		return j.res, ErrInterrupted
	}
	if err := j.cause(); err != nil {
		if stopped != nil && !errors.Is(err, stopped) { // a consequence of the caller's cancellation
			err = fmt.Errorf("%w: %w", stopped, err)
		}
		return nil, err
	}
	if j.coord == nil {
		return nil, nil
	}
	if j.res == nil {
		return nil, fmt.Errorf("cluster: the job ended without a result: %w", ErrJobFailed)
	}
	if j.noWeights() {
		return nil, errNoWeights
	}
	res := j.res
	res.Weights, res.Normalizer = j.weights, j.norm
	return res, nil
}
