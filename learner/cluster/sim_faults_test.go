package cluster

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/softsync/softsync/ps"
)

// The faults of a seeded run: processes killed at a message, at a time
// or while the head writes the job's outputs, and started again by the
// launcher after a pause (or not: then the job may fail, with
// ErrJobFailed); processes paused (SIGSTOP) for longer than the
// heartbeat; connections reset; links slow or lossy for a while; the
// disk full while checkpoints are written; the user's interruption, and
// the job resumed from its checkpoint, on as many shards or another
// number; a shard server told to stop (SIGTERM), which checkpoints first.
type simFaults struct {
	kills     []*simKill
	pauses    []simPause
	resets    int // connections reset at random, at most
	resetP    float64
	links     []simLinkFault
	diskFull  [][2]time.Duration
	interrupt time.Duration // 0: none
	term      *simKill      // a shard server told to stop
	noRestart map[int]bool
	// divergeFrom: from this mini-batch id on (0: none), every gradient
	// is 10³⁸ in each element, so that the weights and momentum outgrow
	// float32: the shards refuse the updates that would overflow, and
	// after RefusedLimit in a row the job ends as diverged.
	divergeFrom uint64
	// expectFail: the job may fail (a process is not started again), as
	// ErrJobFailed.
	expectFail bool
	why        string
	maxDelay   time.Duration
}

type simKill struct {
	proc     int
	atMsg    int           // at that delivered message (0: not)
	atTime   time.Duration // at that time (0: not)
	atResult bool          // while the head writes the job's outputs
	offset   time.Duration // atResult: after it started
	done     bool
}

type simPause struct {
	proc  int
	at, d time.Duration
}

type simLinkFault struct {
	at, d    time.Duration
	slowBy   int // 0: lossy
	from, to int
}

// drawFaults draws a run's faults. The job's length is estimated so that
// the faults land within it.
func drawFaults(j *simJob) simFaults {
	w, rng := j.w, j.w.rng
	n := len(j.procs)
	length := 100*time.Millisecond + time.Duration(j.batches/j.cfg.Learners)*(j.compute*3/2+3*time.Millisecond)
	f := simFaults{noRestart: map[int]bool{}, maxDelay: time.Duration(rng.IntN(3000)) * time.Millisecond}
	for range rng.IntN(3) {
		k := &simKill{proc: rng.IntN(n)}
		switch rng.IntN(3) {
		case 0:
			// At a message the process takes: what it sent in answer is
			// on its way, and the last of it may be cut.
			r := j.topo.Processes[k.proc]
			n := 20 + 2*j.batches*(len(r.Servers)+len(r.Learners)*j.cfg.Shards/j.cfg.Learners)
			if r.Coordinator {
				n += 2 * j.batches
			}
			k.atMsg = 1 + rng.IntN(n)
		case 1:
			k.atTime = w.between(time.Millisecond, length)
		default:
			k.proc, k.atResult, k.offset = 0, true, w.between(0, 400*time.Millisecond)
		}
		f.kills = append(f.kills, k)
	}
	if len(f.kills) > 0 && rng.IntN(12) == 0 {
		p := f.kills[0].proc
		if r := j.topo.Processes[p]; len(r.Learners) == 0 {
			f.noRestart[p], f.expectFail = true, true
			f.why = fmt.Sprintf("process %d is not started again", p)
		}
	}
	for range rng.IntN(3) {
		if rng.IntN(2) == 0 {
			f.pauses = append(f.pauses, simPause{proc: rng.IntN(n), at: w.between(0, length), d: w.between(100*time.Millisecond, 2*j.cfg.Heartbeat)})
		}
	}
	if rng.IntN(2) == 0 {
		f.resets, f.resetP = 1+rng.IntN(3), 0.003
	}
	for range rng.IntN(3) {
		lf := simLinkFault{at: w.between(0, length), d: w.between(10*time.Millisecond, time.Second), from: rng.IntN(n), to: rng.IntN(n)}
		if rng.IntN(2) == 0 {
			lf.slowBy = 5 + rng.IntN(50)
		}
		f.links = append(f.links, lf)
	}
	if j.ckpts && rng.IntN(4) == 0 {
		at := w.between(0, length)
		f.diskFull = append(f.diskFull, [2]time.Duration{at, at + w.between(10*time.Millisecond, length)})
	}
	if j.ckpts && rng.IntN(6) == 0 {
		f.interrupt = w.between(length/4, length)
		j.interrupted = true
		if rng.IntN(2) == 0 {
			j.resumeShards = j.cfg.Shards
		} else {
			j.resumeShards = 1 + rng.IntN(3)
		}
		j.resumeShards = min(j.resumeShards, j.total)
	}
	// A shard server's SIGTERM checkpoints its shards where they are: a
	// hardsync round in progress with several learners is where a
	// restored shard's rounds go wrong, and is drawn more often.
	termOdds := 8
	if j.cfg.Protocol == ps.Hardsync && j.cfg.Learners > 1 {
		termOdds = 2
	}
	if j.ckpts && rng.IntN(termOdds) == 0 {
		var servers []int
		for i, r := range j.topo.Processes {
			if len(r.Servers) > 0 && !r.Coordinator {
				servers = append(servers, i)
			}
		}
		if len(servers) > 0 {
			f.term = &simKill{proc: servers[rng.IntN(len(servers))], atTime: w.between(0, length)}
		}
	}
	return f
}

