package cluster

import (
	"errors"
	"flag"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softsync/softsync/ps"
)

// The chaos simulator runs whole jobs in virtual time over the code that
// ships: each role's cores and the decisions of its runtime (the
// coordinator's core through Coordinator.apply, the shard servers'
// serverCore and ps.ServerCore, the learners' workerCore and
// ps.ClientCore, the evaluator's evalPlan, join's retry, rejoin and
// redial schedules, real checkpoint files through ps/checkpoint into an
// in-memory disk), driven by runtimes of the simulator's own over a
// seeded network, disk and clock (sim_*_test.go). The launcher restarts
// what it would (launch --restarts). Each seed draws a job (protocol,
// rule, learners, shards, topology, data, checkpoints) and its faults
// (kills and restarts at any message, pauses longer than the heartbeat,
// resets, slow and lossy links, a full disk, the user's interruption and
// a resume on another number of shards, a shard server told to stop), and
// the same seed gives the same run, bit for bit (its trace hash). Each
// seed's job also runs through the shipped runtimes themselves, every
// goroutine of StartProcess in testing/synctest's virtual time, with one
// fault from outside the code (sim_runtime_test.go); that pass
// reproduces the job and its fault plan from the seed, not the
// goroutines' interleaving.
//
// Each run is checked: it ends before a virtual deadline (else it hung),
// with every process ended; the job succeeds, or fails with ErrJobFailed
// where a process was not started again, or, interrupted, ends with
// ErrInterrupted and its result and resumes from its checkpoint to the
// end; every shard's final weights hold exactly one gradient of each
// mini-batch of the job, or none for a mini-batch the report gives up (a
// shard server restarted after the data was done); the shards' counters
// and the report say the same; no weight is NaN or infinite; the result's
// weights are the shards' final weights.

var (
	chaosSeeds = flag.Int("chaos.seeds", 300, "seeded jobs TestChaosSim runs (seeds 1…N; under the race detector 100 unless set)")
	chaosSeed  = flag.Uint64("chaos.seed", 0, "run this seed only (with -v: its trace)")
)

// raceSeeds is the number of seeds TestChaosSim runs under the race
// detector, which slows the simulator about seven times, unless
// -chaos.seeds is set: each seed runs on one goroutine, so the detector
// looks for what they share, which a hundred seeds exercise as well as
// the 300 of the native run (make test runs both).
const raceSeeds = 100

// seedCount is the number of seeds TestChaosSim runs.
func seedCount() int {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "chaos.seeds" })
	if raceDetector && !set {
		return raceSeeds
	}
	return *chaosSeeds
}

// chaosCommand is the command that replays seed.
func chaosCommand(seed uint64) string {
	return fmt.Sprintf("go test ./learner/cluster/ -run '^TestChaosSim$' -v -args -chaos.seed %d", seed)
}

// simOutcome is one run's end.
type simOutcome struct {
	seed     uint64
	err      error
	hash     uint64
	describe string
	trace    []string
}

// runSim runs seed's job (and, interrupted, the run that resumes it) and
// checks it; patch, if set, changes the job before it starts (a defect
// test).
func runSim(seed uint64, verbose bool, patch func(*simJob)) simOutcome {
	w := newSimWorld(seed, verbose)
	w.deadline = 30 * time.Minute
	j := newSimJob(w)
	if patch != nil {
		patch(j)
	}
	err := j.runPhase()
	if err == nil && j.interrupted {
		j.resume()
		err = j.runPhase()
	}
	return simOutcome{seed: seed, err: err, hash: w.trace.h.Sum64(), describe: j.describe(), trace: w.trace.lines}
}

// runPhase runs the job to its end and checks it.
func (j *simJob) runPhase() error {
	j.arm()
	j.start()
	if err := j.w.run(j.done); err != nil {
		return err
	}
	return j.check()
}

