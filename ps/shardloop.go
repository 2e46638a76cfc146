package ps

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/softsync/softsync/rdma"
)

// shardLoop runs one shard core on its own goroutine: messages from the
// connections' readers arrive on in, work of the Server's methods on do.
// Everything below is touched by that goroutine only, except last and
// finalW, which are read once the goroutine has ended or the shard is
// final.
type shardLoop struct {
	s         *Server
	core      *Shard
	in        chan inbound
	do        chan func()
	route     []*peer // where each learner's weights go
	perEpoch  uint64  // P, gradients per epoch; 0 without a data-set size
	consumed  uint64  // gradients accepted or dropped, as of the last Step
	base      uint64  // consumed before the shard was restored, beyond its counters
	snaps     map[int]snapshot
	waits     []snapWait // snapshot requests for epochs not reached yet
	final     bool
	finalW    []float32
	lends     *lends      // the replies reading the core's weights
	wmsg      *rdma.Msg   // owns the core's weights (nil: the heap does)
	lendTimer *time.Timer // bounds a wait for lends (stopped between waits)
	last      Stats       // the core's counters when the goroutine ended
}

// lendWait is how long a shard waits, before it changes its weights, for
// the connections' writers to be done with the weights it lent them,
// before it goes on with a copy of them (Shard.Move): a reply bigger
// than the transport's buffers, or lent on by the transport (shm), is
// only sent as fast as its learner reads it, and a learner on a slow
// link, or one that stopped reading, must not hold up the shard for
// everyone. The wait is lendWaitMin and the time a reader takes at
// lendRate to read the shard's weights: the copy that ends the wait costs
// the shard about that much of its own, and a shard of a large network
// (alexnet's 122 MB a shard of two) whose learners read it at memory
// speed must not copy its weights at every update.
func lendWait(floats int) time.Duration {
	return lendWaitMin + time.Duration(4*int64(floats)*int64(time.Second)/lendRate)
}

const (
	lendWaitMin = 10 * time.Millisecond
	lendRate    = 1 << 30 // bytes per second
)

// snapshot is a copy of the shard's weights at an epoch end.
type snapshot struct {
	clock uint64
	w     []float32
}

// snapWait is a snapshot request waiting for its epoch (0: the final
// weights).
type snapWait struct {
	epoch   int
	seq     uint64
	learner uint32
	p       *peer
}

func (l *shardLoop) run(ctx context.Context) {
	if l.wmsg = l.newWeights(); l.wmsg != nil {
		l.core.Move(l.wmsg.Payload)
	}
	defer func() {
		l.last = l.core.Stats()
		if l.wmsg != nil {
			l.detach(nil)
		}
	}()
	l.checkFinal() // Finish may precede Serve
	for {
		select {
		case <-ctx.Done():
			return
		case f := <-l.do:
			f()
		case in := <-l.in:
			if in.m.Type == TypeSnapshot {
				l.snapshotRequest(ctx, in)
				continue
			}
			l.step(ctx, in)
		}
	}
}

// step feeds one received message to the core and releases it.
func (l *shardLoop) step(ctx context.Context, in inbound) {
	m := coreMsg(in.m)
	// The message's connection becomes the learner's route, unless the
	// message is rejected or is the learner's leave.
	var prev *peer
	known := int64(m.Learner) < int64(len(l.route))
	if known {
		prev, l.route[m.Learner] = l.route[m.Learner], in.p
	}
	if m.Type != MsgPull { // a pull never changes the weights (Shard.Step)
		l.settle(ctx)
	}
	r := l.core.Step(m)
	in.m.Release()
	switch {
	case !known:
	case rejected(r):
		l.route[m.Learner] = prev
	case m.Type == MsgLeave:
		l.route[m.Learner] = nil
	}
	l.deliver(ctx, r, in.p)
}

// evict steps the leave the coordinator decided (a no-op for a learner
// that is not active). A pull of the learner that was waiting is
// refused, so that a learner still alive stops instead of waiting for
// ever (the coordinator that removed it may have died before telling
// it).
func (l *shardLoop) evict(learner uint32) {
	if !l.core.Member(learner) {
		return
	}
	seq, waiting := l.core.PullWaiting(learner)
	p := l.route[learner]
	l.route[learner] = nil
	l.settle(context.Background())
	r := l.core.Step(Msg{Type: MsgLeave, Job: l.core.cfg.Job, Shard: l.core.Index(), Learner: learner})
	l.deliver(context.Background(), r, nil)
	if waiting && p != nil {
		l.s.reject(p, l.core.Index(), seq, fmt.Errorf("ps shard %d: pull from learner %d (seq %d): %w: the learner was removed from the job", l.core.Index(), learner, seq, ErrRefused))
	}
}

// rejected reports whether the message of the Step that returned r was
// rejected: its error reply is the only error a Step produces.
func rejected(r Ready) bool {
	for _, rep := range r.Replies {
		if rep.Err != nil {
			return true
		}
	}
	return false
}

// deliver sends the replies of one Step (errors and acknowledgements to
// from, the connection of the message; nil for a leave the server
// decided, which nobody waits for), reports its updates, takes the epoch-end snapshot and
// checks whether the shard became final.
func (l *shardLoop) deliver(ctx context.Context, r Ready, from *peer) {
	s, k := l.s, l.core.Index()
	for _, rep := range r.Replies {
		switch {
		case rep.Err != nil:
			if from != nil {
				s.reject(from, k, rep.Seq, rep.Err)
			}
			continue
		case rep.Ack:
			if from != nil {
				from.send(ctx, ackMsg(rep.To, k, rep.Clock, rep.Seq))
			}
			continue
		}
		if p := l.route[rep.To]; p != nil {
			l.sendWeights(ctx, p, rep.To, rep.Clock, rep.Life, rep.Seq, nil)
		}
	}
	if s.cfg.OnUpdate != nil {
		for _, u := range r.Updates {
			s.cfg.OnUpdate(k, u)
		}
	}
	st := &l.core.stats
	if n := st.Gradients + st.Dropped + l.base; n != l.consumed {
		l.consumed = n
		if l.perEpoch > 0 && n%l.perEpoch == 0 && s.cfg.Snapshots {
			e := int(n / l.perEpoch)
			l.snaps[e] = snapshot{clock: l.core.Clock(), w: slices.Clone(l.core.Weights())}
			l.answerWaits(ctx)
		}
	}
	l.checkFinal()
}