// restartDelay is the pause before the launcher starts a process again.
func (f *simFaults) restartDelay(j *simJob) time.Duration { return j.w.between(0, f.maxDelay+1) }

// diskFull reports whether the disk is full now.
func (j *simJob) diskFull() bool {
	for _, d := range j.faults.diskFull {
		if j.w.now >= d[0] && j.w.now < d[1] {
			return true
		}
	}
	return false
}

// arm schedules the faults of the run.
func (j *simJob) arm() {
	w, f := j.w, &j.faults
	for _, k := range f.kills {
		if k.atTime > 0 {
			w.at(k.atTime, nil, func() { j.fire(k) })
		}
	}
	for _, pa := range f.pauses {
		w.at(pa.at, nil, func() {
			p := j.procs[pa.proc]
			w.note(p, "pause", []uint64{uint64(pa.d)}, nil, func() string { return fmt.Sprintf("for %v", pa.d) })
			p.pause(pa.d)
		})
	}
	for _, lf := range f.links {
		w.at(lf.at, nil, func() {
			l := w.link(j.procs[lf.from], j.procs[lf.to])
			if lf.slowBy > 0 {
				l.slowUntil, l.slowBy = w.now+lf.d, lf.slowBy
			} else {
				l.lossyTill = w.now + lf.d
			}
			w.note(nil, "link", []uint64{uint64(lf.from), uint64(lf.to), uint64(lf.slowBy), uint64(lf.d)}, nil, nil)
		})
	}
	if f.interrupt > 0 {
		j.signal(f.interrupt, j.procs[0], func() { // SIGINT
			if h := j.head; h != nil && h.p.alive && !h.over {
				w.note(h.p, "interrupt", nil, nil, nil)
				j.interruptLife, j.interruptedEarly = h.p.life, !h.coord.core.started
				h.interrupt()
			} else {
				j.interrupted = false // it came too late
			}
		})
	}
	if t := f.term; t != nil {
		p := j.procs[t.proc]
		j.signal(t.atTime, p, func() { // SIGTERM
			if !p.alive {
				return
			}
			w.note(p, "term", nil, nil, nil)
			p.termed = true
			for _, k := range j.topo.Processes[t.proc].Servers {
				if s := j.servers[k]; s != nil && s.p == p {
					s.stop()
				}
			}
		})
	}
	w.onDeliver = func(e *simEnd) {
		for _, k := range f.kills {
			if k.atMsg > 0 && !k.done && e.p == j.procs[k.proc] && e.p.received >= k.atMsg {
				j.fire(k)
			}
		}
		if f.resets > 0 && w.chance(f.resetP) && !e.c.link.local {
			f.resets--
			e.c.reset(w)
		}
	}
}

