package cluster

import (
	"errors"
	"strings"
	"testing"

	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
)

// alexnetJob is the job of the memory tests: alexnet, λ = 2 learners of
// batch 8 and 2 shard servers, softsync n = 2.
func alexnetJob(t *testing.T, transport string) Config {
	return Config{Spec: spec(t, "alexnet"), Learners: 2, Batch: 8, Shards: 2, Protocol: ps.Softsync, N: 2, Transport: transport,
		Workers: 1, Solver: sgd.Config{LR: 0.01, Momentum: 0.9}}
}

// part returns the bytes of the part of p whose name starts with name
// (0: none).
func part(p ProcessMemory, name string) int64 {
	for _, x := range p.Parts {
		if strings.HasPrefix(x.Name, name) {
			return x.Bytes
		}
	}
	return 0
}

// plan returns c's plan for a process per role and synthetic data of
// 64 and 32 images, checking that every process is the sum of its parts
// and the job the sum of its processes.
func plan(t *testing.T, c Config) JobMemory {
	t.Helper()
	d, err := EstimateData("synthetic", c.Spec, 64, 32)
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.Memory(Apart(c.Learners, c.Shards), PlanInputs{Data: d})
	if err != nil {
		t.Fatal(err)
	}
	var all int64
	for _, p := range m.Processes {
		var sum int64
		for _, x := range p.Parts {
			sum += x.Bytes
		}
		if sum != p.Bytes || sum == 0 {
			t.Errorf("%s: %d bytes, its parts %d", p.Process, p.Bytes, sum)
		}
		all += p.Bytes
	}
	if all != m.Bytes {
		t.Errorf("the job: %d bytes, its processes %d", m.Bytes, all)
	}
	return m
}

// TestJobMemory: the plan of alexnet with 2 learners and 2 shard servers
// names each process by its roles and counts, in each, what its roles
// allocate: a learner its network (without the gradient vector, which is
// a message of the transport, rounded up by its allocator), a shard
// server its shard's weights and momentum, the pushes of every learner
// and, for dc, the weights each learner pulled; bf16 adds its encoded
// payloads.
func TestJobMemory(t *testing.T) {
	c := alexnetJob(t, "tcp")
	m := plan(t, c)
	var names []string
	for _, p := range m.Processes {
		names = append(names, p.Process)
	}
	if got := strings.Join(names, ", "); got != "head, shard server 0, shard server 1, learner 0, learner 1" {
		t.Fatalf("processes %s", got)
	}
	v := 4 * int64(c.Spec.VectorLen())
	net, err := c.Spec.Memory(nn.Config{Batch: 8, Workers: 1}, c.Engine)
	if err != nil {
		t.Fatal(err)
	}
	l := m.Processes[3]
	if got, want := part(l, "learners' networks"), net.Total()-net.Grads; got != want {
		t.Errorf("learner's network: %d, want %d (nn.Spec.Memory without the gradients)", got, want)
	}
	// 60,965,224 values in the pool's power of two, 2²⁶.
	if got := part(l, "learners' gradients"); got != 4<<26 {
		t.Errorf("learner's gradient message over tcp: %d, want %d", got, 4<<26)
	}
	if got, want := part(l, "data sets"), int64(96*(227*227*3+4)); got != want {
		t.Errorf("learner's data: %d, want %d", got, want)
	}
	rs, _ := ps.Ranges(c.Spec.VectorLen(), 2)
	r := 4 * int64(rs[0].Len())
	s0 := m.Processes[1]
	if got := part(s0, "shards' momentum"); got != r {
		t.Errorf("shard server 0's momentum (staleness, c₀ = 1: no accumulation): %d, want %d", got, r)
	}
	// The initial vector is let go before the training's buffers are
	// made: it counts beyond them only (here it does not).
	later := part(s0, "shards' copies") + part(s0, "pushes being received") + part(s0, "shard servers' codec")
	if got, want := part(s0, "initial weights"), max(v-later, 0); got != want || later == 0 {
		t.Errorf("shard server 0's initial weights: %d, want %d (V less the %d allocated later)", got, want, later)
	}
	if got, want := part(s0, "pushes being received"), 2*rdma.MsgBytes("tcp", rs[0].Len()); got != want {
		t.Errorf("shard server 0's pushes: %d, want %d (one per learner)", got, want)
	}
	if got := part(m.Processes[0], "evaluator's weights"); got != v {
		t.Errorf("head's weights: %d, want %d", got, v)
	}

	// dc keeps each learner's pulled weights and an accumulation per
	// shard: λ + 1 copies of the shard's range more.
	dc := c
	dc.Solver.Correction, dc.Solver.DCLambda = sgd.CorrDC, 0.04
	mdc := plan(t, dc)
	if got, want := mdc.Processes[1].Bytes-s0.Bytes, 3*r; got != want {
		t.Errorf("dc adds %d to shard server 0, want %d (2 learners' pulled weights and the accumulation)", got, want)
	}
	if mdc.Processes[3].Bytes != l.Bytes {
		t.Errorf("dc changed a learner's memory: %d, want %d", mdc.Processes[3].Bytes, l.Bytes)
	}

	// bf16: a learner encodes its pushes to both shards (2 bytes a value).
	bf := c
	bf.Codec = rdma.Codec{ID: rdma.CodecBF16}
	mbf := plan(t, bf)
	if got, want := part(mbf.Processes[3], "learners' codec buffers"), v/2; got != want {
		t.Errorf("bf16 learner's codec buffers: %d, want %d", got, want)
	}

	// shm: the messages are the lend segment's, 64 KiB a grain.
	shm := plan(t, alexnetJob(t, "shm"))
	if got, want := part(shm.Processes[3], "learners' gradients"), (v+65535)&^65535; got != want {
		t.Errorf("learner's gradient message over shm: %d, want %d", got, want)
	}

	// One process runs everything.
	c.Transport = "inmem"
	one, err := c.Memory(InProcess(2, 2), PlanInputs{})
	if err != nil {
		t.Fatal(err)
	}
	if len(one.Processes) != 1 || one.Processes[0].Process != "one process" {
		t.Errorf("in one process: %+v", one.Processes)
	}
}

