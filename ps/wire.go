package ps

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/softsync/softsync/rdma"
)

// The parameter server's messages on the wire. This file is the one place
// where core messages (Msg, Reply) and rdma messages meet.
//
// Learner → shard: the rdma types 1…4 are MsgPush, MsgPull, MsgJoin and
// MsgLeave; Learner is the learner id, Shard the shard, Seq the sequence,
// Timestamp the push's stamp j or the pull's minimum clock, Payload the
// gradient slice (pushes only). A push's Data is empty (no mini-batch id,
// life unknown) or pushDataLen bytes: the mini-batch id Msg.Batch and the
// life Msg.Life, uint64 little-endian each; another length is a bad frame
// (errBadPushData).
//
// Shard → learner: TypeWeights answers a pull or a snapshot request
// (Timestamp: the weights' stamp i; Seq: the request's Seq; Data: the
// shard's life, uint64 little-endian; Payload: the shard's range);
// TypeAck answers a join or a leave (Seq: the request's Seq; Timestamp:
// the shard clock; no data, no payload); rejections travel as rdma.TypeError with the rejected
// message's Seq and the reason in Data.
//
// Evaluator → shard: TypeSnapshot asks for the weights of an epoch end
// (Timestamp: the epoch e ≥ 1, whose snapshot is taken once the shard has
// consumed e·P gradients; 0: the final weights; SnapshotNow: the weights
// as they are, at once). Its Learner is not a learner id and binds
// nothing.
const (
	// TypeWeights is the rdma type of a shard's weights.
	TypeWeights rdma.Type = 5
	// TypeSnapshot is the rdma type of an evaluator's request for the
	// weights of an epoch end.
	TypeSnapshot rdma.Type = 6
	// TypeAck is the rdma type of a shard's acknowledgement of a join or
	// a leave.
	TypeAck rdma.Type = 7
)

// SnapshotNow is the Timestamp of a TypeSnapshot request for the
// weights as they are (an interrupted job's last weights).
const SnapshotNow = 1<<64 - 1

// Sequence numbers carry the learner's incarnation in their high 20 bits
// and a count of the messages of that life in the low 44: Seq =
// incarnation<<44 | n, n counting from 1. A restarted learner (a higher
// incarnation) thus sends sequences above those of every earlier life:
// its pushes are never taken for duplicates, and late messages of an
// earlier life always are. Neither part wraps: a client refuses an
// incarnation above MaxIncarnation and its message after the
// MaxMessages-th (ErrSeqExhausted).
const (
	incarnationShift = 44
	// MaxIncarnation is the highest incarnation of a learner: 2²⁰ − 1.
	MaxIncarnation = 1<<(64-incarnationShift) - 1
	// MaxMessages is the most messages a client sends in one
	// incarnation: 2⁴⁴ − 1.
	MaxMessages = 1<<incarnationShift - 1
)

// ErrSeqExhausted: a client has sent MaxMessages messages in its
// incarnation; a new incarnation (a restart) sends again.
var ErrSeqExhausted = errors.New("the learner's sequence numbers are used up in this incarnation")

// Seq returns the sequence number of a learner's n-th message (1 ≤ n ≤
// MaxMessages) in incarnation inc (≤ MaxIncarnation).
func Seq(inc uint32, n uint64) uint64 { return uint64(inc)<<incarnationShift | n }

// Incarnation returns the incarnation a sequence number belongs to.
func Incarnation(seq uint64) uint32 { return uint32(seq >> incarnationShift) }

// pushDataLen is the length of a push's Data when it carries ids.
const pushDataLen = 16

// errBadPushData answers a push whose Data is neither empty nor
// pushDataLen bytes; the server counts it in ServerStats.BadFrames.
var errBadPushData = errors.New("push data is neither empty nor 16 bytes (mini-batch id, life)")

