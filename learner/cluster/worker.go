package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/learner"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/errcode"
)

// LearnerConfig configures a learner role.
type LearnerConfig struct {
	Member
	ID     int // learner id, 0 … λ−1
	Spec   *nn.Spec
	Engine kernels.Engine
	// Train is read with the coordinator's normalisation (its welcome's).
	Train     data.Set
	Workers   int // goroutines the network splits a mini-batch over (nn.Config.Workers)
	Protocol  ps.Protocol
	Shards    int
	Codec     rdma.Codec // of the gradients it pushes
	Overlap   bool
	EarlyPush bool // see learner.Config.EarlyPush
	// Report is how often the learner reports its progress, which is also
	// its heartbeat (0: half a second).
	Report time.Duration
	// OnClient, if set, is called with the learner's id and its
	// parameter-server client once it is connected to the shard servers,
	// so that the caller can read the client's live counters
	// (ps.Client.Stats, ps.Client.Pushes, e.g. for metrics). It must not
	// use the client otherwise: the learner does.
	OnClient func(learner int, c *ps.Client)
}

// RunLearner runs a learner: it registers with the coordinator, takes
// chunks of the job's data from it, trains on them through the shard
// servers until the data is done, and reports its progress. It returns
// nil when the job's data is done, else the learner's failure (which it
// reports to the coordinator) or the job's.
//
// A coordinator lost without its stop does not stop the learner: it goes
// on with the chunk it holds while it dials the coordinator again, for
// PSTimeout at most, and says hello as a rejoining learner with its
// incarnation and its chunks; the reports it could not send go out then.
func RunLearner(ctx context.Context, cfg LearnerConfig) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cc, w, err := cfg.join(ctx, hello{})
	if err != nil {
		return err
	}
	r := &worker{cfg: cfg, cc: cc, joined: make(chan struct{}), core: newWorkerCore(w), replies: make(chan chunkReply, 1), addrs: make(chan addr, 1), redial: newWaitLock()}
	defer func() { r.ctrl().conn.Close() }()
	var bg sync.WaitGroup
	defer bg.Wait()
	defer cancel()
	bg.Go(func() { r.read(ctx, cancel) })
	bg.Go(func() { r.reportEvery(ctx) })
	err = r.train(ctx, w)
	if err == nil {
		err = r.flushLast(ctx)
	}
	if err != nil {
		grace, report := trainFailed(err)
		if !report {
			return err
		}
		if grace > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(grace):
			}
		}
		if jobErr := r.jobError(); jobErr != nil {
			return jobErr
		}
		r.ctrl().send(context.Background(), tFail, failure{errcode.Encode(err)})
		return err
	}
	return nil
}

// trainFailed decides what a learner whose training failed with err does
// before it ends: report the failure to the coordinator as the job's,
// after grace, unless the coordinator stops the job meanwhile. A shard
// server that refuses this life of the learner is no failure to report:
// the coordinator removed it (or a newer life took its place), the job
// goes on without it, and a launcher starts it again. A shard server
// gone is often the end of a job that failed elsewhere: the coordinator
// gets a moment (stopGrace) to say so, as its reason explains more; a
// divergence is the job's own failure, reported at once.
func trainFailed(err error) (grace time.Duration, report bool) {
	switch {
	case errors.Is(err, ps.ErrRefused):
		return 0, false
	case errors.Is(err, learner.ErrDiverged), errors.Is(err, ps.ErrDiverged): // the latter met by a leave
		return 0, true
	}
	return stopGrace, true
}

// learnerNets makes the learner's network (two with Overlap) for
// mini-batches of batch, each keeping its gradient in the payload of a
// message of the job's network, which the pushes are sent from (in place
// under verbs: registered memory). close closes the networks and
// releases the messages.
func learnerNets(cfg LearnerConfig, batch int) (nets []*nn.Net, close func(), err error) {
	n := 1
	if cfg.Overlap {
		n = 2
	}
	var held []*rdma.Msg
	close = func() {
		for _, x := range nets {
			x.Close()
		}
		for _, m := range held {
			m.Release()
		}
	}
	for range n {
		g := cfg.Network.NewMsg(cfg.Spec.VectorLen())
		held = append(held, g)
		net, err := nn.New(cfg.Spec, cfg.Engine, nn.Config{Batch: batch, Workers: cfg.Workers, Grads: g.Payload})
		if err != nil {
			close()
			return nil, nil, err
		}
		if cfg.Codec.ID == rdma.CodecFP16 {
			net.SetStateLimit(fp16Max)
		}
		nets = append(nets, net)
	}
	return nets, close, nil
}

