package ps

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/softsync/softsync/rdma"
)

// coreEvent is one event of a client core table test: a call, a message
// received or a link's news.
type coreEvent struct {
	name string
	step func(c *ClientCore, tc *coreCase) ClientReady
}

// coreCase is a client core table test: the core's configuration (one
// learner, incarnation 0), then events, each with exactly the outputs it
// must have (formatted by coreOutputs) and, if it ends a call with an
// error, the error it must match.
type coreCase struct {
	name   string
	cfg    ClientCoreConfig
	steps  []coreStep
	w      []float32 // the vector pulls and snapshots fill
	grad   []float32 // the gradient pushes send
	stamps []uint64  // a snapshot's stamps
}

type coreStep struct {
	ev      coreEvent
	want    []string
	wantErr error // the error of the call the event ends (Done), nil: none
}

// Events.

func evPull(async bool) coreEvent {
	return coreEvent{fmt.Sprintf("pull (async %v)", async), func(c *ClientCore, tc *coreCase) ClientReady { return c.Pull(tc.w, async) }}
}

func evWait() coreEvent {
	return coreEvent{"wait", func(c *ClientCore, _ *coreCase) ClientReady { return c.WaitPull() }}
}

func evPush(batch uint64, lo int) coreEvent {
	return coreEvent{fmt.Sprintf("push %d from %d", batch, lo), func(c *ClientCore, tc *coreCase) ClientReady { return c.Push(tc.grad, batch, lo) }}
}

func evJoin() coreEvent {
	return coreEvent{"join", func(c *ClientCore, _ *coreCase) ClientReady { return c.Join() }}
}

func evLeave() coreEvent {
	return coreEvent{"leave", func(c *ClientCore, _ *coreCase) ClientReady { return c.Leave() }}
}

func evSnapshot(epoch int) coreEvent {
	return coreEvent{fmt.Sprintf("snapshot %d", epoch), func(c *ClientCore, tc *coreCase) ClientReady { return c.Snapshot(epoch, tc.w, tc.stamps) }}
}

// evWeights receives shard's weights answering request n (the n-th
// message of incarnation 0), stamped clock of life life, on link's
// connection of generation gen.
func evWeights(link, gen, shard int, n, clock, life uint64) coreEvent {
	return coreEvent{fmt.Sprintf("weights of shard %d for #%d on %d/%d", shard, n, link, gen), func(c *ClientCore, _ *coreCase) ClientReady {
		return c.Recv(link, gen, shard, Reply{Seq: n, Clock: clock, Life: life, Weights: make([]float32, c.ranges[shard].Len())})
	}}
}

func evAck(link, gen, shard int, n uint64) coreEvent {
	return coreEvent{fmt.Sprintf("ack of shard %d for #%d on %d/%d", shard, n, link, gen), func(c *ClientCore, _ *coreCase) ClientReady {
		return c.Recv(link, gen, shard, Reply{Seq: n, Ack: true})
	}}
}

func evReject(link, gen, shard int, n uint64, reason error) coreEvent {
	return coreEvent{fmt.Sprintf("rejection by shard %d of #%d on %d/%d", shard, n, link, gen), func(c *ClientCore, _ *coreCase) ClientReady {
		return c.Recv(link, gen, shard, Reply{Seq: n, Err: reason})
	}}
}

func evDown(link, gen int) coreEvent {
	return coreEvent{fmt.Sprintf("link %d/%d down", link, gen), func(c *ClientCore, _ *coreCase) ClientReady {
		return c.LinkDown(link, gen, errors.New("connection reset"))
	}}
}

func evUp(link int) coreEvent {
	return coreEvent{fmt.Sprintf("link %d up", link), func(c *ClientCore, _ *coreCase) ClientReady { return c.LinkUp(link) }}
}

var errNoServer = errors.New("no server")

func evDead(link int) coreEvent {
	return coreEvent{fmt.Sprintf("link %d dead", link), func(c *ClientCore, _ *coreCase) ClientReady { return c.LinkDead(link, errNoServer) }}
}

func evUnsent(link, gen int, n uint64) coreEvent {
	return coreEvent{fmt.Sprintf("#%d unsent on %d/%d", n, link, gen), func(c *ClientCore, _ *coreCase) ClientReady {
		return c.Unsent(link, gen, n, errors.New("context canceled"))
	}}
}

// coreOutputs formats r: one line per message ("link/gen type shard #n
// clock", pushes with "b batch l life"), then the dials, the mini-batches
// delivered and the call that ended ("done pull", "done join err").
func coreOutputs(r ClientReady) []string {
	var out []string
	for _, s := range r.Sends {
		m := s.Msg
		line := fmt.Sprintf("%d/%d %v s%d #%d c%d", s.Link, s.Gen, m.Type, m.Shard, m.Seq, m.Clock)
		if m.Type == MsgPush {
			line += fmt.Sprintf(" b%d l%d", m.Batch, m.Life)
		}
		if m.Type == MsgSnapshot {
			line = fmt.Sprintf("%d/%d snapshot s%d #%d e%d", s.Link, s.Gen, m.Shard, m.Seq, int64(m.Clock))
		}
		out = append(out, line)
	}
	for _, l := range r.Dial {
		out = append(out, fmt.Sprintf("dial %d", l))
	}
	if len(r.Delivered) > 0 {
		out = append(out, fmt.Sprintf("delivered %v", r.Delivered))
	}
	if r.Done != CallNone {
		line := "done " + r.Done.String()
		if r.Err != nil {
			line += " err"
		}
		out = append(out, line)
	}
	return out
}