// checkPushData returns errBadPushData if rm is a push whose Data has
// another length than the two a push may have.
func checkPushData(rm *rdma.Msg) error {
	if rm.Type == rdma.Type(MsgPush) && len(rm.Data) != 0 && len(rm.Data) != pushDataLen {
		return fmt.Errorf("%w: %d bytes", errBadPushData, len(rm.Data))
	}
	return nil
}

// coreMsg maps a received learner message, checked by checkPushData, to
// the core's Msg (the gradient aliases the payload: valid until rm is
// released).
func coreMsg(rm *rdma.Msg) Msg {
	m := Msg{Type: MsgType(rm.Type), Job: rm.Job, Shard: int(rm.Shard), Learner: rm.Learner,
		Seq: rm.Seq, Clock: rm.Timestamp, Grad: rm.Payload}
	if m.Type == MsgPush && len(rm.Data) == pushDataLen {
		m.Batch, m.Life = binary.LittleEndian.Uint64(rm.Data), binary.LittleEndian.Uint64(rm.Data[8:])
	}
	return m
}

// wireMsg returns a message from alloc for a learner's core message with
// room for n payload floats (the caller fills the payload).
func wireMsg(alloc func(int) *rdma.Msg, t MsgType, learner uint32, shard int, seq, clock uint64, n int) *rdma.Msg {
	m := alloc(n)
	m.Type, m.Learner, m.Shard, m.Seq, m.Timestamp = rdma.Type(t), learner, uint32(shard), seq, clock
	return m
}

// setPushData writes a push's Data: its mini-batch id and life.
func setPushData(m *rdma.Msg, batch, life uint64) {
	m.Data = binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(m.Data[:0], batch), life)
}

// lifeOf returns the life a weights reply carries (0 if none).
func lifeOf(rm *rdma.Msg) uint64 {
	if len(rm.Data) < 8 {
		return 0
	}
	return binary.LittleEndian.Uint64(rm.Data)
}

// weightsMsg returns a TypeWeights message stamped clock, of the shard's
// life, whose payload is w, lent (rdma.Msg.Borrow): the shard's own
// weights, unchanged until Send returns (lends).
func weightsMsg(to uint32, shard int, clock, life, seq uint64, w []float32, codec rdma.Codec) *rdma.Msg {
	m := rdma.NewMsg(0)
	m.Borrow(w)
	m.Type, m.Codec, m.Learner, m.Shard, m.Timestamp, m.Seq = TypeWeights, codec, to, uint32(shard), clock, seq
	m.Data = binary.LittleEndian.AppendUint64(m.Data[:0], life)
	return m
}

// errorMsg returns a pooled error report answering the message seq.
func errorMsg(shard int, seq uint64, err error) *rdma.Msg {
	m := rdma.NewErrorMsg(err)
	m.Shard, m.Seq = uint32(shard), seq
	return m
}

// describe names a received message for errors: type, learner, shard, seq.
func describe(rm *rdma.Msg) string { return describeMsg(rm.Type, rm.Learner, rm.Shard, rm.Seq) }

// describeMsg names a message of type t for errors.
func describeMsg(t rdma.Type, learner, shard uint32, seq uint64) string {
	switch t {
	case TypeWeights:
		return fmt.Sprintf("weights for learner %d from shard %d (seq %d)", learner, shard, seq)
	case TypeSnapshot:
		return fmt.Sprintf("snapshot request for shard %d (seq %d)", shard, seq)
	case TypeAck:
		return fmt.Sprintf("acknowledgement for learner %d from shard %d (seq %d)", learner, shard, seq)
	}
	return fmt.Sprintf("%v from learner %d to shard %d (seq %d)", MsgType(t), learner, shard, seq)
}

// ackMsg returns a pooled TypeAck message answering the join or leave seq
// of learner to on shard, whose clock is clock.
func ackMsg(to uint32, shard int, clock, seq uint64) *rdma.Msg {
	m := rdma.NewMsg(0)
	m.Type, m.Learner, m.Shard, m.Timestamp, m.Seq = TypeAck, to, uint32(shard), clock, seq
	return m
}

