package checkpoint

import "github.com/softsync/softsync/rdma/errcode"

// The codes of this package's sentinels, which a shard server's checkpoint
// report may carry to the coordinator (package errcode; docs/wire.md lists
// every code).
func init() {
	errcode.Register("checkpoint.format", ErrFormat)
	errcode.Register("checkpoint.checksum", ErrChecksum)
	errcode.Register("checkpoint.mismatch", ErrMismatch)
	errcode.Register("checkpoint.partial", ErrPartial)
	errcode.Register("checkpoint.committed", ErrCommitted)
	errcode.Register("checkpoint.none", ErrNone)
	errcode.Register("checkpoint.prune", ErrPrune)
}