// resume makes the run that resumes an interrupted job from its
// checkpoint, on resumeShards shards: every process starts again with
// the checkpoint, no fault. Events of the first run still queued (a
// fault timed after its end) are dropped: they name its processes.
func (j *simJob) resume() {
	j.w.q = j.w.q[:0]
	j.cfg.Shards = j.resumeShards
	j.settings = j.cfg.Settings()
	j.procs, j.servers, j.finals = nil, map[int]*simServer{}, map[int]*ps.ServerShard[*simEnd]{}
	j.head, j.eval, j.allLives = nil, nil, nil
	j.over, j.endedHead, j.res, j.err, j.interrupted, j.ending = false, false, nil, nil, false, false
	j.phase = 2
	j.first, j.faults = j.faults, simFaults{noRestart: map[int]bool{}}
	if j.resumeShards != len(j.lives) {
		j.exact = false
	}
	j.w.note(nil, "resume", []uint64{uint64(j.resumeShards)}, nil, func() string { return fmt.Sprintf("on %d shards", j.resumeShards) })
	j.layoutProcesses()
}

// chaosKnown are seeds that fail for a cause found and not fixed yet:
// TestChaosSim counts them apart ("K known") unless run alone
// (-chaos.seed), and says when one passes.
var chaosKnown = map[uint64]string{}

// TestChaosSim runs the seeded jobs on every CPU, and their runtime
// passes beside them, and prints "chaos: N seeds (R through the
// runtimes), F failed, H hung, K known, S seeds/s"; each failure names
// the command that replays its seed.
func TestChaosSim(t *testing.T) {
	var seeds []uint64
	if *chaosSeed != 0 {
		seeds = append(seeds, *chaosSeed)
	} else {
		for i := range seedCount() {
			seeds = append(seeds, uint64(i+1))
		}
	}
	verbose := *chaosSeed != 0 && testing.Verbose()
	start := time.Now()
	rt := startRuntimes(t, seeds)
	outs := runSims(seeds, verbose, nil)
	failed, hung, known := 0, 0, 0
	for _, o := range outs {
		why, isKnown := chaosKnown[o.seed]
		isKnown = isKnown && *chaosSeed == 0
		switch {
		case isKnown && o.err != nil:
			known++
			t.Logf("seed %d, known (%s): %v", o.seed, why, o.err)
		case isKnown:
			t.Logf("seed %d, known (%s), passes now", o.seed, why)
		case errors.Is(o.err, errSimHung):
			hung++
			t.Errorf("seed %d hung: %s\nreproduce: %s", o.seed, o.describe, chaosCommand(o.seed))
		case o.err != nil:
			failed++
			t.Errorf("seed %d failed: %v\n%s\nreproduce: %s", o.seed, o.err, o.describe, chaosCommand(o.seed))
		}
		if verbose {
			t.Logf("seed %d: %s\n%s\ntrace hash %016x", o.seed, o.describe, strings.Join(o.trace, "\n"), o.hash)
		}
	}
	rtRuns, rtFailed, rtHung, rtKnown := rt.report(t, verbose)
	failed, hung, known = failed+rtFailed, hung+rtHung, known+rtKnown
	secs := time.Since(start).Seconds()
	fmt.Printf("chaos: %d seeds (%d through the runtimes), %d failed, %d hung, %d known, %.1f seeds/s\n", len(seeds), rtRuns, failed, hung, known, float64(len(seeds))/secs)
}

// runSims runs seeds on every CPU and returns their outcomes in order.
func runSims(seeds []uint64, verbose bool, patch func(*simJob)) []simOutcome {
	outs := make([]simOutcome, len(seeds))
	next := make(chan int)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := range next {
				outs[i] = runSim(seeds[i], verbose, patch)
			}
		})
	}
	for i := range seeds {
		next <- i
	}
	close(next)
	wg.Wait()
	return outs
}

// TestChaosSimReplays: a seed's run is the same, bit for bit, run again,
// alone or beside others, traced or not (its trace hash).
func TestChaosSimReplays(t *testing.T) {
	seeds := []uint64{1, 2, 3, 5, 8, 13, 21, 34}
	first := runSims(seeds, false, nil)
	for i, seed := range seeds {
		again := runSim(seed, i%2 == 0, nil)
		if again.hash != first[i].hash {
			t.Errorf("seed %d: trace hash %016x, then %016x", seed, first[i].hash, again.hash)
		}
	}
}