// signal delivers a signal to p at t, whatever its life then: p takes it
// when it runs (once it resumes, if paused).
func (j *simJob) signal(t time.Duration, p *simProc, f func()) {
	j.w.at(t, nil, func() {
		if p.alive {
			j.w.at(j.w.now, p, f)
		}
	})
}

// fire carries out kill k, once, if its process runs.
func (j *simJob) fire(k *simKill) {
	if k.done {
		return
	}
	k.done = true
	if p := j.procs[k.proc]; p.alive {
		j.kill(p)
	}
}

// onResult fires the kills that land while the head writes the job's
// outputs.
func (j *simJob) onResult(h *simHead) {
	for _, k := range j.faults.kills {
		if k.atResult && !k.done {
			j.w.at(j.w.now+k.offset, nil, func() { j.fire(k) })
		}
	}
}

func (f *simFaults) describe() string {
	var out []string
	for _, k := range f.kills {
		switch {
		case k.atMsg > 0:
			out = append(out, fmt.Sprintf("kill process %d at its message %d", k.proc, k.atMsg))
		case k.atTime > 0:
			out = append(out, fmt.Sprintf("kill process %d at %v", k.proc, k.atTime))
		default:
			out = append(out, fmt.Sprintf("kill the head %v into its outputs", k.offset))
		}
	}
	for p := range f.noRestart {
		out = append(out, fmt.Sprintf("process %d not restarted", p))
	}
	for _, pa := range f.pauses {
		out = append(out, fmt.Sprintf("pause process %d at %v for %v", pa.proc, pa.at, pa.d))
	}
	if f.resets > 0 {
		out = append(out, fmt.Sprintf("%d resets", f.resets))
	}
	for _, lf := range f.links {
		what := "lossy"
		if lf.slowBy > 0 {
			what = fmt.Sprintf("%d× slower", lf.slowBy)
		}
		out = append(out, fmt.Sprintf("link %d–%d %s at %v for %v", lf.from, lf.to, what, lf.at, lf.d))
	}
	for _, d := range f.diskFull {
		out = append(out, fmt.Sprintf("disk full %v–%v", d[0], d[1]))
	}
	if f.divergeFrom > 0 {
		out = append(out, fmt.Sprintf("gradients overflow from mini-batch %d", f.divergeFrom))
	}
	if f.interrupt > 0 {
		out = append(out, fmt.Sprintf("interrupt at %v", f.interrupt))
	}
	if f.term != nil {
		out = append(out, fmt.Sprintf("SIGTERM process %d at %v", f.term.proc, f.term.atTime))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// Process ends.

// roleEnded records that a role of p ended with err: a role that failed
// for itself (not the job's failure or interruption) ends the process's
// other roles (Job.fail); the process exits once all have ended, with
// the failure that explains the others (Job.cause).
func (p *simProc) roleEnded(name string, err error) {
	if !p.alive {
		return
	}
	p.w.note(p, "role-end", nil, []byte(name), func() string { return fmt.Sprintf("%s: %v", name, err) })
	p.roles--
	if err != nil {
		p.errs = append(p.errs, err)
	}
	cancel := err != nil && !errors.Is(err, ErrJobFailed) && !errors.Is(err, ErrInterrupted)
	if p.roles > 0 && !cancel {
		return
	}
	if p.busyUntil > p.w.now {
		// The process ends once it is done with what it works on (the
		// head writing the job's outputs, within OnResult).
		p.roles++
		p.w.at(p.busyUntil, p, func() { p.roleEnded("work", nil) })
		return
	}
	var cause error
	for _, e := range p.errs {
		if !errors.Is(e, ErrJobFailed) && !errors.Is(e, ErrInterrupted) {
			cause = e
			break
		}
	}
	if cause == nil && len(p.errs) > 0 {
		cause = p.errs[0]
	}
	p.die(false)
	p.onEnd(p, cause, false)
}
