package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/softsync/softsync/learner/cluster"
)

// This file plans a job's memory before anything is allocated
// (cluster.Config.Memory) and refuses a job whose processes on this host
// would not fit the memory it has available.

// planMemory computes the memory plan of the job cfg for the topology of
// this command (f.topo; a job in one process without one), keeps it in
// cfg.Planned for the report, prints it and stops with --memory-plan, and
// refuses the job, unless --skip-memory-check, when the processes that
// run on this host (f.here) need more than it has available. It runs
// before the weights, the checkpoint or the data are read, after the
// engine is made in the processes that compute (cfg.Engine, whose
// workspace it counts; without one, the workspace is estimated).
func (app *App) planMemory(f *trainFlags, cfg *cluster.Config) error {
	t, here := cluster.InProcess(f.learners, f.shards), []int{0}
	if f.topo != nil {
		t, here = *f.topo, f.here
	}
	// Data this host lacks is planned as none: the roles that read it say
	// so where they need it (a shard server's host needs no data).
	d, _ := cluster.EstimateData(f.data, cfg.Spec, f.trainSubset, f.testSubset)
	plan, err := cfg.Memory(t, cluster.PlanInputs{Data: d, Resume: f.cluster.resume != "", Checkpoints: f.cluster.ckptDir != "" || f.cluster.resume != ""})
	if err != nil {
		return fmt.Errorf("--model %s: %w", f.model, err)
	}
	avail, where, aerr := app.memoryAvailable()
	if aerr == nil {
		plan.Available, plan.AvailableFrom = avail, where
	}
	cfg.Planned = &plan
	if f.memoryPlan {
		app.printMemoryPlan(plan, here)
		return errMemoryPlanShown
	}
	switch {
	case f.skipMemoryCheck:
		return nil
	case aerr != nil:
		app.Log.Warn("memory check skipped: this machine's available memory is unknown", "err", aerr)
		return nil
	}
	if err := cluster.CheckMemory(plan, here, avail, where); err != nil {
		return fmt.Errorf("%w; --memory-plan lists each process's parts, --skip-memory-check starts the job anyway (docs/training.md, \"Memory\")", err)
	}
	return nil
}

// errMemoryPlanShown ends a command after --memory-plan printed the plan;
// the command then succeeds (planShownIsSuccess).
var errMemoryPlanShown = errors.New("memory plan shown")

// planShownIsSuccess makes c and its subcommands succeed when they end
// with errMemoryPlanShown.
func planShownIsSuccess(c *cobra.Command) {
	if run := c.RunE; run != nil {
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if err := run(cmd, args); !errors.Is(err, errMemoryPlanShown) {
				return err
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		planShownIsSuccess(sub)
	}
}

// printMemoryPlan prints the plan: each process's need and its parts, and
// what the processes here need of what this host has.
func (app *App) printMemoryPlan(plan cluster.JobMemory, here []int) {
	tw := tabwriter.NewWriter(app.Out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "memory plan\t%s in all: %s\n", cluster.FormatMemory(plan.Bytes), plan.Summary(nil))
	for i, p := range plan.Processes {
		mark := ""
		if len(plan.Processes) > 1 && slices.Contains(here, i) {
			mark = " (this host)"
		}
		fmt.Fprintf(tw, "%s%s\t%s\n", p.Process, mark, cluster.FormatMemory(p.Bytes))
		for _, part := range p.Parts {
			fmt.Fprintf(tw, "  %s\t%s\n", part.Name, cluster.FormatMemory(part.Bytes))
		}
	}
	if plan.Available > 0 {
		var need int64
		for _, i := range here {
			need += plan.Processes[i].Bytes
		}
		fmt.Fprintf(tw, "this host\tneeds %s, has %s available (%s)\n", cluster.FormatMemory(need), cluster.FormatMemory(plan.Available), plan.AvailableFrom)
	}
	tw.Flush()
}

// upTo returns 0 … n−1.
func upTo(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// memoryAvailable returns the memory this process may still take and
// what limits it (availableMemory of the machine's files, or the test's
// stand-in).
func (app *App) memoryAvailable() (int64, string, error) {
	if app.MemoryAvailable != nil {
		return app.MemoryAvailable()
	}
	return availableMemory("/")
}

// availableMemory returns the memory a process may still take on this
// machine, with root the file system's root: MemAvailable of
// /proc/meminfo, or less where the process's memory cgroup, or one above
// it, limits it (cgroup v2: memory.max − memory.current; v1:
// memory.limit_in_bytes − memory.usage_in_bytes), and names the figure
// ("MemAvailable in /proc/meminfo", "memory.max of cgroup /job").
func availableMemory(root string) (int64, string, error) {
	b, err := os.ReadFile(filepath.Join(root, "proc/meminfo"))
	if err != nil {
		return 0, "", err
	}
	avail, err := meminfoField(b, "MemAvailable")
	if err != nil {
		return 0, "", fmt.Errorf("/proc/meminfo: %w", err)
	}
	where := "MemAvailable in /proc/meminfo"
	groups, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return avail, where, nil
	}
	sc := bufio.NewScanner(bytes.NewReader(groups))
	for sc.Scan() {
		// hierarchy-ID:controllers:path; v2 is 0::path.
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) != 3 {
			continue
		}
		dir, limitFile, usageFile := "sys/fs/cgroup", "memory.max", "memory.current"
		switch {
		case f[0] == "0" && f[1] == "":
		case slices.Contains(strings.Split(f[1], ","), "memory"):
			dir, limitFile, usageFile = "sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes"
		default:
			continue
		}
		for g := path.Clean("/" + f[2]); ; g = path.Dir(g) {
			left, ok := cgroupLeft(filepath.Join(root, dir, g), limitFile, usageFile)
			if ok && left < avail {
				avail, where = left, fmt.Sprintf("%s of cgroup %s less its usage", limitFile, g)
			}
			if g == "/" {
				break
			}
		}
	}
	return avail, where, nil
}

// cgroupLeft returns a cgroup's limit less its usage, if it has a limit
// (v2 "max" and v1's near-2⁶³ values are none).
func cgroupLeft(dir, limitFile, usageFile string) (int64, bool) {
	limit, err := readInt(filepath.Join(dir, limitFile))
	if err != nil || limit >= 1<<62 {
		return 0, false
	}
	usage, err := readInt(filepath.Join(dir, usageFile))
	if err != nil {
		usage = 0
	}
	return max(limit-usage, 0), true
}

// readInt reads a file holding one integer ("max" is an error).
func readInt(p string) (int64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// meminfoField returns the field name of /proc/meminfo's text b, in bytes.
func meminfoField(b []byte, name string) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != name {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			break
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		if len(f) > 1 && f[1] == "kB" {
			n *= 1024
		}
		return n, nil
	}
	if err := sc.Err(); err != nil && err != io.EOF {
		return 0, err
	}
	return 0, fmt.Errorf("no %s field", name)
}
