package cluster

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/ps/checkpoint"
	"github.com/softsync/softsync/rdma"
)

// The runtime pass of the chaos simulator runs a seed's job through the
// shipped runtimes (StartProcess and every goroutine it starts: the
// coordinator's Serve, RunServer over ps.Server and its shard loops,
// RunLearner over learner.Learner and ps.Client, RunEvaluator, join's
// dials, rejoins and redials) in virtual time, inside a testing/synctest
// bubble, over the in-memory transport and an in-memory disk (simDisk,
// behind a lock) that the real checkpoint code writes into. The job is
// the one the core simulator draws for the seed (newSimJob: protocol,
// rule, learners, shards, topology, data plan, checkpoints, options, the
// head's address fixed or found through Locate), run on synthetic data
// of the network's shape with the real compute engine. TestChaosSim runs
// it for every seed (-chaos.runtime.every N: every N-th; 0: none), one
// seed after the other on a goroutine of its own beside the core
// simulator's seeds; it costs about as much as the core simulator's run.
//
// Faults come from outside the code under test, one per job, per a plan
// drawn from the seed (rtFaults, from a stream of its own): a wrapping
// rdma.Network per process life counts the messages the process sends
// and, at the plan's k-th, kills the process (its connections and
// listeners close, it sends nothing more, its context ends: SIGKILL as
// its peers see it), resets the connection (one between two processes),
// pauses the process for longer than the heartbeat (SIGSTOP: it reads
// nothing, and what it sends waits, in order, until the pause is over;
// its timers still run), or fills the disk for a few seconds; or the
// user's Ctrl-C reaches the head at a drawn time. The launcher
// (rtJob.watch) restarts as launch --restarts does: a learner whatever
// its error, a shard server or the head when killed (not a head that
// wrote the job's outputs: --ended-file), with --resume from the newest
// complete checkpoint; once the head has ended for good, the rest get a
// grace of 13 s (launch's 10 s, then SIGTERM and 3 s), then are stopped.
//
// Checked: the head ends before a virtual deadline of 30 minutes, and
// the job sends fewer than rtBudget messages (a loop that lets no time
// pass), else the seed hung; every process ends, and no goroutine
// outlives the job (the bubble fails otherwise); the job succeeds, or,
// interrupted, ends with ErrInterrupted and a result that says so, or
// fails with ErrJobFailed or ErrRendezvous where a head and a shard
// server were both started again (or a shard server ended) after a
// learner had ended for good (out of reach, as in the core simulator);
// a finished job's report has every mini-batch delivered, each shard's
// accepted and dropped gradients plus those the report gives up are the
// job's mini-batches once each, and the result's weights are finite.
//
// Reproducible from a seed: the job, its fault plan (which process, at
// which of its messages, what fault, for how long) and the virtual times
// of every timer. Not reproducible: the interleaving of the goroutines
// (the Go scheduler picks which runnable goroutine runs), so the k-th
// message of a process may be another message in another run, and a
// failure may need several runs of its seed to show again (the command
// it prints, with -count 20). -chaos.runtime.trace records the roles'
// logs and every control message of each pass, printed for those that
// fail (and for -chaos.seed with -v). The core simulator's runs stay bit
// for bit per seed: this pass draws nothing from its streams.

var rtTrace = flag.Bool("chaos.runtime.trace", false, "trace every runtime pass (the roles' logs, control messages), printed for those that fail")

// rtEvery: TestChaosSim runs the runtime pass of every seed whose number
// is a multiple of rtEvery (and of the one seed of -chaos.seed).
var rtEvery = flag.Uint64("chaos.runtime.every", 1, "TestChaosSim runs the shipped runtimes of every N-th seed's job too (0: none)")

// rtSeed reports whether seed's job also runs through the shipped
// runtimes.
func rtSeed(seed uint64) bool {
	if *chaosSeed != 0 {
		return *rtEvery != 0
	}
	return *rtEvery != 0 && seed%*rtEvery == 0
}

