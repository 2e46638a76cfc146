package ps

import (
	"context"
	"slices"
	"time"

	"github.com/softsync/softsync/rdma"
)

// shardLoop runs one shard of the server's core (a ServerShard) on its
// own goroutine: messages from the connections' readers arrive on in,
// work of the Server's methods on do. It sends what the shard's calls
// return, lending a weights reply the shard's own weights (lends).
// Everything below is touched by that goroutine only, except last, which
// is read once the goroutine has ended.
type shardLoop struct {
	s         *Server
	sh        *ServerShard[*peer]
	core      *Shard
	in        chan inbound
	do        chan func()
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
	if l.s.done.Load() { // Finish may precede Serve
		l.carryOut(ctx, l.sh.Finish())
	}
	for {
		select {
		case <-ctx.Done():
			return
		case f := <-l.do:
			f()
		case in := <-l.in:
			l.step(ctx, in)
		}
	}
}

// step feeds one received message to the shard and releases it.
func (l *shardLoop) step(ctx context.Context, in inbound) {
	if in.m.Type == TypeSnapshot {
		m := in.m
		rd := l.sh.Snapshot(m.Timestamp, m.Seq, m.Learner, in.p)
		m.Release()
		l.carryOut(ctx, rd)
		return
	}
	if in.m.Type != rdma.Type(MsgPull) { // a pull never changes the weights (Shard.Step)
		l.settle(ctx)
	}
	rd := l.sh.Step(coreMsg(in.m), in.p)
	in.m.Release()
	l.carryOut(ctx, rd)
}

// evict steps the leave the coordinator decided (see ServerShard.Evict).
func (l *shardLoop) evict(learner uint32) {
	if l.core.Member(learner) {
		l.settle(context.Background())
	}
	l.carryOut(context.Background(), l.sh.Evict(learner))
}

// finish tells the shard that the job's data is done.
func (l *shardLoop) finish() { l.carryOut(context.Background(), l.sh.Finish()) }

// carryOut sends what a call of the shard returned, reports its updates
// and counts it final.
func (l *shardLoop) carryOut(ctx context.Context, rd *ShardReady[*peer]) {
	s, k := l.s, l.core.Index()
	for i := range rd.Sends {
		d := &rd.Sends[i]
		switch {
		case d.Kind == SendError:
			s.reject(d.To, d.Msg(k, nil, rdma.Codec{}))
		case d.Kind == SendWeights && d.Snapshot == nil:
			l.sendWeights(ctx, d)
		default:
			d.To.send(ctx, d.Msg(k, nil, s.cfg.Codec))
		}
	}
	if s.cfg.OnUpdate != nil {
		for _, u := range rd.Updates {
			s.cfg.OnUpdate(k, u)
		}
	}
	if rd.Final && int(s.nFinal.Add(1)) == len(s.loops) {
		close(s.final)
	}
}

// sendWeights sends d, a reply of the shard's current weights, straight
// from where they lie: the shard lends them to d.To's writer until it
// next changes them (settle).
func (l *shardLoop) sendWeights(ctx context.Context, d *ShardSend[*peer]) {
	if l.lends.full() {
		l.settle(ctx) // which may move the weights: read them after it
	}
	if d.To.queue(ctx, reply{d.Msg(l.core.Index(), l.core.Weights(), l.s.cfg.Codec), l.lends.tokens}) {
		l.lends.add(d.To)
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
	l.lends, l.wmsg = newLends(l.s.cfg.PS.Learners), w
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
