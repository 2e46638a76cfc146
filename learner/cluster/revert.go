//go:build simdefects

package cluster

// This file exists in the builds of the chaos simulator's defect tests
// only (build tag simdefects): they put a defect that was fixed back and
// check that the simulator finds it (chaos_defects_test.go).

// revertResultAfterStop puts back a defect of the coordinator's runtime:
// the job's result goes to OnResult after the stop went out to every
// process, so that a head killed while it writes the job's outputs is
// started again with nobody left.
var revertResultAfterStop bool
