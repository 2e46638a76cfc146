//go:build !simdefects

package ps

// revertRestoredRound is false in every build but the chaos simulator's
// defect tests (build tag simdefects, see revert.go).
const revertRestoredRound = false
