package sim

import (
	"math"

	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/param"
)

// Network is the throughput model of a run (Config.Net): messages have
// sizes and cross links of finite bandwidth, each shard's core handles one
// message at a time for a service time, and learners spend time in the
// gradient codec. Without it (Config.Net nil) messages take the latency
// alone and shards answer at once.
//
// Sizes: the run stands for a flat vector of Elements values (0: the
// length of Config.Init), so that a small Init can model a large network
// at the cost of a small one. Shard k's part of it is Elements·|range k| /
// len(Init). A push to shard k carries HeaderBytes + GradientBytes per
// element of its part, a weights reply HeaderBytes + WeightBytes per
// element; pulls and leaves carry HeaderBytes.
//
// Links: every learner and every shard has a link of its own with
// LearnerBandwidth or ShardBandwidth bytes/s in each direction (0:
// unlimited); a shard's link carries the traffic of all learners (one
// shard per server, as in Rudra). A message from A to B occupies A's
// outbound and B's inbound link: its last byte leaves A at
// tA = max(now, A free) + bytes/bwA, is through B's inbound link at
// tB = max(tA, max(now, B free) + bytes/bwB), and arrives at tB + Latency
// (+ the jitter). Each link transmits one message at a time, in sending order;
// a single transfer takes bytes/min(bwA, bwB) + Latency. With SharedLink
// every message of every learner and shard instead crosses one link of
// ShardBandwidth, one message at a time (one queue for all traffic in
// both directions, as on a loopback interface or a hub): it is through
// at max(now, link free) + bytes/ShardBandwidth.
//
// Service: a shard's core takes the messages in arrival order, one at a
// time; a push occupies it for PushFixed + PushPerElem·(elements of its
// part) seconds (decoding, the NaN scan, accumulating or applying the
// update), a pull PullFixed + PullPerElem·(elements) (copying and
// encoding the weights for the reply), any other message PullFixed. The
// core steps the message when its service ends and sends the replies then.
//
// Codec: a learner spends DecodePerElem·Elements seconds decoding the
// weights it pulled and EncodePerElem·Elements encoding its gradient,
// added to each step's compute time.
type Network struct {
	Elements                         int
	GradientBytes, WeightBytes       float64 // wire bytes per element: 4 uncompressed, 4 × the codec's ratio otherwise
	HeaderBytes                      float64 // per message
	LearnerBandwidth, ShardBandwidth float64 // bytes/s per direction; 0 = unlimited
	SharedLink                       bool    // one link, ShardBandwidth, for all traffic
	PushFixed, PushPerElem           float64 // shard service of a push, seconds
	PullFixed, PullPerElem           float64 // shard service of a pull (PullFixed: of any other message too)
	EncodePerElem, DecodePerElem     float64 // learner codec time, seconds per element
}

func (n *Network) validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"GradientBytes", n.GradientBytes}, {"WeightBytes", n.WeightBytes}, {"HeaderBytes", n.HeaderBytes},
		{"LearnerBandwidth", n.LearnerBandwidth}, {"ShardBandwidth", n.ShardBandwidth},
		{"PushFixed", n.PushFixed}, {"PushPerElem", n.PushPerElem}, {"PullFixed", n.PullFixed},
		{"PullPerElem", n.PullPerElem}, {"EncodePerElem", n.EncodePerElem}, {"DecodePerElem", n.DecodePerElem},
	} {
		if !(f.v >= 0) || math.IsInf(f.v, 0) {
			return param.Fieldf("Net."+f.name, "must be finite and ≥ 0, got %g", f.v)
		}
	}
	if n.Elements < 0 {
		return param.Fieldf("Net.Elements", "must be ≥ 0, got %d", n.Elements)
	}
	return nil
}