// rtDeadline is the virtual time by which a job through the shipped
// runtimes must have ended.
const rtDeadline = 30 * time.Minute

// rtBudget is the number of messages a job through the shipped runtimes
// may send (a few thousand at most when it goes well): past it, the job
// loops without letting virtual time pass, and hung.
const rtBudget = 50_000

// rtFaults is the fault plan of a runtime pass.
type rtFaults struct {
	kind  string        // "", "kill", "reset", "pause", "disk", "interrupt"
	proc  int           // the process
	at    int           // at its at-th message sent (its first life), or the first after it
	pause time.Duration // how long a pause, or a full disk, lasts
	when  time.Duration // interrupt: virtual time after the start
}

func (f rtFaults) describe() string {
	switch f.kind {
	case "":
		return "none"
	case "interrupt":
		return fmt.Sprintf("Ctrl-C of the head at %v", f.when)
	case "pause":
		return fmt.Sprintf("pause of process %d for %v at its message %d", f.proc, f.pause, f.at)
	case "disk":
		return fmt.Sprintf("disk full for %v from the head's message %d", f.pause, f.at)
	}
	return fmt.Sprintf("%s of process %d at its message %d", f.kind, f.proc, f.at)
}

// drawRTFaults draws the plan of seed's runtime pass from a stream of its
// own.
func drawRTFaults(seed uint64, sj *simJob) rtFaults {
	rng := rand.New(rand.NewPCG(seed, 0x72756e74))
	procs := len(sj.topo.Processes)
	kinds := []string{"", "kill", "kill", "kill", "reset", "reset", "pause", "disk", "interrupt"}
	f := rtFaults{kind: kinds[rng.IntN(len(kinds))], proc: rng.IntN(procs), at: 1 + rng.IntN(60)}
	switch f.kind {
	case "pause":
		f.pause = sj.cfg.Heartbeat*2 + time.Duration(rng.Int64N(int64(sj.cfg.PSTimeout)*2))
	case "interrupt":
		f.when = time.Duration(rng.Int64N(int64(2 * time.Second)))
	case "disk":
		f.proc = 0
		f.pause = time.Duration(1+rng.IntN(5)) * time.Second
	}
	return f
}

// rtJob is one job through the shipped runtimes.
type rtJob struct {
	seed   uint64
	sj     *simJob // the core simulator's draw of the job
	cfg    Config
	topo   Topology
	faults rtFaults
	net    rdma.Network
	disk   *rtDisk
	store  *checkpoint.Store

	mu        sync.Mutex
	coordAddr string
	ending    bool // the head ended for good: no restart
	restarts  int
	fired     bool
	procs     []*rtProc
	res       *Result
	err       error
	log       []string
	verbose   bool // log the roles' logs too
	// endedHead: the head wrote the job's outputs, with result ended
	endedHead bool
	ended     *Result
	inside    map[string]bool // the local addresses of connections within a process
	// sends counts the job's messages; overBudget closes at rtBudget
	sends      atomic.Int64
	overBudget chan struct{}
	// pausedUntil is when the pause of a process, if any, ends (Unix ns).
	pausedUntil atomic.Int64
	// learnerDone: a learner's process ended for good, its data done;
	// lateHead, lateServer: the head, a shard server started again (or
	// a shard server ended for good) after that
	learnerDone, lateHead, lateServer bool
}

// rtLogWriter appends the roles' log lines to the job's log.
type rtLogWriter struct{ j *rtJob }

