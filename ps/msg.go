package ps

import (
	"errors"
	"fmt"

	"github.com/softsync/softsync/ps/sgd"
)

// Rejection reasons, sent to the peer inside Reply.Err (wrapped with the
// shard, learner and values) and counted in Stats.Rejected.
var (
	ErrWrongJob       = errors.New("message for another job")
	ErrWrongShard     = errors.New("message for another shard")
	ErrUnknownLearner = errors.New("learner is not an active member")
	ErrBadType        = errors.New("unknown message type")
	ErrBadLength      = errors.New("gradient has the wrong length")
	ErrFutureClock    = errors.New("timestamp is ahead of the shard clock")
	ErrNonFinite      = errors.New("gradient has a NaN or Inf element")
	ErrAlreadyPushed  = errors.New("learner already pushed a gradient for this clock (hardsync)")
	ErrDiverged       = errors.New("the job diverged: its updates keep being refused")
)

// rejectionReasons lists the reasons above and the server's (ErrRefused,
// ErrNotHosted), for a client to recognise them in an error reply's text.
var rejectionReasons = []error{ErrWrongJob, ErrWrongShard, ErrUnknownLearner, ErrBadType, ErrBadLength,
	ErrFutureClock, ErrNonFinite, ErrAlreadyPushed, ErrDiverged, ErrRefused, ErrNotHosted}

// RefusedLimit is the number of updates in a row a shard refuses (each
// would have made a weight or its momentum NaN or infinite) before it
// takes the job for diverged and rejects every later push (ErrDiverged).
const RefusedLimit = 16

// ErrRejected is wrapped (with rdma.ErrRemote) by the client's errors for
// error replies: a shard rejected one of the learner's messages.
var ErrRejected = errors.New("rejected by the parameter server")

// MsgType is the kind of a message to a shard.
type MsgType uint8

const (
	// MsgPush delivers a gradient slice computed on weights stamped Clock.
	MsgPush MsgType = iota + 1
	// MsgPull asks for the weights once the shard clock is ≥ Clock.
	MsgPull
	// MsgJoin makes the learner an active member again; acknowledged.
	MsgJoin
	// MsgLeave removes the learner from the active members; acknowledged.
	MsgLeave
)

// MsgSnapshot is an evaluator's request for the weights of an epoch end
// (Clock: the epoch, as TypeSnapshot's Timestamp: see wire.go), which a
// client core sends. The shard server answers it, not the core:
// Shard.Step rejects it (ErrBadType).
const MsgSnapshot = MsgType(TypeSnapshot)

var msgTypeNames = [...]string{MsgPush: "push", MsgPull: "pull", MsgJoin: "join", MsgLeave: "leave", MsgSnapshot: "snapshot"}

// String returns "push", "pull", "join", "leave" or "snapshot".
func (t MsgType) String() string {
	if int(t) < len(msgTypeNames) && msgTypeNames[t] != "" {
		return msgTypeNames[t]
	}
	return fmt.Sprintf("MsgType(%d)", uint8(t))
}

// Msg is one message from a learner to a shard.
type Msg struct {
	Type    MsgType
	Job     uint32
	Shard   int
	Learner uint32
	Seq     uint64 // push: sequence, strictly increasing per learner; pull: echoed in the reply
	Clock   uint64 // push: stamp j of the weights the gradient was computed on; pull: minimum clock
	// Batch (push) is the job-wide id of the mini-batch the gradient
	// comes from: its index in the job's sequence of mini-batches + 1. A
	// shard accepts at most one gradient per id (see "Exactly once" in
	// the package doc); 0 is no id: no such check.
	Batch uint64
	// Life (push) is the life of the shard whose weights the gradient
	// was computed on (Reply.Life of the pull); a push of another life
	// is given up (see "Exactly once" in the package doc). 0: unknown,
	// no such check.
	Life uint64
	Grad []float32 // push: the gradient for the shard's range; read during Step only, never retained
}

// Reply is one message from a shard to a learner: weights, an
// acknowledgement, or an error.
type Reply struct {
	To    uint32 // learner id (for an error: the id the rejected message claimed)
	Seq   uint64 // the Seq of the pull or rejected message it answers
	Clock uint64 // the stamp i of Weights; for an error, the shard clock
	Life  uint64 // the shard's life (see Shard.Life)
	// Weights is a read-only view of the shard's weights, valid until the
	// next Step: the caller must encode or copy it before stepping again.
	// Nil for an acknowledgement or an error.
	Weights []float32
	// Ack marks an acknowledgement of the MsgJoin or MsgLeave Seq: no
	// weights, no error. Like an error, it answers the message of the
	// same Step.
	Ack bool
	// Err is the rejection, wrapping one of the Err* values; nil for
	// weights. An error always answers the message of the same Step, so
	// the caller sends it back where that message came from.
	Err error
}

// Update describes one update applied by the core: the solver's report
// (c, rate, mean rate, staleness of the combined gradients) and where it
// happened.
type Update struct {
	Clock uint64 // the clock after the update (i+1)
	Epoch int    // epoch used by the schedule
	sgd.UpdateInfo
	// Learners lists the learner of each of the update's gradients, in
	// the order they arrived (a learner may appear more than once under
	// softsync): those a refused update (UpdateInfo.Refused) counts in
	// Stats.RefusedGradients. A view valid until the next Step.
	Learners []uint32
}

// Ready is the output of one Step: replies to send, in order, and the
// updates applied or refused (at most one per Step). Its slices are reused
// by the next Step.
type Ready struct {
	Replies []Reply
	Updates []Update
}