// netState is the simulator's view of the links and shard cores.
type netState struct {
	elems     []float64 // per shard: modelled elements of its part
	learnerTx []float64 // per learner: its outbound link is free from
	learnerRx []float64 // per learner: its inbound link is free from
	shardTx   []float64 // per shard
	shardRx   []float64
	busy      []float64 // per shard: its core is free from
	shared    float64   // SharedLink: the link is free from
}

func newNetState(n *Network, ranges []ps.Range, total, learners int) *netState {
	ns := &netState{learnerTx: make([]float64, learners), learnerRx: make([]float64, learners),
		shardTx: make([]float64, len(ranges)), shardRx: make([]float64, len(ranges)), busy: make([]float64, len(ranges))}
	scale := 1.0
	if n.Elements > 0 {
		scale = float64(n.Elements) / float64(total)
	}
	for _, r := range ranges {
		ns.elems = append(ns.elems, scale*float64(r.Len()))
	}
	return ns
}

// elements is the modelled length of the whole vector.
func (s *sim) elements() float64 {
	if e := s.cfg.Net.Elements; e > 0 {
		return float64(e)
	}
	return float64(len(s.cfg.Init))
}

// transfer schedules f at the arrival of a message of the given bytes
// sent now between learner and shard (toShard: learner → shard). Without
// a Network it is deliver.
func (s *sim) transfer(learner, shard int, toShard bool, bytes float64, f func()) {
	n := s.cfg.Net
	if n == nil {
		s.deliver(learner, shard, toShard, f)
		return
	}
	if n.SharedLink {
		s.ns.shared = max(s.now, s.ns.shared) + wireTime(bytes, n.ShardBandwidth)
		s.at(s.ns.shared-s.now, func() { s.deliver(learner, shard, toShard, f) })
		return
	}
	tx, rx := &s.ns.learnerTx[learner], &s.ns.shardRx[shard]
	bwTx, bwRx := n.LearnerBandwidth, n.ShardBandwidth
	if !toShard {
		tx, rx = &s.ns.shardTx[shard], &s.ns.learnerRx[learner]
		bwTx, bwRx = bwRx, bwTx
	}
	*tx = max(s.now, *tx) + wireTime(bytes, bwTx)
	*rx = max(*tx, max(s.now, *rx)+wireTime(bytes, bwRx))
	// deliver adds the latency (and jitter) and keeps the link in order.
	s.at(*rx-s.now, func() { s.deliver(learner, shard, toShard, f) })
}

func wireTime(bytes, bw float64) float64 {
	if bw == 0 {
		return 0
	}
	return bytes / bw
}

// serve runs step on shard m.Shard's core once it has served m (at once
// without a Network).
func (s *sim) serve(m ps.Msg, step func()) {
	n := s.cfg.Net
	if n == nil {
		step()
		return
	}
	e := s.ns.elems[m.Shard]
	cost := n.PullFixed
	switch m.Type {
	case ps.MsgPush:
		cost = n.PushFixed + n.PushPerElem*e
	case ps.MsgPull:
		cost += n.PullPerElem * e
	}
	b := &s.ns.busy[m.Shard]
	*b = max(s.now, *b) + cost
	s.at(*b-s.now, step)
}

// msgBytes is the wire size of a learner's message.
func (s *sim) msgBytes(m ps.Msg) float64 {
	n := s.cfg.Net
	if n == nil {
		return 0
	}
	if m.Type == ps.MsgPush {
		return n.HeaderBytes + n.GradientBytes*s.ns.elems[m.Shard]
	}
	return n.HeaderBytes
}

// replyBytes is the wire size of shard's weights reply.
func (s *sim) replyBytes(shard int) float64 {
	n := s.cfg.Net
	if n == nil {
		return 0
	}
	return n.HeaderBytes + n.WeightBytes*s.ns.elems[shard]
}

// codecTime is a learner's codec time per step.
func (s *sim) codecTime() float64 {
	n := s.cfg.Net
	if n == nil {
		return 0
	}
	return (n.EncodePerElem + n.DecodePerElem) * s.elements()
}