func (w rtLogWriter) Write(b []byte) (int, error) {
	w.j.mu.Lock()
	defer w.j.mu.Unlock()
	if len(w.j.log) > rtLogLines {
		return len(b), nil
	}
	w.j.log = append(w.j.log, strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

// rtProc is one process of the job, across its lives.
type rtProc struct {
	index  int
	life   int
	net    *rtNet
	job    *Job
	cancel context.CancelFunc
	killed atomic.Bool
	err    error
}

// rtNet is the network of one life of a process: it counts the messages
// the process sends and fires the plan's fault at its k-th; sever closes
// every connection and listener at once (SIGKILL).
type rtNet struct {
	rdma.Network
	j    *rtJob
	p    *rtProc
	life int
	sent atomic.Int64
	// pausedUntil: the process is paused (SIGSTOP) until then (Unix ns):
	// it reads nothing, and what it sends waits
	pausedUntil atomic.Int64
	severable
}

type rtConn struct {
	rdma.Conn
	n *rtNet
	// While the process is paused, and until what it sent meanwhile has
	// gone, its sends queue here (in order), and a goroutine sends them
	// once the pause is over: the sender does not block (it may hold a
	// lock, which another goroutine waiting for it could not wait on in
	// virtual time).
	mu       sync.Mutex
	queue    []*rdma.Msg
	draining bool
	closing  bool // closed while draining: closes once the queue has gone
}

// Close closes the connection once what the paused process sent has gone
// (a socket's close sends what was written before it).
func (c *rtConn) Close() error {
	c.mu.Lock()
	if c.draining {
		c.closing = true
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	return c.Conn.Close()
}

// paused returns how long the process is still paused.
func (n *rtNet) paused() time.Duration {
	return time.Until(time.Unix(0, n.pausedUntil.Load()))
}

// send sends m now, or after what is queued.
func (c *rtConn) send(ctx context.Context, m *rdma.Msg) error {
	c.mu.Lock()
	if c.n.paused() <= 0 && !c.draining {
		c.mu.Unlock()
		return c.Conn.Send(ctx, m)
	}
	c.queue = append(c.queue, m)
	if !c.draining {
		c.draining = true
		go c.drain()
	}
	c.mu.Unlock()
	return nil
}

// drain sends the queue once the pause is over.
func (c *rtConn) drain() {
	time.Sleep(c.n.paused())
	for {
		c.mu.Lock()
		if len(c.queue) == 0 {
			c.draining = false
			closing := c.closing
			c.mu.Unlock()
			if closing {
				c.Conn.Close()
			}
			return
		}
		m := c.queue[0]
		c.queue = c.queue[1:]
		c.mu.Unlock()
		c.Conn.Send(context.Background(), m) // a failure shows on the next send or receive
	}
}

func (c *rtConn) Recv(ctx context.Context) (*rdma.Msg, error) {
	m, err := c.Conn.Recv(ctx)
	if d := c.n.paused(); d > 0 {
		time.Sleep(d)
	}
	return m, err
}

func (c *rtConn) Send(ctx context.Context, m *rdma.Msg) error {
	n := c.n
	if n.severed.Load() {
		m.Release()
		return &rdma.OpError{Op: "send", Err: rdma.ErrClosed}
	}
	k := n.sent.Add(1)
	if n.j.sends.Add(1) == rtBudget {
		close(n.j.overBudget)
	}
	if n.j.verbose && len(m.Payload) == 0 {
		n.j.mu.Lock()
		n.j.logf("%v p%d.%d send %d %s->%s type %#x %s", time.Now().Format("15:04:05.000"), n.p.index, n.life, k, c.LocalAddr(), c.RemoteAddr(), m.Type, m.Data)
		n.j.mu.Unlock()
	}
	f := n.j.faults
	// A reset breaks a connection between two processes (the head's
	// evaluator and coordinator talk within one).
	if n.life == 0 && f.proc == n.p.index && int(k) >= f.at && (f.kind != "reset" || !n.j.internal(c)) && n.j.fire() {
		switch f.kind {
		case "kill":
			m.Release()
			n.j.kill(n.p, n)
			return &rdma.OpError{Op: "send", Err: rdma.ErrClosed}
		case "reset":
			m.Release()
			c.Conn.Close()
			return &rdma.OpError{Op: "send", Err: rdma.ErrClosed}
		case "pause":
			n.pausedUntil.Store(time.Now().Add(f.pause).UnixNano())
			n.j.pausedUntil.Store(n.pausedUntil.Load())
		}
	}
	return c.send(ctx, m)
}

func (n *rtNet) track(c rdma.Conn) rdma.Conn {
	if n.keep(c) {
		c.Close()
	}
	return &rtConn{Conn: c, n: n}
}

// internal reports whether c joins two roles of one process.
func (j *rtJob) internal(c rdma.Conn) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.inside[c.LocalAddr()] || j.inside[c.RemoteAddr()]
}

func (n *rtNet) Dial(ctx context.Context, addr string) (rdma.Conn, error) {
	if n.severed.Load() {
		return nil, &rdma.OpError{Op: "dial", Peer: addr, Err: rdma.ErrClosed}
	}
	c, err := n.Network.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	if n.listens(addr) {
		n.j.mu.Lock()
		n.j.inside[c.LocalAddr()] = true
		n.j.mu.Unlock()
	}
	return n.track(c), nil
}

func (n *rtNet) listener(ln rdma.Listener) rdma.Listener { return n.severable.listener(ln, n.track) }

// rtDisk is the simulator's in-memory disk behind a lock (the roles write
// checkpoints from goroutines of their own), full while full is set.
type rtDisk struct {
	mu   sync.Mutex
	d    *simDisk
	full atomic.Bool
}

func newRTDisk() *rtDisk {
	r := &rtDisk{}
	r.d = newSimDisk(r.full.Load)
	return r
}

func (r *rtDisk) MkdirAll(dir string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.d.MkdirAll(dir)
}

func (r *rtDisk) ReadDir(dir string) ([]fs.DirEntry, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.d.ReadDir(dir)
}

func (r *rtDisk) Stat(name string) (fs.FileInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.d.Stat(name)
}

func (r *rtDisk) Open(name string) (fs.File, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.d.Open(name)
}

func (r *rtDisk) CreateTemp(dir, pattern string) (checkpoint.TempFile, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, err := r.d.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	return rtTemp{t, r}, nil
}

func (r *rtDisk) Rename(oldpath, newpath string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.d.Rename(oldpath, newpath)
}

func (r *rtDisk) Remove(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.d.Remove(name)
}

func (r *rtDisk) RemoveAll(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.d.RemoveAll(name)
}

func (r *rtDisk) SyncDir(dir string) error { return nil }

type rtTemp struct {
	checkpoint.TempFile
	r *rtDisk
}

func (t rtTemp) Write(p []byte) (int, error) {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	return t.TempFile.Write(p)
}

// fire reports whether the plan's fault fires now (once).
func (j *rtJob) fire() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.fired || j.ending {
		return false
	}
	j.fired = true
	j.logf("fault: %s", j.faults.describe())
	if j.faults.kind == "disk" {
		j.disk.full.Store(true)
		time.AfterFunc(j.faults.pause, func() { j.disk.full.Store(false) })
	}
	return true
}

// rtLogLines bounds a job's log.
const rtLogLines = 20_000

func (j *rtJob) logf(format string, args ...any) {
	if len(j.log) > rtLogLines {
		return
	}
	j.log = append(j.log, fmt.Sprintf(format, args...))
}

// kill kills life n of process p (SIGKILL): its connections and
// listeners close, it sends nothing more, and its context ends.
func (j *rtJob) kill(p *rtProc, n *rtNet) {
	p.killed.Store(true)
	n.sever()
	j.mu.Lock()
	cancel := p.cancel
	j.mu.Unlock()
	cancel()
}

func (j *rtJob) locate() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.coordAddr
}