// oneLink is two shards of 32 floats on one connection; twoLinks three
// shards, 0 and 1 on link 0, 2 on link 1.
var (
	oneLink  = ClientCoreConfig{Protocol: Softsync, Total: 64, Shards: 2, Links: []int{0, 0}, Reconnect: true}
	twoLinks = ClientCoreConfig{Protocol: Softsync, Total: 96, Shards: 3, Links: []int{0, 0, 1}, Reconnect: true}
)

func hardsync(cfg ClientCoreConfig) ClientCoreConfig {
	cfg.Protocol = Hardsync
	return cfg
}

// TestClientCore steps client cores through event sequences and checks
// every output of every event exactly: the messages (link, generation,
// type, shard, sequence, clock, mini-batch, life), the connections to
// replace, the mini-batches delivered and the calls that end.
func TestClientCore(t *testing.T) {
	for _, tc := range []coreCase{
		{name: "a push resent after a replaced connection, then delivered", cfg: oneLink, steps: []coreStep{
			{ev: evPull(false), want: []string{"0/0 pull s0 #1 c0", "0/0 pull s1 #2 c0"}},
			{ev: evWeights(0, 0, 0, 1, 3, 9)},
			{ev: evWeights(0, 0, 1, 2, 3, 9), want: []string{"done pull"}},
			{ev: evPush(7, 0), want: []string{"0/0 push s1 #3 c3 b7 l9", "0/0 push s0 #4 c3 b7 l9", "done push"}},
			{ev: evPush(8, 0), want: []string{"0/0 push s1 #5 c3 b8 l9", "0/0 push s0 #6 c3 b8 l9", "done push"}},
			{ev: evDown(0, 0), want: []string{"dial 0"}},
			// A member joins every shard again, then resends its
			// unacknowledged pushes as they were.
			{ev: evUp(0), want: []string{"0/1 join s0 #7 c0", "0/1 join s1 #8 c0",
				"0/1 push s0 #4 c3 b7 l9", "0/1 push s0 #6 c3 b8 l9", "0/1 push s1 #3 c3 b7 l9", "0/1 push s1 #5 c3 b8 l9"}},
			// Stamps of a replaced connection: minimum clock 0.
			{ev: evPull(false), want: []string{"0/1 pull s0 #9 c0", "0/1 pull s1 #10 c0"}},
			{ev: evAck(0, 1, 0, 7)},           // the restore's join: answers nothing
			{ev: evWeights(0, 0, 0, 9, 4, 9)}, // the old connection's: ignored
			{ev: evWeights(0, 1, 0, 9, 4, 9)}, // acknowledges both pushes to shard 0
			{ev: evWeights(0, 1, 0, 9, 4, 9)}, // a duplicate: ignored
			{ev: evWeights(0, 1, 1, 10, 4, 9), want: []string{"delivered [7 8]", "done pull"}},
			{ev: evPull(false), want: []string{"0/1 pull s0 #11 c4", "0/1 pull s1 #12 c4"}},
		}},
		{name: "a join sent and lost with its connection goes again", cfg: oneLink, steps: []coreStep{
			{ev: evJoin(), want: []string{"0/0 join s0 #1 c0", "0/0 join s1 #2 c0"}},
			{ev: evAck(0, 0, 0, 1)},
			{ev: evDown(0, 0), want: []string{"dial 0"}},
			{ev: evUp(0), want: []string{"0/1 join s0 #3 c0", "0/1 join s1 #4 c0", "0/1 join s1 #5 c0"}},
			{ev: evAck(0, 0, 1, 2)}, // the lost connection's answer: ignored
			{ev: evAck(0, 1, 0, 3)}, // the restore's: answers nothing
			{ev: evAck(0, 1, 1, 4)},
			{ev: evAck(0, 1, 1, 5), want: []string{"done join"}},
		}},
		{name: "a join made while its connection is down goes on the new one", cfg: oneLink, steps: []coreStep{
			{ev: evDown(0, 0), want: []string{"dial 0"}},
			{ev: evJoin()},
			{ev: evUp(0), want: []string{"0/1 join s0 #1 c0", "0/1 join s1 #2 c0", "0/1 join s0 #3 c0", "0/1 join s1 #4 c0"}},
			{ev: evAck(0, 1, 0, 3)},
			{ev: evAck(0, 1, 1, 4), want: []string{"done join"}},
		}},
		{name: "a leave acknowledged by one shard when its connection is replaced", cfg: oneLink, steps: []coreStep{
			{ev: evPull(false), want: []string{"0/0 pull s0 #1 c0", "0/0 pull s1 #2 c0"}},
			{ev: evWeights(0, 0, 0, 1, 0, 5)},
			{ev: evWeights(0, 0, 1, 2, 0, 5), want: []string{"done pull"}},
			{ev: evLeave(), want: []string{"0/0 leave s0 #3 c0", "0/0 leave s1 #4 c0"}},
			{ev: evAck(0, 0, 0, 3)},
			{ev: evDown(0, 0), want: []string{"dial 0"}},
			// Shard 0 has the leave: no join for it, no second leave.
			{ev: evUp(0), want: []string{"0/1 join s1 #5 c0", "0/1 leave s1 #6 c0"}},
			{ev: evAck(0, 1, 1, 6), want: []string{"done leave"}},
			// No member now: a new connection joins nothing.
			{ev: evDown(0, 1), want: []string{"dial 0"}},
			{ev: evUp(0)},
		}},
		{name: "a snapshot outstanding when its connection is replaced", cfg: ClientCoreConfig{Learner: 1 << 30, Total: 64, Shards: 2, Links: []int{0, 0}, Reconnect: true}, steps: []coreStep{
			{ev: evSnapshot(-1), want: []string{"0/0 snapshot s0 #1 e-1", "0/0 snapshot s1 #2 e-1"}},
			{ev: evWeights(0, 0, 1, 2, 7, 3)},
			{ev: evDown(0, 0), want: []string{"dial 0"}},
			// An evaluator joins nothing; shard 1 answered already.
			{ev: evUp(0), want: []string{"0/1 snapshot s0 #3 e-1"}},
			{ev: evWeights(0, 1, 0, 3, 7, 3), want: []string{"done snapshot"}},
		}},
		{name: "per-link order: requests follow the pushes they acknowledge", cfg: twoLinks, steps: []coreStep{
			{ev: evPull(false), want: []string{"0/0 pull s0 #1 c0", "0/0 pull s1 #2 c0", "1/0 pull s2 #3 c0"}},
			{ev: evWeights(1, 0, 2, 3, 2, 4)},
			{ev: evWeights(0, 0, 1, 2, 1, 4)},
			{ev: evWeights(0, 0, 0, 1, 1, 4), want: []string{"done pull"}},
			{ev: evPush(1, 0), want: []string{"1/0 push s2 #4 c2 b1 l4", "0/0 push s1 #5 c1 b1 l4", "0/0 push s0 #6 c1 b1 l4", "done push"}},
			{ev: evPull(false), want: []string{"0/0 pull s0 #7 c1", "0/0 pull s1 #8 c1", "1/0 pull s2 #9 c2"}},
			// A shard on the wrong link, an answer on a link that does not
			// carry it: ignored.
			{ev: evWeights(1, 0, 0, 7, 1, 4)},
			{ev: evWeights(1, 0, 2, 9, 3, 4)},
			{ev: evWeights(0, 0, 0, 7, 2, 4)},
			{ev: evWeights(0, 0, 1, 8, 2, 4), want: []string{"delivered [1]", "done pull"}},
		}},
		{name: "the pull clock after a shard server restarts with a new life", cfg: twoLinks, steps: []coreStep{
			{ev: evPull(false), want: []string{"0/0 pull s0 #1 c0", "0/0 pull s1 #2 c0", "1/0 pull s2 #3 c0"}},
			{ev: evWeights(0, 0, 0, 1, 5, 11)},
			{ev: evWeights(0, 0, 1, 2, 5, 11)},
			{ev: evWeights(1, 0, 2, 3, 5, 22), want: []string{"done pull"}},
			{ev: evPush(1, 0), want: []string{"1/0 push s2 #4 c5 b1 l22", "0/0 push s1 #5 c5 b1 l11", "0/0 push s0 #6 c5 b1 l11", "done push"}},
			{ev: evDown(1, 0), want: []string{"dial 1"}},
			// The push goes again with the old life: the restored server
			// gives it up.
			{ev: evUp(1), want: []string{"1/1 join s2 #7 c0", "1/1 push s2 #4 c5 b1 l22"}},
			{ev: evPull(false), want: []string{"0/0 pull s0 #8 c5", "0/0 pull s1 #9 c5", "1/1 pull s2 #10 c0"}},
			{ev: evWeights(0, 0, 0, 8, 6, 11)},
			{ev: evWeights(0, 0, 1, 9, 6, 11)},
			{ev: evWeights(1, 1, 2, 10, 2, 33), want: []string{"delivered [1]", "done pull"}},
			{ev: evPush(2, 0), want: []string{"1/1 push s2 #11 c2 b2 l33", "0/0 push s1 #12 c6 b2 l11", "0/0 push s0 #13 c6 b2 l11", "done push"}},
			{ev: evPull(false), want: []string{"0/0 pull s0 #14 c6", "0/0 pull s1 #15 c6", "1/1 pull s2 #16 c2"}},
		}},
		{name: "hardsync: after a push the next round", cfg: hardsync(oneLink), steps: []coreStep{
			{ev: evPull(false), want: []string{"0/0 pull s0 #1 c0", "0/0 pull s1 #2 c0"}},
			{ev: evWeights(0, 0, 0, 1, 0, 1)},
			{ev: evWeights(0, 0, 1, 2, 0, 1), want: []string{"done pull"}},
			{ev: evPull(false), want: []string{"0/0 pull s0 #3 c0", "0/0 pull s1 #4 c0"}},
			{ev: evWeights(0, 0, 0, 3, 0, 1)},
			{ev: evWeights(0, 0, 1, 4, 0, 1), want: []string{"done pull"}},
			{ev: evPush(0, 0), want: []string{"0/0 push s1 #5 c0 b0 l1", "0/0 push s0 #6 c0 b0 l1", "done push"}},
			{ev: evPull(false), want: []string{"0/0 pull s0 #7 c1", "0/0 pull s1 #8 c1"}},
		}},
		{name: "hardsync: a prefetch on a replaced connection is asked after the push before it", cfg: hardsync(oneLink), steps: []coreStep{
			{ev: evPull(false), want: []string{"0/0 pull s0 #1 c0", "0/0 pull s1 #2 c0"}},
			{ev: evWeights(0, 0, 0, 1, 4, 1)},
			{ev: evWeights(0, 0, 1, 2, 4, 2), want: []string{"done pull"}},
			{ev: evPull(true), want: []string{"0/0 pull s0 #3 c5", "0/0 pull s1 #4 c5"}},
			{ev: evDown(0, 0), want: []string{"dial 0"}},
			// The push of the step the prefetch is for has not been
			// sent: the prefetch waits for it, so that a shard
			// restarted since counts that push (of its earlier life)
			// before it answers.
			{ev: evUp(0), want: []string{"0/1 join s0 #5 c0", "0/1 join s1 #6 c0"}},
			// The stamps came on the old connection: no minimum clock.
			{ev: evPush(5, 0), want: []string{"0/1 push s1 #7 c4 b5 l2", "0/1 pull s1 #8 c0", "0/1 push s0 #9 c4 b5 l1", "0/1 pull s0 #10 c0", "done push"}},
			// Shard 0's life answers with the next round, shard 1's new
			// life with its own.
			{ev: evWeights(0, 1, 0, 10, 5, 1)},
			{ev: evWeights(0, 1, 1, 8, 3, 7), want: []string{"delivered [5]", "done pull"}},
			{ev: evWait(), want: []string{"done wait for the pull"}},
			{ev: evPull(true), want: []string{"0/1 pull s0 #11 c6", "0/1 pull s1 #12 c4"}},
		}},
		{name: "hardsync: a prefetch answered by the same life with the round computed on is asked again", cfg: hardsync(oneLink), steps: []coreStep{
			{ev: evPull(false), want: []string{"0/0 pull s0 #1 c0", "0/0 pull s1 #2 c0"}},
			{ev: evWeights(0, 0, 0, 1, 4, 1)},
			{ev: evWeights(0, 0, 1, 2, 4, 2), want: []string{"done pull"}},
			{ev: evPush(5, 0), want: []string{"0/0 push s1 #3 c4 b5 l2", "0/0 push s0 #4 c4 b5 l1", "done push"}},
			{ev: evPull(true), want: []string{"0/0 pull s0 #5 c5", "0/0 pull s1 #6 c5"}},
			{ev: evDown(0, 0), want: []string{"dial 0"}},
			// The push went before: the prefetch is asked at once, with
			// no minimum clock (the stamps came on the old connection).
			{ev: evUp(0), want: []string{"0/1 join s0 #7 c0", "0/1 join s1 #8 c0", "0/1 push s0 #4 c4 b5 l1", "0/1 push s1 #3 c4 b5 l2", "0/1 pull s0 #9 c0", "0/1 pull s1 #10 c0"}},
			{ev: evWeights(0, 1, 0, 9, 4, 1), want: []string{"0/1 pull s0 #11 c5"}},
			{ev: evWeights(0, 1, 1, 10, 3, 7), want: []string{"delivered [5]"}},
			{ev: evWeights(0, 1, 0, 11, 5, 1), want: []string{"done pull"}},
		}},
		{name: "hardsync: a push on a replaced life's weights opens no round", cfg: hardsync(oneLink), steps: []coreStep{
			{ev: evPull(false), want: []string{"0/0 pull s0 #1 c0", "0/0 pull s1 #2 c0"}},
			{ev: evWeights(0, 0, 0, 1, 4, 1)},
			{ev: evWeights(0, 0, 1, 2, 4, 1), want: []string{"done pull"}},
			{ev: evPull(true), want: []string{"0/0 pull s0 #3 c5", "0/0 pull s1 #4 c5"}},
			{ev: evDown(0, 0), want: []string{"dial 0"}},
			{ev: evUp(0), want: []string{"0/1 join s0 #5 c0", "0/1 join s1 #6 c0"}},
			// Computed on the old life's weights: given up there (where
			// it counts as the learner's push of its round).
			{ev: evPush(5, 0), want: []string{"0/1 push s1 #7 c4 b5 l1", "0/1 pull s1 #8 c0", "0/1 push s0 #9 c4 b5 l1", "0/1 pull s0 #10 c0", "done push"}},
			// The server was restarted: its new life's weights.
			{ev: evWeights(0, 1, 0, 10, 0, 9)},
			{ev: evWeights(0, 1, 1, 8, 0, 9), want: []string{"delivered [5]", "done pull"}},
			{ev: evWait(), want: []string{"done wait for the pull"}},
			{ev: evPull(false), want: []string{"0/1 pull s0 #11 c0", "0/1 pull s1 #12 c0"}},
		}},
		{name: "hardsync: a push refused ends the pull after it at once", cfg: hardsync(oneLink), steps: []coreStep{
			{ev: evPull(false), want: []string{"0/0 pull s0 #1 c0", "0/0 pull s1 #2 c0"}},
			{ev: evWeights(0, 0, 0, 1, 0, 1)},
			{ev: evWeights(0, 0, 1, 2, 0, 1), want: []string{"done pull"}},
			{ev: evPush(0, 0), want: []string{"0/0 push s1 #3 c0 b0 l1", "0/0 push s0 #4 c0 b0 l1", "done push"}},
			{ev: evPull(false), want: []string{"0/0 pull s0 #5 c1", "0/0 pull s1 #6 c1"}},
			// The round cannot close without the refused gradient: no
			// answer to this pull will come.
			{ev: evReject(0, 0, 1, 3, ErrNonFinite), want: []string{"done pull err"}, wantErr: ErrNonFinite},
			{ev: evWeights(0, 0, 0, 5, 1, 1)}, // an answer to the ended pull: ignored
		}},
		{name: "prefetch: pushes carry the stamps of the weights computed on until WaitPull", cfg: hardsync(oneLink), steps: []coreStep{
			{ev: evPull(false), want: []string{"0/0 pull s0 #1 c0", "0/0 pull s1 #2 c0"}},
			{ev: evWeights(0, 0, 0, 1, 0, 1)},
			{ev: evWeights(0, 0, 1, 2, 0, 1), want: []string{"done pull"}},
			// Under hardsync a prefetch asks for the next round, pushed
			// or not.
			{ev: evPull(true), want: []string{"0/0 pull s0 #3 c1", "0/0 pull s1 #4 c1"}},
			{ev: evPull(true), want: []string{"done pull err"}, wantErr: ErrInvalidConfig},
			{ev: evPull(false), want: []string{"done pull err"}, wantErr: ErrInvalidConfig},
			{ev: evJoin(), want: []string{"done join err"}, wantErr: ErrInvalidConfig},
			{ev: evPush(1, 0), want: []string{"0/0 push s1 #5 c0 b1 l1", "0/0 push s0 #6 c0 b1 l1", "done push"}},
			// The prefetch's answers were sent before the push: they
			// acknowledge nothing of it.
			{ev: evWeights(0, 0, 0, 3, 1, 1)},
			{ev: evWeights(0, 0, 1, 4, 1, 1), want: []string{"done pull"}},
			{ev: evPush(2, 0), want: []string{"0/0 push s1 #7 c0 b2 l1", "0/0 push s0 #8 c0 b2 l1", "done push"}},
			{ev: evWait(), want: []string{"done wait for the pull"}},
			{ev: evPull(true), want: []string{"0/0 pull s0 #9 c2", "0/0 pull s1 #10 c2"}},
			{ev: evPush(3, 0), want: []string{"0/0 push s1 #11 c1 b3 l1", "0/0 push s0 #12 c1 b3 l1", "done push"}},
			{ev: evWeights(0, 0, 1, 10, 2, 1)},
			{ev: evWeights(0, 0, 0, 9, 2, 1), want: []string{"delivered [1 2]", "done pull"}},
			{ev: evWait(), want: []string{"done wait for the pull"}},
			{ev: evWait(), want: []string{"done wait for the pull"}},
		}},
		{name: "push in parts: last shards first, nothing else meanwhile", cfg: twoLinks, steps: []coreStep{
			{ev: evPull(false), want: []string{"0/0 pull s0 #1 c0", "0/0 pull s1 #2 c0", "1/0 pull s2 #3 c0"}},
			{ev: evWeights(0, 0, 0, 1, 0, 1)},
			{ev: evWeights(0, 0, 1, 2, 0, 1)},
			{ev: evWeights(1, 0, 2, 3, 0, 1), want: []string{"done pull"}},
			{ev: evPush(4, 65), want: []string{"done push"}},
			{ev: evPush(4, 64), want: []string{"1/0 push s2 #4 c0 b4 l1", "done push"}},
			{ev: evPull(false), want: []string{"done pull err"}, wantErr: ErrInvalidConfig},
			{ev: evPush(5, 0), want: []string{"done push err"}, wantErr: ErrInvalidConfig},
			{ev: evWait(), want: []string{"done wait for the pull"}},
			{ev: evPush(4, 0), want: []string{"0/0 push s1 #5 c0 b4 l1", "0/0 push s0 #6 c0 b4 l1", "done push"}},
		}},
		{name: "rejections: of the request at once, of earlier messages after the answers", cfg: oneLink, steps: []coreStep{
			{ev: evPull(false), want: []string{"0/0 pull s0 #1 c0", "0/0 pull s1 #2 c0"}},
			{ev: evWeights(0, 0, 0, 1, 0, 1)},
			{ev: evWeights(0, 0, 1, 2, 0, 1), want: []string{"done pull"}},
			{ev: evPush(1, 0), want: []string{"0/0 push s1 #3 c0 b1 l1", "0/0 push s0 #4 c0 b1 l1", "done push"}},
			{ev: evPull(false), want: []string{"0/0 pull s0 #5 c0", "0/0 pull s1 #6 c0"}},
			{ev: evReject(0, 0, 1, 3, ErrNonFinite)},
			{ev: evWeights(0, 0, 0, 5, 1, 1)},
			{ev: evWeights(0, 0, 1, 6, 1, 1), want: []string{"delivered [1]", "done pull err"}, wantErr: ErrNonFinite},
			{ev: evPull(false), want: []string{"0/0 pull s0 #7 c1", "0/0 pull s1 #8 c1"}},
			{ev: evReject(0, 0, 0, 7, ErrRefused), want: []string{"done pull err"}, wantErr: ErrRefused},
			// Its stamps: shard 1's old ones, and no answer to wait for.
			{ev: evWeights(0, 0, 1, 8, 2, 1)},
			{ev: evPull(false), want: []string{"0/0 pull s0 #9 c1", "0/0 pull s1 #10 c1"}},
			{ev: evReject(0, 0, 0, 4, ErrUnknownLearner)}, // while waiting: reported at the end
			{ev: evWeights(0, 0, 0, 9, 2, 1)},
			{ev: evWeights(0, 0, 1, 10, 2, 1), want: []string{"done pull err"}, wantErr: ErrUnknownLearner},
			{ev: evReject(0, 0, 0, 4, ErrWrongJob)}, // while idle: reported by the next call
			{ev: evJoin(), want: []string{"0/0 join s0 #11 c0", "0/0 join s1 #12 c0"}},
			{ev: evAck(0, 0, 0, 11)},
			{ev: evAck(0, 0, 1, 12), want: []string{"done join err"}, wantErr: ErrWrongJob},
		}},
		{name: "weights of the wrong length end the pull", cfg: oneLink, steps: []coreStep{
			{ev: evPull(false), want: []string{"0/0 pull s0 #1 c0", "0/0 pull s1 #2 c0"}},
			{ev: coreEvent{"3 weights", func(c *ClientCore, _ *coreCase) ClientReady {
				return c.Recv(0, 0, 1, Reply{Seq: 2, Weights: make([]float32, 3)})
			}}, want: []string{"done pull err"}, wantErr: ErrBadLength},
		}},
		{name: "a connection not restored fails the calls that need it", cfg: twoLinks, steps: []coreStep{
			{ev: evPull(false), want: []string{"0/0 pull s0 #1 c0", "0/0 pull s1 #2 c0", "1/0 pull s2 #3 c0"}},
			{ev: evWeights(0, 0, 0, 1, 0, 1)},
			{ev: evWeights(0, 0, 1, 2, 0, 1)},
			{ev: evDown(1, 0), want: []string{"dial 1"}},
			{ev: evDown(1, 0)}, // seen by a second goroutine: nothing more
			{ev: evDead(1), want: []string{"done pull err"}, wantErr: errNoServer},
			{ev: evPush(1, 0), want: []string{"done push err"}, wantErr: errNoServer},
			{ev: evLeave(), want: []string{"done leave err"}, wantErr: errNoServer},
			// A push of shards of the live link alone is sent.
			{ev: evPush(1, 64), want: []string{"done push err"}, wantErr: errNoServer},
			{ev: evPush(1, 65), want: []string{"done push"}},
		}},
		{name: "without Reconnect a broken connection is given up", cfg: ClientCoreConfig{Protocol: Softsync, Total: 64, Shards: 2}, steps: []coreStep{
			{ev: evJoin(), want: []string{"0/0 join s0 #1 c0", "1/0 join s1 #2 c0"}},
			{ev: evAck(1, 0, 1, 2)},
			{ev: evDown(1, 0)},
			{ev: evDown(0, 0), want: []string{"done join err"}},
		}},
		{name: "a connection replaced again and again with nothing received is given up", cfg: oneLink, steps: []coreStep{
			{ev: evJoin(), want: []string{"0/0 join s0 #1 c0", "0/0 join s1 #2 c0"}},
			{ev: evDown(0, 0), want: []string{"dial 0"}},
			{ev: evUp(0), want: []string{"0/1 join s0 #3 c0", "0/1 join s1 #4 c0", "0/1 join s0 #5 c0", "0/1 join s1 #6 c0"}},
			{ev: evAck(0, 1, 0, 5)}, // received: the count starts again
			{ev: evDown(0, 1), want: []string{"dial 0"}},
			{ev: evUp(0), want: []string{"0/2 join s0 #7 c0", "0/2 join s1 #8 c0", "0/2 join s1 #9 c0"}},
			{ev: evDown(0, 2), want: []string{"dial 0"}},
			{ev: evUp(0), want: []string{"0/3 join s0 #10 c0", "0/3 join s1 #11 c0", "0/3 join s1 #12 c0"}},
			{ev: evDown(0, 3), want: []string{"dial 0"}},
			{ev: evUp(0), want: []string{"0/4 join s0 #13 c0", "0/4 join s1 #14 c0", "0/4 join s1 #15 c0"}},
			{ev: evDown(0, 4), want: []string{"dial 0"}},
			{ev: evUp(0), want: []string{"0/5 join s0 #16 c0", "0/5 join s1 #17 c0", "0/5 join s1 #18 c0"}},
			{ev: evDown(0, 5), want: []string{"dial 0"}},
			{ev: evUp(0), want: []string{"0/6 join s0 #19 c0", "0/6 join s1 #20 c0", "0/6 join s1 #21 c0"}},
			{ev: evDown(0, 6), want: []string{"dial 0"}},
			{ev: evUp(0), want: []string{"0/7 join s0 #22 c0", "0/7 join s1 #23 c0", "0/7 join s1 #24 c0"}},
			{ev: evDown(0, 7), want: []string{"dial 0"}},
			{ev: evUp(0), want: []string{"0/8 join s0 #25 c0", "0/8 join s1 #26 c0", "0/8 join s1 #27 c0"}},
			{ev: evDown(0, 8), want: []string{"dial 0"}},
			{ev: evUp(0), want: []string{"0/9 join s0 #28 c0", "0/9 join s1 #29 c0", "0/9 join s1 #30 c0"}},
			{ev: evDown(0, 9), want: []string{"done join err"}},
		}},
		{name: "a push never sent is never delivered, nor any after it", cfg: oneLink, steps: []coreStep{
			{ev: evPull(false), want: []string{"0/0 pull s0 #1 c0", "0/0 pull s1 #2 c0"}},
			{ev: evWeights(0, 0, 0, 1, 0, 1)},
			{ev: evWeights(0, 0, 1, 2, 0, 1), want: []string{"done pull"}},
			{ev: evPush(1, 0), want: []string{"0/0 push s1 #3 c0 b1 l1", "0/0 push s0 #4 c0 b1 l1", "done push"}},
			{ev: evUnsent(0, 0, 4)},
			{ev: evPush(2, 0), want: []string{"0/0 push s1 #5 c0 b2 l1", "0/0 push s0 #6 c0 b2 l1", "done push"}},
			{ev: evLeave(), want: []string{"0/0 leave s0 #7 c0", "0/0 leave s1 #8 c0"}},
			{ev: evAck(0, 0, 0, 7)},
			{ev: evAck(0, 0, 1, 8), want: []string{"done leave"}},
			{ev: evDown(0, 0), want: []string{"dial 0"}},
			{ev: evUp(0)}, // nothing left to resend: no member, nothing unacknowledged
		}},
		{name: "Close ends the call in progress and every later one", cfg: oneLink, steps: []coreStep{
			{ev: evPull(false), want: []string{"0/0 pull s0 #1 c0", "0/0 pull s1 #2 c0"}},
			{ev: coreEvent{"close", func(c *ClientCore, _ *coreCase) ClientReady { return c.Close() }}, want: []string{"done pull err"}, wantErr: rdma.ErrClosed},
			{ev: evWeights(0, 0, 0, 1, 0, 1)},
			{ev: evUp(0)},
			{ev: evJoin(), want: []string{"done join err"}, wantErr: rdma.ErrClosed},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewClientCore(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			tc.w, tc.grad, tc.stamps = make([]float32, tc.cfg.Total), make([]float32, tc.cfg.Total), make([]uint64, tc.cfg.Shards)
			for i, st := range tc.steps {
				r := st.ev.step(c, &tc)
				if got := coreOutputs(r); !slices.Equal(got, st.want) {
					t.Fatalf("step %d (%s): outputs\n\t%s\nwant\n\t%s", i, st.ev.name, strings.Join(got, "\n\t"), strings.Join(st.want, "\n\t"))
				}
				if st.wantErr != nil && !errors.Is(r.Err, st.wantErr) {
					t.Fatalf("step %d (%s): error %v, want %v", i, st.ev.name, r.Err, st.wantErr)
				}
			}
		})
	}
}

// TestClientCoreStamps: a pull's stamps and lives become the ones pushes
// carry when it ends, an asynchronous pull's at WaitPull; a pull that
// fails keeps the stamps of the shards that answered.
func TestClientCoreStamps(t *testing.T) {
	c, err := NewClientCore(oneLink)
	if err != nil {
		t.Fatal(err)
	}
	w := make([]float32, 64)
	c.Pull(w, false)
	c.Recv(0, 0, 0, Reply{Seq: 1, Clock: 4, Life: 2, Weights: make([]float32, 32)})
	c.Recv(0, 0, 1, Reply{Seq: 2, Clock: 5, Life: 2, Weights: make([]float32, 32)})
	if !slices.Equal(c.Stamps(), []uint64{4, 5}) {
		t.Fatalf("stamps %v after the pull, want [4 5]", c.Stamps())
	}
	c.Pull(w, true)
	c.Recv(0, 0, 0, Reply{Seq: 3, Clock: 6, Life: 2, Weights: make([]float32, 32)})
	c.Recv(0, 0, 1, Reply{Seq: 4, Clock: 7, Life: 2, Weights: make([]float32, 32)})
	if !slices.Equal(c.Stamps(), []uint64{4, 5}) {
		t.Fatalf("stamps %v before WaitPull, want [4 5]", c.Stamps())
	}
	c.WaitPull()
	if !slices.Equal(c.Stamps(), []uint64{6, 7}) {
		t.Fatalf("stamps %v after WaitPull, want [6 7]", c.Stamps())
	}
	c.Pull(w, false)
	c.Recv(0, 0, 1, Reply{Seq: 6, Clock: 9, Life: 2, Weights: make([]float32, 32)})
	if r := c.Cancel(errors.New("gave up")); r.Done != CallPull || r.Err == nil {
		t.Fatalf("cancel: %+v", r)
	}
	if !slices.Equal(c.Stamps(), []uint64{6, 9}) {
		t.Fatalf("stamps %v after a pull given up, want [6 9]", c.Stamps())
	}
	if r := c.Cancel(errors.New("again")); r.Done != CallNone {
		t.Fatalf("a cancel with no call in progress ended %v", r.Done)
	}
}

// TestClientCorePlace: the weights answering the request a pull awaits
// are placed in the pull's vector, in the shard's range, and taken from
// there without a copy; any other answer is placed nowhere, and weights
// from elsewhere are copied in.
func TestClientCorePlace(t *testing.T) {
	c, err := NewClientCore(oneLink)
	if err != nil {
		t.Fatal(err)
	}
	w := make([]float32, 64)
	if p := c.Place(0, 1, 32); p != nil {
		t.Fatal("placed with no pull in progress")
	}
	c.Pull(w, false)
	for _, bad := range []struct {
		shard int
		seq   uint64
		n     int
	}{{0, 2, 32}, {0, 0, 32}, {0, 1, 31}, {2, 1, 32}, {-1, 1, 32}} {
		if p := c.Place(bad.shard, bad.seq, bad.n); p != nil {
			t.Fatalf("Place(%d, %d, %d) placed", bad.shard, bad.seq, bad.n)
		}
	}
	p := c.Place(1, 2, 32)
	if len(p) != 32 || &p[0] != &w[32] {
		t.Fatalf("shard 1's answer placed at %p, want &w[32] = %p", p, &w[32])
	}
	for i := range p {
		p[i] = 7 // the transport receives there
	}
	elsewhere := slices.Repeat([]float32{3}, 32)
	c.Recv(0, 0, 0, Reply{Seq: 1, Weights: elsewhere})
	c.Recv(0, 0, 1, Reply{Seq: 2, Weights: p})
	if w[0] != 3 || w[31] != 3 || w[32] != 7 || w[63] != 7 {
		t.Fatalf("w = %v", w)
	}
	if c.Place(1, 2, 32) != nil {
		t.Fatal("placed after the pull ended")
	}
}

// TestClientCoreConfig: a configuration the core cannot run is refused,
// naming the field.
func TestClientCoreConfig(t *testing.T) {
	for _, cfg := range []ClientCoreConfig{
		{Total: 64, Shards: 2, Links: []int{0}},
		{Total: 64, Shards: 2, Links: []int{0, 2}},
		{Total: 64, Shards: 2, Links: []int{1, 1}},
		{Total: 64, Shards: 2, Links: []int{-1, 0}},
		{Total: 64, Shards: 2, Incarnation: MaxIncarnation + 1},
		{Total: 64, Shards: 0},
	} {
		if _, err := NewClientCore(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: %v, want ErrInvalidConfig", cfg, err)
		}
	}
	if _, err := NewClientCore(ClientCoreConfig{Total: 64, Shards: 2, Codec: rdma.Codec{ID: rdma.CodecTopK, Fraction: 2}}); err == nil {
		t.Error("TopK of fraction 2 accepted")
	}
}
