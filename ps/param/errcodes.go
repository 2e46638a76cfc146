package param

import "github.com/softsync/softsync/rdma/errcode"

// The code of this package's sentinel, which the solver (ps/sgd), the
// parameter server, the networks and the jobs return for a configuration,
// for errors that cross processes (package errcode; docs/wire.md lists
// every code).
func init() {
	errcode.Register("param.invalid_config", ErrInvalidConfig)
}
