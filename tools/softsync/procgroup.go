package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/softsync/softsync/ps/checkpoint"
	"github.com/softsync/softsync/tools/bench"
)

// procGroup runs the processes of a launched job (the head, shard servers,
// learners) and starts dead ones again. Each runs in a process group of
// its own, so that the terminal's Ctrl-C reaches launch alone (which
// passes it to the head), and gets SIGTERM when launch dies.
type procGroup struct {
	app      *App
	self     []string // the command line that runs softsync
	secret   []byte
	out      *lineWriter
	mu       sync.Mutex
	restarts int    // left
	ckptDir  string // the job's checkpoints: a restarted shard server or head resumes from them
	ended    string // the head creates this file once it wrote the job's outputs (--ended-file)
	running  map[*proc]*exec.Cmd
	ending   bool
	wg       sync.WaitGroup
	// pin, when set, gives the CPUs each process runs on (startOn);
	// nil or an empty set: every CPU.
	pin func(role string, id int) []int
	// headOut, when set, takes the head's standard output (its report)
	// in place of launch's.
	headOut io.Writer
}

// proc is one process of the job, through its restarts.
type proc struct {
	role string // "eval" (the head), "ps" or "learner"
	id   int
	name string
	args []string
	cpus []int // its CPU affinity; empty: every CPU
	// peakRSS is the largest peak resident set of its runs, in bytes,
	// and cpu the CPU time of all its runs, in seconds (under
	// procGroup.mu).
	peakRSS int64
	cpu     float64
	// end receives its last exit (nil: status 0), once it is not
	// started again.
	end chan error
}

// start starts the process of role and id with args and watches it.
func (g *procGroup) start(ctx context.Context, role string, id int, args []string) *proc {
	p := &proc{role: role, id: id, args: args, end: make(chan error, 1)}
	switch role {
	case "eval":
		p.name = "head"
	case "ps":
		p.name = fmt.Sprintf("shard server %d", id)
	default:
		p.name = fmt.Sprintf("learner %d", id)
	}
	if g.pin != nil {
		p.cpus = g.pin(role, id)
	}
	g.run(ctx, p)
	return p
}

// run starts p once and, when it ends, starts it again if it should.
func (g *procGroup) run(ctx context.Context, p *proc) {
	args := p.args
	if p.role != "eval" {
		args = append([]string{"--id", strconv.Itoa(p.id)}, args...)
	}
	cmd := exec.Command(g.self[0], slices.Concat(g.self[1:], []string{p.role}, args)...)
	cmd.Env = append(os.Environ(), secretEnv+"="+string(g.secret))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	var pw io.WriteCloser
	if p.role == "eval" {
		cmd.Stdout, cmd.Stderr = cmp.Or(g.headOut, io.Writer(os.Stdout)), os.Stderr // its report and its progress
	} else {
		pw = g.out.prefixed("[" + p.name + "] ")
		cmd.Stdout, cmd.Stderr = pw, pw
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ending {
		p.end <- errors.New("not started: the job is over")
		return
	}
	if err := startOn(cmd, p.cpus); err != nil {
		g.app.Log.Error("cannot start a process of the job", "process", p.name, "err", err)
		p.end <- err
		return
	}
	if g.running == nil {
		g.running = map[*proc]*exec.Cmd{}
	}
	g.running[p] = cmd
	g.wg.Go(func() {
		peak, cpu, err := waitUsage(cmd)
		if pw != nil {
			pw.Close()
		}
		if err != nil && p.role == "eval" {
			if ok, endErr := g.endedHead(); ok {
				g.app.Log.Warn("the head died after it wrote the job's outputs: not started again", "err", err)
				err = endErr
			}
		}
		g.mu.Lock()
		delete(g.running, p)
		p.peakRSS, p.cpu = max(p.peakRSS, peak), p.cpu+cpu
		again := err != nil && !g.ending && g.restarts > 0 && ctx.Err() == nil && restartable(p.role, err)
		if again {
			g.restarts--
		}
		ending := g.ending
		g.mu.Unlock()
		if err != nil && !ending {
			g.app.Log.Warn("a process of the job ended", "process", p.name, "err", err, "restarting", again)
		}
		if !again {
			p.end <- err
			return
		}
		if p.role != "learner" && g.ckptDir != "" && !slices.Contains(p.args, "--resume") && hasCheckpoint(g.ckptDir) {
			p.args = append(slices.Clone(p.args), "--resume", g.ckptDir)
		}
		g.run(ctx, p)
	})
}

// endedHead reports whether the head wrote the job's outputs before it
// ended (the file g.ended exists), and the error it had then, if any.
func (g *procGroup) endedHead() (bool, error) {
	if g.ended == "" {
		return false, nil
	}
	b, err := os.ReadFile(g.ended)
	switch {
	case err != nil:
		return false, nil
	case len(b) > 0:
		return true, errors.New(string(b))
	}
	return true, nil
}

// restartable reports whether a process of role that ended with err is
// started again: a learner whatever its error (a new incarnation), a
// shard server or the head when it crashed (killed by a signal, or any
// status but 1, the status of an error of the job, which a restart would
// not mend).
func restartable(role string, err error) bool {
	if role == "learner" {
		return true
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return true
	}
	return ee.ExitCode() != 1
}

// hasCheckpoint reports whether dir holds a complete checkpoint version.
func hasCheckpoint(dir string) bool {
	store, err := checkpoint.Open(dir)
	if err != nil {
		return false
	}
	_, _, err = store.Latest(nil)
	return err == nil
}

// signal sends sig to p's process, if it runs.
func (g *procGroup) signal(p *proc, sig syscall.Signal) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if cmd := g.running[p]; cmd != nil {
		cmd.Process.Signal(sig)
	}
}

