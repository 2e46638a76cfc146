package ps

import (
	"context"
	"errors"
)

// Frame is one message on a connection between a learner and a shard
// server: a stamped header and a float32 payload (gradient or weights),
// plus a byte payload for error text. Its fields are those of the
// transport's message (package rdma), so a connection adapts with a field
// copy.
//
// Types: MsgPush, MsgPull, MsgJoin and MsgLeave go from learner to shard
// (Timestamp is the push's stamp j or the pull's minimum clock);
// FrameWeights answers a pull (Timestamp is the weights' stamp i, Seq the
// pull's Seq, Payload the shard's range); FrameError answers a rejected
// message with its text in Data.
type Frame struct {
	Type      uint8
	Job       uint32
	Learner   uint32
	Shard     uint32
	Timestamp uint64
	Seq       uint64
	Payload   []float32
	Data      []byte
}

// Frame types beyond the MsgType values.
const (
	FrameWeights uint8 = 5    // shard → learner: weights of the shard's range
	FrameError   uint8 = 0xff // shard → learner: a rejection (the transport's error type)
)

// ErrRejected is wrapped by the client's errors for FrameError replies:
// the shard rejected one of the learner's messages.
var ErrRejected = errors.New("rejected by the parameter server")

// Conn is what the parameter server and its clients need from a transport
// connection. Contract (that of rdma.Conn):
//   - Frames arrive in order, each once, with every field as sent.
//   - Send takes ownership of f and its slices, also when it fails; the
//     sender must not touch them afterwards. Recv returns a frame the
//     caller owns.
//   - One goroutine may Send while another Recvs.
//   - After the peer closes, Recv returns the frames sent before, then an
//     error. Close unblocks pending calls and may be called more than once.
type Conn interface {
	Send(ctx context.Context, f *Frame) error
	Recv(ctx context.Context) (*Frame, error)
	Close() error
}

// Listener accepts the connections of learners to a shard server.
type Listener interface {
	// Accept waits for the next connection; after Close it returns an
	// error.
	Accept(ctx context.Context) (Conn, error)
	Close() error
}
