//go:build !simdefects

package cluster

// revertResultAfterStop is false in every build but the chaos simulator's
// defect tests (build tag simdefects, see revert.go).
const revertResultAfterStop = false