// fp16Max is the largest finite value of the fp16 codec: batch norm's
// statistics a learner pushes in fp16 are bounded to it, so that a
// variance beyond it does not make the push infinite.
const fp16Max = 65504

// worker is a running learner role: the runtime of its core
// (workerCore), which r.mu guards.
type worker struct {
	cfg     LearnerConfig
	replies chan chunkReply
	addrs   chan addr // the coordinator's answers to where
	redial  waitLock

	flushMu sync.Mutex // serialises flush
	mu      sync.Mutex
	core    *workerCore
	cc      *ctrl         // the current connection to the coordinator
	joined  chan struct{} // closed when cc is replaced (a rejoin), then made anew
	client  *ps.Client    // set once train has dialed the shard servers
	loader  *data.Loader  // set once train has started it
	// waitSent and skipSent are the data wait and the bad images of the
	// training set reported so far (flushMu).
	waitSent time.Duration
	skipSent int
}

func (r *worker) ctrl() *ctrl {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cc
}

// train runs the learner loop on the welcome's plan.
func (r *worker) train(ctx context.Context, w welcome) error {
	cfg := r.cfg
	redial := cfg.redialer(r.ctrl, r.addrs, r.redial)
	client, err := ps.Dial(ctx, shardNetwork{cfg.Network, &cfg.Member, w.Addrs, redial}, w.Addrs, ps.ClientConfig{Learner: uint32(cfg.ID), Incarnation: w.Incarnation,
		Protocol: cfg.Protocol, Total: cfg.Spec.VectorLen(), Shards: cfg.Shards, Codec: cfg.Codec,
		Redial: redial, OnDelivered: r.delivered})
	if err != nil {
		return err
	}
	// The networks' gradients come from the network's allocator once it
	// is connected (registered memory under verbs), and outlive the
	// client's use of them: client.Close runs first.
	nets, closeNets, err := learnerNets(cfg, w.Plan.Batch)
	if err != nil {
		client.Close()
		return err
	}
	defer closeNets()
	defer client.Close()
	r.mu.Lock()
	r.client = client
	r.mu.Unlock()
	if cfg.OnClient != nil {
		cfg.OnClient(cfg.ID, client)
	}
	// A shard restored from a checkpoint has no active learner, and a new
	// life's predecessor was removed: the learner joins every shard.
	if err := client.Join(ctx); err != nil {
		return err
	}
	norm, err := welcomeNorm(w, cfg.Spec)
	if err != nil {
		return fmt.Errorf("learner %d: %w", cfg.ID, err)
	}
	ld, err := cfg.Train.Loader(data.LoaderConfig{Plan: w.Plan, Source: r, Normalizer: norm})
	if err != nil {
		return err
	}
	defer ld.Close()
	r.mu.Lock()
	r.loader = ld
	r.mu.Unlock()
	lc := learner.Config{ID: cfg.ID, Net: nets[0], Data: ld, Client: client, Overlap: cfg.Overlap, EarlyPush: cfg.EarlyPush, OnStep: r.onStep,
		BatchID: func(b *data.Batch) uint64 { return w.Plan.ID(b.Epoch, b.Index) }, Seed: w.Plan.Seed}
	if cfg.Overlap {
		lc.Spare = nets[1]
	}
	l, err := learner.New(lc)
	if err != nil {
		return err
	}
	return l.Run(ctx)
}

// Next implements data.Source over the coordinator. A request sent on a
// connection that fails goes again once the learner has rejoined.
func (r *worker) Next(ctx context.Context, wait bool) (data.Chunk, error) {
	r.mu.Lock()
	req := r.core.ask(wait)
	cc := r.cc
	r.mu.Unlock()
	cc.send(ctx, tChunkReq, req) // a failure is the reader's to notice
	select {
	case rep := <-r.replies:
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.core.took(rep)
	case <-ctx.Done():
		if err := r.jobError(); err != nil {
			return data.Chunk{}, err
		}
		return data.Chunk{}, ctx.Err()
	}
}

// Complete implements data.Source: every mini-batch of c was pushed.
// The chunk is complete once they are delivered (see delivered).
func (r *worker) Complete(context.Context, data.Chunk) error { return nil }

