package main

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

func TestLearnerBlocks(t *testing.T) {
	cpus := []int{0, 2, 3, 5, 6, 7, 9}
	for _, c := range []struct {
		n    int
		want [][]int
	}{
		{1, [][]int{cpus}},
		{2, [][]int{{0, 2, 3}, {5, 6, 7}}},
		{3, [][]int{{0, 2}, {3, 5}, {6, 7}}},
		{7, [][]int{{0}, {2}, {3}, {5}, {6}, {7}, {9}}},
		{8, nil},
		{0, nil},
	} {
		got := learnerBlocks(cpus, c.n)
		if !slices.EqualFunc(got, c.want, slices.Equal) || (got == nil) != (c.want == nil) {
			t.Errorf("%d learners on %v: %v, want %v", c.n, cpus, got, c.want)
		}
	}
	// A block never reaches into the next one's CPUs when appended to.
	b := learnerBlocks(cpus, 2)
	_ = append(b[0], 99)
	if b[1][0] != 5 {
		t.Errorf("appending to block 0 changed block 1: %v", b[1])
	}
}

// TestCoreOrder: SMT siblings numbered c and c + 4 come next to each
// other, so that 4 learners on 8 logical CPUs get a core each; packages
// come in order; a CPU of unknown topology comes last, a core of its own.
func TestCoreOrder(t *testing.T) {
	topo := func(cpu int) (int, int, bool) {
		switch {
		case cpu == 9:
			return 0, 0, false
		case cpu >= 8:
			return 1, 0, true // package 1, one core
		}
		return 0, cpu % 4, true
	}
	got := coreOrder([]int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, topo)
	if want := []int{0, 4, 1, 5, 2, 6, 3, 7, 8, 9}; !slices.Equal(got, want) {
		t.Fatalf("coreOrder: %v, want %v", got, want)
	}
	if b := learnerBlocks(got[:8], 4); !slices.EqualFunc(b, [][]int{{0, 4}, {1, 5}, {2, 6}, {3, 7}}, slices.Equal) {
		t.Errorf("4 learners on 4 cores of 2 siblings: %v, want a core each", b)
	}
}

func TestBindLearners(t *testing.T) {
	var log bytes.Buffer
	app := &App{Log: slog.New(slog.NewTextHandler(&log, nil))}
	if _, err := bindLearners(app, "cores", 2); err == nil || !strings.Contains(err.Error(), "--bind") {
		t.Errorf("--bind cores: %v, want an error naming --bind", err)
	}
	if pin, err := bindLearners(app, "none", 1); err != nil || pin != nil {
		t.Errorf("--bind none: %v, %v; want no pinning", pin != nil, err)
	}
	cpus, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	pin, err := bindLearners(app, "learners", len(cpus))
	if err != nil || pin == nil {
		t.Fatalf("--bind learners with %d learners on %d CPUs: %v", len(cpus), len(cpus), err)
	}
	for i, c := range coreOrder(cpus, sysTopology) {
		if got := pin("learner", i); !slices.Equal(got, []int{c}) {
			t.Errorf("learner %d pinned to %v, want [%d]", i, got, c)
		}
	}
	if pin("ps", 0) != nil || pin("eval", 0) != nil {
		t.Error("the head or a shard server is pinned")
	}
	if pin, err := bindLearners(app, "learners", len(cpus)+1); err != nil || pin != nil || !strings.Contains(log.String(), "learners not pinned") {
		t.Errorf("more learners than CPUs: pinned %v, %v, log %q; want none, and a line saying so", pin != nil, err, log.String())
	}
}