// wait waits for p's last exit, restarts included: nil for status 0,
// else an exitStatus.
func (g *procGroup) wait(ctx context.Context, p *proc) error {
	err := <-p.end
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		return exitStatus{name: p.name, code: max(ee.ExitCode(), 1), state: ee.String()}
	}
	return fmt.Errorf("%s: %w", p.name, err)
}

// exitStatus is the failure of a launched job's head: launch exits with
// its status.
type exitStatus struct {
	name  string
	code  int
	state string
}

func (e exitStatus) Error() string { return fmt.Sprintf("the job's %s ended: %s", e.name, e.state) }

// stop waits for the processes to end (the coordinator told them to),
// sends SIGTERM to those still running after a grace period (2 s if the
// job failed, at once when ctx ends: launch was interrupted), and kills
// those still running 3 s later.
func (g *procGroup) stop(ctx context.Context, failed bool) {
	g.mu.Lock()
	g.ending = true
	g.mu.Unlock()
	grace := 10 * time.Second
	if failed {
		grace = 2 * time.Second
	}
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-ctx.Done():
	case <-time.After(grace):
	}
	g.each(func(cmd *exec.Cmd) { cmd.Process.Signal(syscall.SIGTERM) })
	select {
	case <-done:
	case <-time.After(3 * time.Second): // within an interrupted launch's own stopGrace
		g.each(func(cmd *exec.Cmd) { cmd.Process.Kill() })
		<-done
	}
}

// usage returns the peak resident set of each of procs, as far as they
// have ended.
func (g *procGroup) usage(procs []*proc) []bench.ProcUsage {
	g.mu.Lock()
	defer g.mu.Unlock()
	u := make([]bench.ProcUsage, len(procs))
	for i, p := range procs {
		u[i] = bench.ProcUsage{Process: p.name, CPUs: p.cpus, PeakRSS: p.peakRSS, CPUSeconds: p.cpu}
	}
	return u
}

func (g *procGroup) each(f func(*exec.Cmd)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, cmd := range g.running {
		f(cmd)
	}
}

// lineWriter writes whole lines from several sources to w, each line on
// a line of its own even when a progress bar is drawn on w.
type lineWriter struct {
	mu  sync.Mutex
	w   io.Writer
	tty bool // clear the line first (a progress bar may be on it)
}

// prefixed returns a writer whose lines go to l prefixed with prefix; Close
// flushes a last unterminated line.
func (l *lineWriter) prefixed(prefix string) io.WriteCloser {
	r, w := io.Pipe()
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			l.mu.Lock()
			if l.tty {
				fmt.Fprint(l.w, "\r\x1b[K")
			}
			fmt.Fprintf(l.w, "%s%s\n", prefix, sc.Text())
			l.mu.Unlock()
		}
		r.CloseWithError(errors.New("closed"))
	}()
	return w
}