// delivered is the client's report (ps.ClientConfig.OnDelivered) that
// every shard acknowledged the push of mini-batch id: the next progress
// report tells the coordinator, and the chunk's last one completes it at
// once.
func (r *worker) delivered(id uint64) {
	r.mu.Lock()
	c, complete := r.core.delivered(id)
	cc := r.cc
	r.mu.Unlock()
	if complete {
		cc.send(context.Background(), tComplete, c) // a failure is the reader's to notice: a rejoin tells it again
	}
}

// onStep accounts one pushed mini-batch.
func (r *worker) onStep(b *data.Batch, loss float32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.core.stepped(b.Epoch, loss)
}

// flushLast sends the learner's last report (done), the one the
// coordinator waits for before it finishes the job. A connection to the
// coordinator that fails under it is a coordinator lost, as elsewhere:
// the report goes again once the reader has rejoined the coordinator (a
// restarted head waits for it as well); the learner fails only if the
// reader ends (the rejoin failed, or the job stopped) or ctx does.
func (r *worker) flushLast(ctx context.Context) error {
	for {
		joined, err := r.report(ctx, true)
		if err == nil || ctx.Err() != nil || rdma.Recoverable(err) {
			return err
		}
		select {
		case <-joined:
		case <-ctx.Done():
			if jobErr := r.jobError(); jobErr != nil {
				return jobErr
			}
			return err
		}
	}
}

// flush sends the progress since the last report; done marks the last.
func (r *worker) flush(ctx context.Context, done bool) error {
	_, err := r.report(ctx, done)
	return err
}

// report is flush; joined is closed once the connection the report went
// on (or failed on) is replaced by a rejoin.
func (r *worker) report(ctx context.Context, done bool) (joined <-chan struct{}, _ error) {
	// One flush at a time, so that reports reach the coordinator in the
	// order they were taken and the last (done) one is last.
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	r.mu.Lock()
	p := r.core.progress(done)
	client, cc, ld := r.client, r.cc, r.loader
	joined = r.joined
	r.mu.Unlock()
	if client != nil {
		p.Pushes = client.Pushes()
	}
	var waited time.Duration
	if ld != nil {
		waited = ld.Waited()
		p.DataWait = (waited - r.waitSent).Seconds()
		p.Skipped = r.cfg.Train.Skips(r.skipSent)
	}
	if done && client != nil {
		st := client.Stats()
		p.Traffic = &st
		for _, c := range client.Connections() {
			p.Connections = append(p.Connections, Connection{Learner: r.cfg.ID, Shards: c.Shards, Peer: c.Peer,
				Transport: c.Transport.Name, Reason: c.Transport.Reason})
		}
	}
	err := cc.send(ctx, tProgress, p)
	if err == nil && ld != nil {
		r.waitSent, r.skipSent = waited, r.skipSent+len(p.Skipped)
	}
	if err != nil {
		if ctx.Err() != nil || rdma.Recoverable(err) {
			return joined, err
		}
		// The connection failed: the losses and steps go with the next
		// report, once the learner has rejoined (the chunks' deliveries
		// go again then: workerCore.rejoined).
		r.mu.Lock()
		r.core.unsent(p)
		r.mu.Unlock()
		if done {
			return joined, err
		}
	}
	return joined, nil
}

// reportEvery reports progress (the heartbeat) until ctx ends.
func (r *worker) reportEvery(ctx context.Context) {
	every := r.cfg.Report
	if every <= 0 {
		every = 500 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if r.flush(ctx, false) != nil {
				return
			}
		}
	}
}

// read receives the coordinator's messages: chunk replies for Next, and
// the stop that ends the job (cancel). A connection lost without the
// stop is dialled again (rejoin).
func (r *worker) read(ctx context.Context, cancel context.CancelFunc) {
	defer cancel()
	for {
		cc := r.ctrl()
		t, b, err := cc.recv(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if err := r.rejoin(ctx, cc, err); err != nil {
				r.setErr(err)
				return
			}
			continue
		}
		r.mu.Lock()
		cmd := r.core.command(t, b)
		r.mu.Unlock()
		switch {
		case cmd.chunk != nil:
			r.replies <- *cmd.chunk
		case cmd.addr != nil:
			latest(r.addrs, *cmd.addr)
		case cmd.flush:
			r.flush(ctx, true) // what was done, before the learner stops
		}
		if cmd.end {
			return
		}
	}
}

