package main

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
)

// allowedCPUs returns the CPUs this process may run on (its affinity
// mask: a cpuset or taskset may give fewer than the machine has), in
// increasing order.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("the CPUs this process may use: %w", err)
	}
	var cpus []int
	for c := range len(set) * 64 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// startOn starts cmd with its CPU affinity set to cpus (every CPU this
// process may use when cpus is empty). The mask is set on the OS thread
// that forks the child, which the child inherits before it runs a single
// instruction, so every thread it ever starts is pinned too; the thread's
// own mask is restored afterwards.
func startOn(cmd *exec.Cmd, cpus []int) error {
	if len(cpus) == 0 {
		return cmd.Start()
	}
	var set unix.CPUSet
	for _, c := range cpus {
		if c < 0 || c >= len(set)*64 {
			return fmt.Errorf("pinning to CPUs %v: no CPU %d", cpus, c)
		}
		set.Set(c)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return fmt.Errorf("pinning to CPUs %v: %w", cpus, err)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pinning to CPUs %v: %w", cpus, err)
	}
	err := cmd.Start()
	if rerr := unix.SchedSetaffinity(0, &old); rerr != nil {
		err = errors.Join(err, fmt.Errorf("restoring the CPU affinity after starting a process: %w", rerr))
	}
	return err
}

// addBindFlag adds --bind, softsync launch's placement of its processes.
func addBindFlag(fs *pflag.FlagSet, bind *string) {
	fs.StringVar(bind, "bind", "learners", "learners: pin learner i to the i-th of λ equal blocks of the CPUs launch may use (when there are at least λ), the head and the shard servers run anywhere; none: leave every process to the scheduler")
}

// checkBind refuses a --bind value other than learners and none.
func checkBind(bind string) error {
	if bind != "learners" && bind != "none" {
		return fmt.Errorf("--bind: %q, want learners or none", bind)
	}
	return nil
}

// bindLearners returns the CPUs of each process for --bind: learner i
// gets the i-th of λ equal blocks of the CPUs this process may use, whole
// physical cores where they divide evenly (coreOrder; the remainder
// unused), so that learners share no core when there are enough and the
// scheduler never moves one onto another's; the head and the shard
// servers, which run briefly at every step, get every CPU. With more
// learners than CPUs, or --bind none, it returns nil: no process is
// pinned.
func bindLearners(app *App, bind string, learners int) (func(role string, id int) []int, error) {
	if err := checkBind(bind); err != nil || bind == "none" {
		return nil, err
	}
	cpus, err := allowedCPUs()
	if err != nil {
		return nil, err
	}
	blocks := learnerBlocks(coreOrder(cpus, sysTopology), learners)
	if blocks == nil {
		app.Log.Info("learners not pinned: more learners than CPUs", "learners", learners, "cpus", len(cpus))
		return nil, nil
	}
	return func(role string, id int) []int {
		if role != "learner" || id < 0 || id >= len(blocks) {
			return nil
		}
		return blocks[id]
	}, nil
}

// coreOrder returns cpus ordered by package, then physical core, then
// number, as topo reports them, so that the logical CPUs of one core (SMT
// siblings, often numbered c and c + N/2) are next to each other and an
// equal split gives each block whole cores. A CPU whose topology topo
// cannot tell is a core of its own, after the others.
func coreOrder(cpus []int, topo func(cpu int) (pkg, core int, ok bool)) []int {
	type place struct{ known, pkg, core, cpu int } // known: 0 if topo told, else 1
	ps := make([]place, len(cpus))
	for i, c := range cpus {
		pkg, core, ok := topo(c)
		ps[i] = place{pkg: pkg, core: core, cpu: c}
		if !ok {
			ps[i] = place{known: 1, core: c, cpu: c}
		}
	}
	slices.SortStableFunc(ps, func(a, b place) int {
		return cmp.Or(cmp.Compare(a.known, b.known), cmp.Compare(a.pkg, b.pkg), cmp.Compare(a.core, b.core), cmp.Compare(a.cpu, b.cpu))
	})
	out := make([]int, len(ps))
	for i, p := range ps {
		out[i] = p.cpu
	}
	return out
}

// sysTopology reads a CPU's package and core ids from sysfs.
func sysTopology(cpu int) (pkg, core int, ok bool) {
	read := func(name string) (int, bool) {
		b, err := os.ReadFile(fmt.Sprintf("/sys/devices/system/cpu/cpu%d/topology/%s", cpu, name))
		if err != nil {
			return 0, false
		}
		v, err := strconv.Atoi(strings.TrimSpace(string(b)))
		return v, err == nil
	}
	pkg, ok1 := read("physical_package_id")
	core, ok2 := read("core_id")
	return pkg, core, ok1 && ok2
}

// learnerBlocks splits cpus into n equal blocks, in order (nil for more
// learners than CPUs).
func learnerBlocks(cpus []int, n int) [][]int {
	if n < 1 || n > len(cpus) {
		return nil
	}
	k := len(cpus) / n
	blocks := make([][]int, n)
	for i := range blocks {
		blocks[i] = cpus[i*k : (i+1)*k : (i+1)*k]
	}
	return blocks
}