// sendMsg returns the rdma message of a client core's Send, from alloc
// (the network's allocator): a push lends the caller's gradient
// (BorrowHeld: it stays unchanged until a later request of the same
// connection has its answer, see Client.Push), or carries its TopK
// selection scattered into a payload of its shard's range (ranges).
func sendMsg(alloc func(int) *rdma.Msg, codec rdma.Codec, ranges []Range, s *Send) *rdma.Msg {
	m := &s.Msg
	if m.Type != MsgPush {
		return wireMsg(alloc, m.Type, m.Learner, m.Shard, m.Seq, m.Clock, 0)
	}
	var rm *rdma.Msg
	if s.Sel != nil {
		rm = wireMsg(alloc, MsgPush, m.Learner, m.Shard, m.Seq, m.Clock, ranges[m.Shard].Len())
		scatter(rm.Payload, s.Sel)
	} else {
		rm = wireMsg(alloc, MsgPush, m.Learner, m.Shard, m.Seq, m.Clock, 0)
		rm.BorrowHeld(m.Grad)
	}
	rm.Codec = codec
	setPushData(rm, m.Batch, m.Life)
	return rm
}

// Wire returns the rdma message of s as a Client sends it (see sendMsg):
// for runtimes of the client core other than Client, such as a
// simulator's.
func (s *Send) Wire(alloc func(int) *rdma.Msg, codec rdma.Codec, ranges []Range) *rdma.Msg {
	return sendMsg(alloc, codec, ranges, s)
}

// MsgOf returns the core message of a learner's or an evaluator's rdma
// message as a Server reads it (its gradient aliases rm's payload), or
// the error a Server rejects a malformed push with.
func MsgOf(rm *rdma.Msg) (Msg, error) {
	if err := checkPushData(rm); err != nil {
		return Msg{}, err
	}
	return coreMsg(rm), nil
}

// ReplyOf returns the core reply of a server's rdma message as a Client
// reads it (weights, an acknowledgement, or a rejection whose reason
// errors.Is finds); false for another type.
func ReplyOf(rm *rdma.Msg) (Reply, bool) { return coreReply(rm) }

// scatter writes the elements of a TopK selection sel into dst, zero
// elsewhere.
func scatter(dst []float32, sel []byte) {
	clear(dst)
	n := len(sel) / 8
	le := binary.LittleEndian
	for j := range n {
		dst[le.Uint32(sel[4*j:])] = math.Float32frombits(le.Uint32(sel[4*(n+j):]))
	}
}

// coreReply returns the core's form of a message a server sent the
// client: weights, an acknowledgement or a rejection; false for anything
// else.
func coreReply(m *rdma.Msg) (Reply, bool) {
	switch m.Type {
	case TypeWeights:
		return Reply{To: m.Learner, Seq: m.Seq, Clock: m.Timestamp, Life: lifeOf(m), Weights: m.Payload}, true
	case TypeAck:
		return Reply{To: m.Learner, Seq: m.Seq, Clock: m.Timestamp, Ack: true}, true
	case rdma.TypeError:
		return Reply{To: m.Learner, Seq: m.Seq, Err: rejection(m)}, true
	}
	return Reply{}, false
}

// rejection returns the error of a shard's error reply: its text,
// matching rdma.ErrRemote and the rejection reason (ErrDiverged,
// ErrNonFinite, …) the text names, so that errors.Is finds the reason on
// the learner's side too (the core wraps it in ErrRejected).
func rejection(m *rdma.Msg) error {
	err := m.Err()
	for _, reason := range rejectionReasons {
		if strings.Contains(string(m.Data), reason.Error()) {
			return &reasonError{err, reason}
		}
	}
	return err
}

// reasonError is an error reply that names a rejection reason.
type reasonError struct{ err, reason error }

func (e *reasonError) Error() string   { return e.err.Error() }
func (e *reasonError) Unwrap() []error { return []error{e.err, e.reason} }
