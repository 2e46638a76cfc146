package ps

import "github.com/softsync/softsync/rdma/errcode"

// The codes of the parameter server's sentinels (the rejection reasons a
// shard sends a learner, and the client's own), for errors that cross
// processes (package errcode; docs/wire.md lists every code). A shard's
// error reply carries them (rdma.NewErrorMsg).
func init() {
	errcode.Register("ps.wrong_job", ErrWrongJob)
	errcode.Register("ps.wrong_shard", ErrWrongShard)
	errcode.Register("ps.unknown_learner", ErrUnknownLearner)
	errcode.Register("ps.bad_type", ErrBadType)
	errcode.Register("ps.bad_length", ErrBadLength)
	errcode.Register("ps.future_clock", ErrFutureClock)
	errcode.Register("ps.non_finite", ErrNonFinite)
	errcode.Register("ps.already_pushed", ErrAlreadyPushed)
	errcode.Register("ps.diverged", ErrDiverged)
	errcode.Register("ps.refused", ErrRefused)
	errcode.Register("ps.not_hosted", ErrNotHosted)
	errcode.Register("ps.rejected", ErrRejected)
	errcode.Register("ps.seq_exhausted", ErrSeqExhausted)
}
