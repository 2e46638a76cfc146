//go:build simdefects

package ps

// This file exists in the builds of the chaos simulator's defect tests
// only (build tag simdefects): they put a defect that was fixed back and
// check that the simulator finds it.

// revertRestoredRound puts back a defect of hardsync recovery: a round in
// progress in a shard's checkpoint stays open after Restore, and a
// learner that rejoins with its round's gradient does not end a round it
// completes.
var revertRestoredRound bool

// RevertRestoredRound puts the defect back (on) or removes it.
func RevertRestoredRound(on bool) { revertRestoredRound = on }