// procConfig is the configuration a life of a process starts with: the
// job's, resuming from the newest complete checkpoint where there is one
// (launch --resume).
func (j *rtJob) procConfig() (Config, error) {
	c := j.cfg
	if c.Checkpoints != nil {
		if _, _, err := j.store.Latest(nil); err == nil {
			if _, err := c.ResumeFrom(j.store, nil); err != nil {
				return c, fmt.Errorf("resume: %w", err)
			}
		}
	}
	return c, nil
}

// start starts the next life of p.
func (j *rtJob) start(ctx context.Context, p *rtProc) error {
	r := j.topo.Processes[p.index]
	n := &rtNet{Network: j.net, j: j, p: p, life: p.life}
	pc := ProcessConfig{Topology: j.topo, Index: p.index, Network: n, Host: fmt.Sprintf("10.0.0.%d", p.index+1)}
	if !j.sj.fixedHead {
		pc.Locate = j.locate
	}
	if r.Coordinator {
		addr := ""
		if j.sj.fixedHead {
			addr = "head"
		}
		ln, err := j.net.Listen(addr)
		if err != nil {
			return err
		}
		j.mu.Lock()
		j.coordAddr = ln.Addr()
		j.mu.Unlock()
		pc.Listeners.Coordinator = n.listener(ln)
	}
	for range r.Servers {
		ln, err := j.net.Listen("")
		if err != nil {
			return err
		}
		pc.Listeners.Servers = append(pc.Listeners.Servers, n.listener(ln))
	}
	pc.Coordinator = j.locate()
	pc.wrap = func(Role, rdma.Network) rdma.Network { return n }
	cfg, err := j.procConfig()
	if err != nil {
		pc.Listeners.Close()
		return err
	}
	if j.verbose {
		cfg.Logger = slog.New(slog.NewTextHandler(rtLogWriter{j}, &slog.HandlerOptions{Level: slog.LevelDebug})).With("process", p.index, "life", p.life)
	}
	if r.Coordinator {
		// The head writes the job's outputs (launch's --ended-file): a
		// head killed after that is not started again, and its result is
		// the job's.
		cfg.OnResult = func(res *Result) {
			j.mu.Lock()
			defer j.mu.Unlock()
			if !j.endedHead {
				j.endedHead, j.ended = true, res
			}
		}
	}
	j.mu.Lock()
	if p.life > 0 && j.learnerDone {
		// Out of reach (cluster.md, "Failures"; the core simulator's
		// lateHead, lateServer): a head and a shard server both started
		// again, or ended, once a learner had ended for good.
		j.lateHead = j.lateHead || r.Coordinator
		j.lateServer = j.lateServer || len(r.Servers) > 0
	}
	j.mu.Unlock()
	pctx, cancel := context.WithCancel(ctx)
	// The process's goroutines may send (and a kill at their k-th
	// message end the life) before StartProcess returns: its context's
	// end is there for the kill from the start.
	j.mu.Lock()
	p.net, p.cancel = n, cancel
	j.mu.Unlock()
	job, err := StartProcess(pctx, cfg, pc)
	if err != nil {
		cancel()
		return err
	}
	j.mu.Lock()
	p.job = job
	j.mu.Unlock()
	return nil
}