// checkFinal makes the shard final once Finish was called and no learner
// is active.
func (l *shardLoop) checkFinal() {
	if l.final || !l.s.done.Load() || l.core.Active() > 0 {
		return
	}
	l.final, l.finalW = true, slices.Clone(l.core.Weights())
	l.snaps[0] = snapshot{clock: l.core.Clock(), w: l.finalW}
	l.answerWaits(context.Background())
	if int(l.s.nFinal.Add(1)) == len(l.s.loops) {
		close(l.s.final)
	}
}

// snapshotRequest answers a TypeSnapshot request now, or once its epoch
// is reached.
func (l *shardLoop) snapshotRequest(ctx context.Context, in inbound) {
	now := in.m.Timestamp == SnapshotNow
	w := snapWait{epoch: int(in.m.Timestamp), seq: in.m.Seq, learner: in.m.Learner, p: in.p}
	in.m.Release()
	if now {
		l.sendWeights(ctx, w.p, w.learner, l.core.Clock(), l.core.Life(), w.seq, nil)
		return
	}
	if !l.s.cfg.Snapshots && w.epoch > 0 {
		l.s.reject(in.p, l.core.Index(), w.seq, errSnapshotsOff)
		return
	}
	for e := range l.snaps {
		if e > 0 && (w.epoch == 0 || e < w.epoch) {
			delete(l.snaps, e) // the evaluator is done with it
		}
	}
	l.waits = append(l.waits, w)
	l.answerWaits(ctx)
}

// answerWaits answers the waiting snapshot requests whose epoch has come.
// An epoch's snapshot is kept after it was sent, for an evaluator that
// restarts before it reported that epoch and asks again, until a later
// epoch or the final weights are asked for. Once the shard is final, an
// epoch it never reached (gradients lost with a restarted server), or
// whose snapshot was dropped, is answered with the final weights.
func (l *shardLoop) answerWaits(ctx context.Context) {
	l.waits = slices.DeleteFunc(l.waits, func(w snapWait) bool {
		sn, ok := l.snaps[w.epoch]
		if !ok && l.final {
			sn, ok = l.snaps[0], true
		}
		if !ok {
			return false
		}
		l.sendWeights(ctx, w.p, w.learner, sn.clock, l.core.Life(), w.seq, sn.w)
		return true
	})
}

// sendWeights sends learner to on p, in answer to request seq, weights of
// the shard stamped clock straight from where they lie: snap, a
// snapshot's, which never change, or with snap nil the core's, which the
// shard lends p's writer until it next changes them (settle).
func (l *shardLoop) sendWeights(ctx context.Context, p *peer, to uint32, clock, life, seq uint64, snap []float32) {
	if snap != nil {
		p.send(ctx, weightsMsg(to, l.core.Index(), clock, life, seq, snap, l.s.cfg.Codec))
		return
	}
	if l.lends.full() {
		l.settle(ctx) // which may move the weights: read them after it
	}
	m := weightsMsg(to, l.core.Index(), clock, life, seq, l.core.Weights(), l.s.cfg.Codec)
	if p.queue(ctx, reply{m, l.lends.tokens}) {
		l.lends.add(p)
	}
}

// settle returns once no reply reads the core's weights, so that the next
// Step may change them: when the writers are done with them, or after
// lendWait, when the shard goes on with a copy and leaves the old array to
// them.
func (l *shardLoop) settle(ctx context.Context) {
	if len(l.lends.out) == 0 {
		return
	}
	if d := lendWait(len(l.core.Weights())); l.lendTimer == nil {
		l.lendTimer = time.NewTimer(d)
	} else {
		l.lendTimer.Reset(d)
	}
	if l.lends.settle(ctx, l.lendTimer.C) {
		l.lendTimer.Stop()
		return
	}
	if ctx.Err() != nil { // the server is ending: a copy on the heap will do
		l.detach(nil)
		return
	}
	l.s.detached.Add(uint64(len(l.lends.out)))
	l.detach(l.newWeights())
}

// detach moves the core's weights to w (nil: a copy on the heap) and
// leaves the array they were in, and the message that owns it, to the
// replies still reading it.
func (l *shardLoop) detach(w *rdma.Msg) {
	old, owner := l.lends, l.wmsg
	if w != nil {
		l.core.Move(w.Payload)
	} else {
		l.core.Move(slices.Clone(l.core.Weights()))
	}
	l.lends, l.wmsg = newLends(len(l.route)), w
	if owner != nil {
		l.s.retiring.Go(func() { old.retire(owner.Release) })
	}
}

// newWeights returns a message of the server's allocator (ServerConfig.
// NewMsg) to keep the core's weights in, or nil.
func (l *shardLoop) newWeights() *rdma.Msg {
	n := len(l.core.Weights())
	if l.s.cfg.NewMsg == nil || n == 0 {
		return nil
	}
	m := l.s.cfg.NewMsg(n)
	if len(m.Payload) != n {
		m.Release()
		return nil
	}
	return m
}
