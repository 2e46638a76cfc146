//go:build simdefects

package cluster

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/rdma"
)

// TestChaosSimFindsDefects puts back, one at a time, four defects that
// 20-run loops of multi-process jobs found and a simulator of models of
// the roles did not, and checks that the chaos simulator finds each
// within the seeds TestChaosSim runs (-chaos.seeds): a seed that fails or
// hangs. Each names the fix it guards. It needs the build tag simdefects
// (make test runs it: make chaos-defects), which makes the knobs that put
// the defects back exist.
func TestChaosSimFindsDefects(t *testing.T) {
	for _, d := range []struct {
		name string
		fix  string // the fix it guards, by its commit's subject
		// on puts the defect back (off removes it): in the job's
		// simulator, or in the code that ships (build tag simdefects).
		on     func(j *simJob)
		global func(on bool)
	}{
		{
			name: "a request lost with a replaced connection",
			fix:  "ps: a join, leave, pull or snapshot request lost with a replaced connection goes again, to every shard of the link",
			on:   func(j *simJob) { j.restore = lostRequests },
		},
		{
			name:   "a head killed after its report",
			fix:    "The head writes the job's outputs before the processes are told to stop; launch does not restart a head that died after writing them",
			global: func(on bool) { revertResultAfterStop = on },
		},
		{
			name: "a connect reset from a dying head",
			fix:  "rdma: a connect reset by the peer is ErrRefused, which dialers try again",
			on:   func(j *simJob) { j.w.connectError = refusedOnly },
		},
		{
			name:   "a hardsync round never closed after a shard server's restart",
			fix:    "ps: a hardsync learner that rejoins with its round's gradient ends a round it completes; ps: Restore closes a hardsync round in progress",
			global: ps.RevertRestoredRound,
		},
	} {
		t.Run(d.name, func(t *testing.T) {
			if d.global != nil {
				d.global(true)
				defer d.global(false)
			}
			// Seeds in batches, in order, until one finds the defect.
			const batch = 16
			for first := 1; first <= *chaosSeeds; first += batch {
				var seeds []uint64
				for s := first; s < first+batch && s <= *chaosSeeds; s++ {
					seeds = append(seeds, uint64(s))
				}
				if *chaosSeed != 0 {
					seeds = []uint64{*chaosSeed}
				}
				for _, o := range runSims(seeds, false, d.on) {
					if o.err != nil && *chaosSeed != 0 {
						t.Errorf("seed %d finds it: %v\n%s", o.seed, o.err, o.describe)
						return
					}
					if o.err == nil {
						continue
					}
					// The seed must pass with the fix: else it found
					// something else.
					if d.global != nil {
						d.global(false)
					}
					again := runSims([]uint64{o.seed}, false, nil)[0]
					if d.global != nil {
						d.global(true)
					}
					if again.err != nil {
						t.Logf("seed %d fails with the fix too (%v): not this defect's", o.seed, again.err)
						continue
					}
					t.Logf("seed %d finds it (guarding %q): %v\n%s\nreplay: %s", o.seed, d.fix, o.err, o.describe, defectCommand(o.seed))
					return
				}
				if *chaosSeed != 0 {
					return
				}
			}
			if *chaosSeed == 0 {
				t.Errorf("no seed of 1…%d finds the defect the fix %q removed", *chaosSeeds, d.fix)
			}
		})
	}
}

// defectCommand is the command that replays seed with the defects' knobs.
func defectCommand(seed uint64) string {
	return fmt.Sprintf("go test -tags simdefects ./learner/cluster/ -run '^TestChaosSimFindsDefects$' -v -args -chaos.seed %d", seed)
}

// lostRequests is what a client sent on a replaced connection before the
// fix: the joins of a member and the unacknowledged pushes, but not the
// join, leave or snapshot request of the call in progress, which went
// with the old connection (the call then waited for an answer that could
// not come).
func lostRequests(rd ps.ClientReady) ps.ClientReady {
	joined := map[int]bool{}
	var kept []ps.Send
	for _, s := range rd.Sends {
		switch s.Msg.Type {
		case ps.MsgLeave, ps.MsgSnapshot:
			continue
		case ps.MsgJoin:
			if joined[s.Msg.Shard] {
				continue // the second join of a shard is the call's request
			}
			joined[s.Msg.Shard] = true
		}
		kept = append(kept, s)
	}
	rd.Sends = kept
	return rd
}

// refusedOnly is the classification of a failed connect before the fix:
// only a refused one (nothing listens) may pass; a reset one (the
// listener went away while the connection was pending) is final.
func refusedOnly(err error) error {
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
		return rdma.ConnectError(err)
	}
	return err
}