// watch is launch's watch of process p: it waits for each life to end and
// starts the next where launch would.
func (j *rtJob) watch(ctx context.Context, p *rtProc) {
	r := j.topo.Processes[p.index]
	for {
		res, err := p.job.Wait()
		p.cancel()
		killed := p.killed.Swap(false)
		again := killed || err != nil && len(r.Learners) > 0 && len(r.Servers) == 0 && !r.Coordinator
		j.mu.Lock()
		j.logf("process %d life %d ended: killed %v, %v", p.index, p.life, killed, err)
		if r.Coordinator && j.endedHead {
			again = false
			if killed {
				res, err = j.ended, nil
				if res.Interrupted {
					err = ErrInterrupted
				}
			}
		}
		if r.Coordinator && (!killed || !again) {
			j.res, j.err = res, err
		}
		if len(r.Learners) > 0 && !killed && err == nil {
			j.learnerDone = true
		}
		if len(r.Servers) > 0 && !killed && j.learnerDone {
			j.lateServer = true
		}
		if j.ending || j.restarts == 0 || ctx.Err() != nil {
			again = false
		}
		if r.Coordinator && !again {
			j.ending = true
		}
		if again {
			j.restarts--
		}
		p.err = err
		j.mu.Unlock()
		if !again {
			return
		}
		time.Sleep(time.Duration(1+j.seed%3) * time.Second) // launch's restart delay
		p.life++
		if err := j.start(ctx, p); err != nil {
			j.mu.Lock()
			j.logf("process %d: restart: %v", p.index, err)
			p.err = err
			j.mu.Unlock()
			return
		}
	}
}

