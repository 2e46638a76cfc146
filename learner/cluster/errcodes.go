package cluster

import "github.com/softsync/softsync/rdma/errcode"

// The codes of the roles' sentinels, for errors that cross processes: a
// failure, a stop and a checkpoint report carry an error with its codes
// (control.go; package errcode; docs/wire.md lists every code).
func init() {
	errcode.Register("cluster.protocol", ErrProtocol)
	errcode.Register("cluster.rendezvous", ErrRendezvous)
	errcode.Register("cluster.job_failed", ErrJobFailed)
	errcode.Register("cluster.interrupted", ErrInterrupted)
	errcode.Register("cluster.topology", ErrTopology)
	errcode.Register("cluster.no_memory", ErrNoMemory)
}