// TestCheckMemory: a job whose processes here need more than is
// available is refused with ErrNoMemory, naming the need, the figure
// and where it comes from, and each kind of process; one that fits, or
// whose too large processes run elsewhere, is not.
func TestCheckMemory(t *testing.T) {
	m := plan(t, alexnetJob(t, "tcp"))
	l := m.Processes[3].Bytes
	if err := CheckMemory(m, []int{0, 1, 2, 3, 4}, m.Bytes, "MemAvailable in /proc/meminfo"); err != nil {
		t.Errorf("a job that just fits: %v", err)
	}
	if err := CheckMemory(m, []int{4}, l, "memory.max of cgroup /job less its usage"); err != nil {
		t.Errorf("a learner's process alone: %v", err)
	}
	err := CheckMemory(m, []int{0, 1, 2, 3, 4}, m.Bytes-1, "MemAvailable in /proc/meminfo")
	if !errors.Is(err, ErrNoMemory) {
		t.Fatalf("a job 1 byte too large: %v, want ErrNoMemory", err)
	}
	for _, want := range []string{"needs " + FormatMemory(m.Bytes), "has " + FormatMemory(m.Bytes-1) + " available (MemAvailable in /proc/meminfo)",
		"2 learners " + FormatMemory(l) + " each", "shard server 0 ", "head "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
}

// TestMemoryRefusesBadNetwork: a network whose activations cannot be
// allocated is refused by the plan, before anything is allocated, naming
// the file, the line, the layer and the bytes.
func TestMemoryRefusesBadNetwork(t *testing.T) {
	wide, err := nn.Parse("wide.net", []byte("input channels=3 height=224 width=224\nconv c1 out=4096 kernel=3 pad=1\nfc fc2 out=10\nsoftmax\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := Config{Spec: wide, Learners: 1, Batch: 16, Shards: 1, Protocol: ps.Hardsync, Transport: "inmem", Solver: sgd.Config{LR: 0.1}}
	_, err = c.Memory(InProcess(1, 1), PlanInputs{})
	if !errors.Is(err, nn.ErrTooLarge) {
		t.Fatalf("%v, want nn.ErrTooLarge", err)
	}
	for _, want := range []string{"wide.net:2", "c1", "GiB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %q", err, want)
		}
	}
}

// TestFormatMemory: binary units, one decimal from GiB.
func TestFormatMemory(t *testing.T) {
	for b, want := range map[int64]string{512: "0 KiB", 3 << 10: "3 KiB", 870 << 20: "870 MiB", 31<<30 + 1<<29: "31.5 GiB"} {
		if got := FormatMemory(b); got != want {
			t.Errorf("FormatMemory(%d) = %q, want %q", b, got, want)
		}
	}
}