// rejoin dials the coordinator again after connection old failed with
// cause and says hello as a rejoining learner (workerCore.rejoinHello);
// then what the old connection may have lost goes again
// (workerCore.rejoined).
func (r *worker) rejoin(ctx context.Context, old *ctrl, cause error) error {
	old.conn.Close()
	cc, _, err := r.cfg.rejoin(ctx, func() hello {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.core.rejoinHello()
	}, cause)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.cc = cc
	complete, asking := r.core.rejoined()
	r.mu.Unlock()
	for _, c := range complete {
		cc.send(ctx, tComplete, c)
	}
	if asking != nil {
		cc.send(ctx, tChunkReq, asking)
	}
	// A last report that failed goes again now, after what the old
	// connection may have lost.
	r.mu.Lock()
	close(r.joined)
	r.joined = make(chan struct{})
	r.mu.Unlock()
	return nil
}

func (r *worker) setErr(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.core.fail(err)
}

func (r *worker) jobError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.core.err
}

// workerCore is a learner role's protocol with the coordinator as a
// deterministic core: the chunks it asks for and holds, what of them the
// shards acknowledged, the steps and losses since its last report, what
// it tells a coordinator it rejoins, and what each of the coordinator's
// messages means for it. The runtime (worker) calls it under its lock
// from the learner's, the reader's and the reporter's goroutines.
type workerCore struct {
	inc    uint32
	plan   data.Plan
	asking *chunkReq          // a chunk request not answered yet
	report map[int]*epochLoss // since the last report
	// held are the chunks of this life (distinct) with their
	// mini-batches delivered: a rejoining learner tells them. ids maps
	// the mini-batch ids of the chunks not complete to their chunk and
	// position; news are the chunks with deliveries since the last
	// report.
	held map[data.Chunk]*data.Holding
	ids  map[uint64]batchPos
	news map[data.Chunk]bool
	// ended: the coordinator told it the end of the data (its rejoin
	// hello says so: a coordinator restarted since then knows the data
	// was done). Set as the reply arrives, before Next takes it: the
	// reader builds the rejoin hello when the connection fails next.
	ended bool
	err   error // the job's end: the coordinator stopped it
}

func newWorkerCore(w welcome) *workerCore {
	return &workerCore{inc: w.Incarnation, plan: w.Plan, report: map[int]*epochLoss{}, held: map[data.Chunk]*data.Holding{},
		ids: map[uint64]batchPos{}, news: map[data.Chunk]bool{}}
}

// batchPos is a mini-batch's chunk and position in it.
type batchPos struct {
	chunk data.Chunk
	pos   int
}

// ask returns the request for the next chunk (wait: wait for one rather
// than be told Idle), which is outstanding until its reply.
func (c *workerCore) ask(wait bool) *chunkReq {
	c.asking = &chunkReq{Wait: wait}
	return c.asking
}

// took takes the reply to a chunk request: the chunk the learner now
// holds, or data.ErrEnd or data.ErrIdle.
func (c *workerCore) took(rep chunkReply) (data.Chunk, error) {
	switch {
	case rep.End:
		return data.Chunk{}, data.ErrEnd
	case rep.Idle:
		return data.Chunk{}, data.ErrIdle
	}
	key := rep.Chunk
	c.held[key] = &data.Holding{Chunk: rep.Chunk}
	for i := range rep.Chunk.Count {
		c.ids[c.plan.ID(rep.Chunk.Epoch, rep.Chunk.Batch(i))] = batchPos{key, i}
	}
	return rep.Chunk, nil
}

// delivered records that every shard acknowledged the push of
// mini-batch id. It returns the chunk if that completed it (the
// coordinator is told at once; otherwise with the next report).
func (c *workerCore) delivered(id uint64) (data.Chunk, bool) {
	p, ok := c.ids[id]
	h := c.held[p.chunk]
	if !ok || h == nil {
		return data.Chunk{}, false
	}
	delete(c.ids, id)
	h.Delivered = max(h.Delivered, p.pos+1)
	if h.Delivered == h.Chunk.Count {
		delete(c.news, p.chunk) // the completion tells it
		return h.Chunk, true
	}
	c.news[p.chunk] = true
	return data.Chunk{}, false
}

