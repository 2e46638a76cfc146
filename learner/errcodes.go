package learner

import "github.com/softsync/softsync/rdma/errcode"

// The codes of the learner's sentinels, for errors that cross processes: a
// learner's failure reaches the coordinator with them (package errcode;
// docs/wire.md lists every code).
func init() {
	errcode.Register("learner.diverged", ErrDiverged)
	errcode.Register("learner.weights_format", ErrWeightsFormat)
	errcode.Register("learner.weights_checksum", ErrWeightsChecksum)
	errcode.Register("learner.weights_mismatch", ErrWeightsMismatch)
	errcode.Register("learner.weights_non_finite", ErrWeightsNonFinite)
}