// run runs the job to its end and returns whether it hung.
func (j *rtJob) run() (hung bool, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range j.topo.Processes {
		j.procs = append(j.procs, &rtProc{index: i})
	}
	for _, p := range j.procs {
		if err := j.start(ctx, p); err != nil {
			j.stopAll()
			for _, p := range j.procs {
				if p.job != nil {
					p.job.Wait()
				}
			}
			return false, fmt.Errorf("process %d: start: %w", p.index, err)
		}
	}
	var wg sync.WaitGroup
	for _, p := range j.procs {
		wg.Go(func() { j.watch(ctx, p) })
	}
	if j.faults.kind == "interrupt" {
		time.AfterFunc(j.faults.when, func() {
			j.mu.Lock()
			job := j.procs[0].job
			j.mu.Unlock()
			job.Interrupt()
		})
	}
	head := make(chan struct{})
	go func() {
		for {
			j.mu.Lock()
			done := j.ending
			j.mu.Unlock()
			if done {
				close(head)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	start := time.Now()
	deadline := time.NewTimer(rtDeadline)
	defer deadline.Stop()
	select {
	case <-head:
	case <-deadline.C:
		hung = true
	case <-j.overBudget:
		j.mu.Lock()
		j.logf("%d messages sent by %v (virtual): a loop that lets no time pass", rtBudget, time.Since(start))
		j.mu.Unlock()
		hung = true
	}
	if hung {
		j.mu.Lock()
		if j.verbose {
			buf := make([]byte, 1<<20)
			j.log = append(j.log, "goroutines at the deadline:\n"+string(buf[:runtime.Stack(buf, true)]))
		}
		j.mu.Unlock()
		j.stopAll() // what loops without letting time pass ends too
		<-head
	}
	// launch's grace for the rest, then terminate (SIGTERM, SIGKILL).
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	grace := time.NewTimer(13 * time.Second)
	defer grace.Stop()
	select {
	case <-all:
	case <-grace.C:
		j.mu.Lock()
		j.logf("grace over: terminating the rest")
		j.mu.Unlock()
		j.stopAll()
		<-all
	}
	// A process paused past its end leaves its reads and its queued
	// sends asleep until the pause is over (rtConn): they end then, in
	// the bubble's time, which stops once the job's goroutine returns.
	if d := time.Until(time.Unix(0, j.pausedUntil.Load())); d > 0 {
		time.Sleep(d)
	}
	return hung, nil
}

// stopAll cancels every process still running.
func (j *rtJob) stopAll() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.ending = true
	for _, p := range j.procs {
		if p.cancel != nil {
			p.cancel()
		}
	}
}

// check checks the job's outcome.
func (j *rtJob) check() error {
	sj := j.sj
	switch {
	case sj.faults.divergeFrom > 0:
		return nil // not drawn for the runtime pass
	case j.faults.kind == "interrupt" && errors.Is(j.err, ErrInterrupted):
		if j.res != nil && !j.res.Interrupted {
			return fmt.Errorf("interrupted, the result does not say so")
		}
		return nil
	case j.lateHead && j.lateServer && (errors.Is(j.err, ErrRendezvous) || errors.Is(j.err, ErrJobFailed)):
		return nil
	case j.err != nil:
		return fmt.Errorf("the job failed: %w", j.err)
	case j.res == nil:
		return errors.New("the job ended without a result")
	}
	res := j.res
	if res.Interrupted {
		return nil
	}
	if len(res.Weights) != sj.total {
		return fmt.Errorf("the result has %d weights, the model %d", len(res.Weights), sj.total)
	}
	for i, x := range res.Weights {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return fmt.Errorf("weight %d is %v", i, x)
		}
	}
	total := uint64(sj.batches)
	if res.Chunks.Batches < sj.batches {
		return fmt.Errorf("the report counts %d mini-batches delivered of %d", res.Chunks.Batches, sj.batches)
	}
	for k, st := range res.Shards {
		var given uint64
		if k < len(res.GivenUp) {
			given = res.GivenUp[k]
		}
		if n := st.Gradients + st.Dropped + given; n != total {
			return fmt.Errorf("shard %d: %d accepted + %d dropped + %d given up, want the job's %d mini-batches once each", k, st.Gradients, st.Dropped, given, total)
		}
	}
	return nil
}

// runRuntime runs seed's job through the shipped runtimes in a bubble of
// its own.
func runRuntime(t *testing.T, seed uint64, eng kernels.Engine, verbose bool) (err error, hung bool, describe string, log []string) {
	defer func() {
		// synctest panics when the bubble's goroutines are all blocked
		// with no timer to wake them, or when some are left blocked as
		// the job ends: a deadlock of the job, reported as its failure
		// (its goroutines stay blocked).
		if p := recover(); p != nil {
			err, hung = fmt.Errorf("%v (run with GOTRACEBACK=all for the goroutines)", p), false
		}
	}()
	synctest.Test(t, func(t *testing.T) {
		w := newSimWorld(seed, false)
		sj := newSimJob(w)
		sj.faults.divergeFrom = 0
		c := sj.cfg
		in := c.Spec.Input
		train := data.Synthetic(sj.plan.Images, in.C, in.H, in.W, c.Spec.Classes(), seed)
		test := data.Synthetic(2*c.Batch, in.C, in.H, in.W, c.Spec.Classes(), seed+1)
		train.Scale, test.Scale = 1.0/256, 1.0/256
		c.Engine, c.Train, c.Test, c.Transport, c.Workers = eng, train, test, "inmem", 1
		j := &rtJob{seed: seed, sj: sj, topo: sj.topo, faults: drawRTFaults(seed, sj), restarts: 20, verbose: verbose, inside: map[string]bool{}, overBudget: make(chan struct{})}
		j.disk = newRTDisk()
		if sj.ckpts {
			var e error
			if j.store, e = checkpoint.OpenFS(j.disk, "/job/checkpoints"); e != nil {
				err = e
				return
			}
			c.Checkpoints = j.store
		}
		j.cfg = c
		if j.net, err = rdma.Open("inmem", rdma.Options{Job: c.Job, QueueLen: 1 << 12}); err != nil {
			return
		}
		describe = fmt.Sprintf("runtimes: %s; faults: %s", sj.describe(), j.faults.describe())
		if hung, err = j.run(); err != nil || hung {
			log = j.log
			return
		}
		err = j.check()
		log = j.log
	})
	return
}

// rtKnown are seeds whose runtime pass fails for a cause found and not
// fixed yet: TestChaosSim counts them apart ("known") unless run alone
// (-chaos.seed), whether they fail or not (the interleaving of their
// goroutines is not the seed's). Besides them, a few passes in 10,000
// (make chaos-sim) may still hang or fail at other seeds in each run
// and pass when run again; each is a defect to find. None of seeds
// 1…300 (make test's) failed in 16 runs of them. Fixed, each with a
// test of its own: a learner's last progress report lost as the head
// died failed the job (seed 7512); a result lacked the evaluator's final
// weights when the head's process stopped as the coordinator finished; a
// pause that outlasted the job was reported as a deadlock (seed 1075); a
// learner or evaluator that dialed a shard server as its process was
// killed waited for ever on a connection nobody would accept or close
// (an in-memory dial racing its listener's close, seeds 3636, 9643 and
// others); a hardsync round not closed after a learner's link to a
// restarted shard server broke (seeds 666, 1245 and 14 others: a
// restored shard's rounds claimed by pushes of its earlier life, as
// chaosKnown's former 2730); the head (and the shard server of its
// process) killed once the data was done, as the only learner sent its
// last report, and restarted without a checkpoint: the learner rejoined
// and reported done, and the restarted shard's lost mini-batches, which
// no learner was left to push again, failed the job after ServerTimeout
// (seeds 6048 and 7328). A restarted coordinator now gives them up, as
// under one coordinator, once it knows the data was done (a shard server
// rejoins final, or a learner says it was told the end, which the
// learner records as the reply arrives: its reader may build the rejoin
// hello before Next takes the reply) and no learner is left:
// TestCoreRestartedAfterTheLastReport, TestLearnerRejoinHelloEnded.
var rtKnown = map[uint64]string{}

// rtOutcome is one runtime pass's end.
type rtOutcome struct {
	seed     uint64
	err      error
	hung     bool
	describe string
	log      []string
}

// rtRuns are the runtime passes of TestChaosSim, run one after the other
// on a goroutine of their own beside the core simulator's seeds.
type rtRuns struct {
	done    chan struct{}
	outs    []rtOutcome
	current atomic.Uint64 // the seed running
}

// rtStall is how long (real time) the runtime passes may take before
// TestChaosSim gives up on them: a bubble whose goroutines wait on
// something virtual time cannot end (a sync.Mutex held across a wait for
// time) stalls, and the test fails instead of hanging.
const rtStall = 5 * time.Minute

// startRuntimes starts the runtime passes of the seeds rtSeed selects.
func startRuntimes(t *testing.T, seeds []uint64) *rtRuns {
	r := &rtRuns{done: make(chan struct{})}
	var sel []uint64
	for _, s := range seeds {
		if rtSeed(s) {
			sel = append(sel, s)
		}
	}
	if len(sel) == 0 {
		close(r.done)
		return r
	}
	eng := engine(t)
	go func() {
		defer close(r.done)
		for _, s := range sel {
			r.current.Store(s)
			err, hung, describe, log := runRuntime(t, s, eng, *rtTrace || *chaosSeed != 0 && testing.Verbose())
			r.outs = append(r.outs, rtOutcome{seed: s, err: err, hung: hung, describe: describe, log: log})
		}
	}()
	return r
}

// report waits for the runtime passes and reports their failures.
func (r *rtRuns) report(t *testing.T, verbose bool) (runs, failed, hung, known int) {
	select {
	case <-r.done:
	case <-time.After(rtStall):
		s := r.current.Load()
		t.Errorf("seed %d stalled through the runtimes: no virtual time passes, nor does it end (a goroutine waits on a lock held by one that waits for time?)\nreproduce: %s", s, chaosCommand(s))
		return 0, 0, 1, 0
	}
	for _, o := range r.outs {
		why, isKnown := rtKnown[o.seed]
		isKnown = isKnown && *chaosSeed == 0
		switch {
		case isKnown && (o.hung || o.err != nil):
			known++
			t.Logf("seed %d through the runtimes, known (%s): hung %v, %v", o.seed, why, o.hung, o.err)
		case isKnown:
		case o.hung:
			hung++
			t.Errorf("seed %d hung through the runtimes: %s\n%s\nreproduce: %s", o.seed, o.describe, strings.Join(o.log, "\n"), chaosCommand(o.seed))
		case o.err != nil:
			failed++
			t.Errorf("seed %d failed through the runtimes: %v\n%s\n%s\nreproduce: %s", o.seed, o.err, o.describe, strings.Join(o.log, "\n"), chaosCommand(o.seed))
		}
		if verbose {
			t.Logf("seed %d through the runtimes: %s\n%s", o.seed, o.describe, strings.Join(o.log, "\n"))
		}
	}
	return len(r.outs), failed, hung, known
}