// stepped accounts one pushed mini-batch of epoch, of loss loss.
func (c *workerCore) stepped(epoch int, loss float32) {
	e := c.report[epoch]
	if e == nil {
		e = &epochLoss{Epoch: epoch}
		c.report[epoch] = e
	}
	e.Steps++
	e.Loss += float64(loss)
}

// progress takes the report of what happened since the last one, epochs
// and chunks in order; done marks the last.
func (c *workerCore) progress(done bool) progress {
	p := progress{Done: done}
	for _, e := range slices.Sorted(maps.Keys(c.report)) {
		p.Epochs = append(p.Epochs, *c.report[e])
	}
	clear(c.report)
	for _, key := range slices.SortedFunc(maps.Keys(c.news), compareChunks) {
		h := c.held[key]
		p.Delivered = append(p.Delivered, delivered{Chunk: h.Chunk, N: h.Delivered})
	}
	clear(c.news)
	return p
}

// unsent takes back the steps and losses of report p, which could not
// be sent: they go with the next one.
func (c *workerCore) unsent(p progress) {
	for _, e := range p.Epochs {
		if q := c.report[e.Epoch]; q != nil {
			q.Steps, q.Loss = q.Steps+e.Steps, q.Loss+e.Loss
		} else {
			c.report[e.Epoch] = &e
		}
	}
}

// rejoinHello is the hello of an attempt to rejoin: the learner's
// incarnation, its chunks and what of them was delivered, and whether it
// was told the end of the data.
func (c *workerCore) rejoinHello() hello {
	h := hello{Incarnation: c.inc, Ended: c.ended}
	for _, key := range slices.SortedFunc(maps.Keys(c.held), compareChunks) {
		h.Held = append(h.Held, *c.held[key])
	}
	return h
}

// rejoined takes the new connection to the coordinator: what the old
// one may have lost goes on it. Deliveries since the hello were reported
// on the old connection: the complete chunks are told again, the others
// with the next report (the coordinator ignores what it knows); then the
// chunk request not answered, if any.
func (c *workerCore) rejoined() (complete []data.Chunk, asking *chunkReq) {
	for _, key := range slices.SortedFunc(maps.Keys(c.held), compareChunks) {
		if h := c.held[key]; h.Delivered == h.Chunk.Count {
			complete = append(complete, h.Chunk)
		} else if h.Delivered > 0 {
			c.news[key] = true
		}
	}
	return complete, c.asking
}

// workerCmd is what a message of the coordinator asks of a learner: to
// hand Next its chunk reply, the redialer its address, to report what
// was done as its last report (an interruption), to end its reader (a
// stop: the job's end is in the core's err).
type workerCmd struct {
	chunk *chunkReply
	addr  *addr
	flush bool
	end   bool
}

// command takes the coordinator's message t with data b.
func (c *workerCore) command(t rdma.Type, b []byte) workerCmd {
	switch t {
	case tChunk:
		var rep chunkReply
		if err := decode(t, b, &rep); err != nil {
			c.fail(err)
			return workerCmd{end: true}
		}
		c.asking = nil
		c.ended = c.ended || rep.End
		return workerCmd{chunk: &rep}
	case tAddr:
		var a addr
		if err := decode(t, b, &a); err != nil {
			c.fail(err)
			return workerCmd{end: true}
		}
		return workerCmd{addr: &a}
	case tStop:
		var st stop
		decode(t, b, &st)
		switch {
		case st.Interrupted:
			c.fail(ErrInterrupted)
			return workerCmd{flush: true, end: true}
		case st.Text != "":
			c.fail(stopErr(t, b))
		}
		return workerCmd{end: true}
	}
	c.fail(fmt.Errorf("%w: message %#x from the coordinator", ErrProtocol, t))
	return workerCmd{end: true}
}

// fail records the job's end for the learner (the first one wins).
func (c *workerCore) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// compareChunks orders chunks by epoch and first mini-batch.
func compareChunks(a, b data.Chunk) int {
	return cmp.Or(cmp.Compare(a.Epoch, b.Epoch), cmp.Compare(a.First, b.First), cmp.Compare(a.Count, b.Count))
}

var _ data.Source = (*worker)(nil)

// latest puts a in ch (of capacity 1), replacing an answer nobody took.
func latest(ch chan addr, a addr) {
	for {
		select {
		case ch <- a:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
	}
}
