package cluster

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/rdma"
)

// ErrNoMemory is wrapped by the error of CheckMemory: the processes of a
// job on one host need more memory than the host has available.
var ErrNoMemory = errors.New("not enough memory")

// MemoryPart is one thing a process of a job keeps in memory.
type MemoryPart struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
}

// ProcessMemory is the memory one process of a job needs: what each of
// its roles keeps, and their sum.
type ProcessMemory struct {
	// Process names the process by its roles: "head" (the coordinator and
	// the evaluator), "shard server 1", "learner 0", joined by " + " for
	// a process of several ("shard server 0 + head"), "one process" for a
	// job in one process.
	Process string       `json:"process"`
	Parts   []MemoryPart `json:"parts"`
	Bytes   int64        `json:"bytes"`
}

// JobMemory is the memory a job needs, process by process (Config.Memory):
// computed from the job's settings, its network and the size of its data
// before anything is allocated.
type JobMemory struct {
	Processes []ProcessMemory `json:"processes"` // in the topology's order
	Bytes     int64           `json:"bytes"`     // all of them
	// Available is the memory the host of the process that planned the
	// job had available then (0: unknown), and AvailableFrom where that
	// figure comes from ("MemAvailable in /proc/meminfo"): the caller's to
	// fill.
	Available     int64  `json:"available_bytes"`
	AvailableFrom string `json:"available_source"`
	// Largest describes the largest buffer of a learner's network (nn.
	// MemoryPlan.Largest): "1.2 GiB, the output of conv conv1
	// (alexnet.net:3)".
	Largest string `json:"largest_buffer"`
}

// PlanInputs are what Config.Memory needs beside the Config, known before
// the data, the weights or a checkpoint are read.
type PlanInputs struct {
	Data DataSize
	// Resume: the job resumes from a checkpoint (Config.Resume set, or
	// to be); Checkpoints: it writes checkpoints (Config.Checkpoints).
	Resume, Checkpoints bool
}

// DataSize is the memory of a job's data sets in a process that holds
// them (the coordinator's and the learners'): their pixels, one byte a
// value, and labels, four bytes each.
type DataSize struct {
	Train, Test             int64 // bytes
	TrainImages, TestImages int   // 0 for image data: not known before it is listed
	// Streamed: image data, decoded batch by batch as the job reads it
	// (the learners' data loaders), not held.
	Streamed bool
}

// processBase is what every process takes before its roles: the Go
// runtime, the program's code and OpenBLAS's buffers.
const processBase = 32 << 20

// Memory returns the memory each process of topology t needs for the job
// c (Spec set), with data sets of size d. What each role keeps, with V =
// 4 × the parameter vector's values and r a shard's range in bytes:
//
//   - every process: 32 MiB (runtime, code, OpenBLAS), and its
//     connections' buffers (rdma.ConnBytes); a process of learners or of
//     the coordinator the data sets (DataSize) and their input mean;
//   - a learner: its network (nn.Spec.Memory at Batch over Workers on
//     Engine: parameters V, activations, the engine's workspace, worker
//     gradients; a nil Engine estimates the workspace), its
//     gradient vector in a message of the transport (rdma.MsgBytes of V),
//     both twice with Overlap, the codec's buffers of its pushes and
//     pulls (rdma.Codec.Buffers), topk's residuals (V) and the data
//     loader's two batches;
//   - the evaluator: its network for testing (nn.Spec.Memory at
//     EvalBatch, default 100, no gradients), the weights it pulls (V) and
//     a batch of inputs;
//   - a shard server: the initial vector (V, while it starts; or, with
//     Resume, its shards of the checkpoint and one more, while it reads
//     them) where it exceeds the buffers of training made after it, and
//     per shard its weights (rdma.MsgBytes of r) and what
//     ps.Config.ShardMemory lists (momentum r, the accumulation,
//     the rules' copies and state, two snapshots for the evaluator, a
//     copy when a reader is slow), the pushes being received (one per
//     learner's connection, rdma.RecvBytes), the codec's buffers, and,
//     with Checkpoints, the copy of its state it writes.
//
// A transport of kind "auto" is planned as tcp, whose allocator rounds
// up the most. The figures are what the roles allocate; the Go runtime
// may hold up to a transient allocation more between two collections.
func (c *Config) Memory(t Topology, in PlanInputs) (JobMemory, error) {
	var m JobMemory
	if c.Spec == nil {
		return m, fmt.Errorf("cluster: Memory: no network")
	}
	net, err := c.Spec.Memory(nn.Config{Batch: c.Batch, Workers: c.Workers}, c.Engine)
	if err != nil {
		return m, err
	}
	m.Largest = fmt.Sprintf("%s, %s", FormatMemory(net.Largest), net.LargestLayer)
	in.Resume = in.Resume || c.Resume != nil
	in.Checkpoints = in.Checkpoints || c.Checkpoints != nil
	for _, r := range t.Processes {
		p, err := c.processMemory(t, r, in)
		if err != nil {
			return m, err
		}
		m.Processes = append(m.Processes, p)
		m.Bytes += p.Bytes
	}
	return m, nil
}

// memoryKind is the transport the plan assumes: inmem, tcp, shm or verbs.
func (c *Config) memoryKind() string {
	switch c.Transport {
	case "", "inmem":
		return "inmem"
	case "auto":
		return "tcp"
	}
	return c.Transport
}

// processMemory is the memory of the process that runs r in topology t.
func (c *Config) processMemory(t Topology, r Roles, in PlanInputs) (ProcessMemory, error) {
	d := in.Data
	p := ProcessMemory{Process: processName(t, r)}
	add := func(name string, b int64) {
		if b > 0 {
			p.Parts = append(p.Parts, MemoryPart{name, b})
			p.Bytes += b
		}
	}
	kind, v := c.memoryKind(), 4*int64(c.Spec.VectorLen())
	il := int64(c.Spec.Input.Len())
	servers := len(t.Servers)
	add("runtime, code and OpenBLAS", processBase)
	if len(r.Learners) > 0 || r.Coordinator {
		add("data sets", d.Train+d.Test)
		add("input mean", 4*il)
	}
	conns := int64(0)
	if len(r.Learners) > 0 {
		net, err := c.Spec.Memory(nn.Config{Batch: c.Batch, Workers: c.Workers}, c.Engine)
		if err != nil {
			return p, err
		}
		nets := int64(len(r.Learners))
		if c.Overlap {
			nets *= 2
		}
		add("learners' networks (parameters, activations, workspace, worker gradients)", nets*(net.Total()-net.Grads))
		add("learners' gradients (messages of the transport)", nets*rdma.MsgBytes(kind, c.Spec.VectorLen()))
		ls := int64(len(r.Learners))
		var enc, dec int64
		for _, shards := range t.Servers {
			n := c.largestOf(shards)
			enc += c.Codec.Buffers(n)
			dec += c.WeightsCodec().Buffers(n)
		}
		add("learners' codec buffers", ls*(enc+dec))
		if c.Codec.ID == rdma.CodecTopK {
			add("learners' topk residuals", ls*v)
		}
		add("learners' data loaders", ls*(2*int64(c.Batch)*4*il+16*int64(d.TrainImages)))
		conns += ls * int64(servers+1)
	}
	if r.Evaluator {
		if d.TestImages > 0 || d.Streamed {
			eb := cmp.Or(c.EvalBatch, 100)
			net, err := c.Spec.Memory(nn.Config{Batch: eb, Workers: c.EvalWorkers(len(r.Learners)), Inference: true}, c.Engine)
			if err != nil {
				return p, err
			}
			add("evaluator's network", net.Total())
			add("evaluator's inputs", int64(eb)*4*(il+1))
		}
		add("evaluator's weights", v)
		var dec int64
		for _, shards := range t.Servers {
			dec += c.WeightsCodec().Buffers(c.largestOf(shards))
		}
		add("evaluator's codec buffers", dec)
		conns += int64(servers + 1)
	}
	if r.Coordinator && in.Resume {
		add("the checkpoint while it is read (one shard's)", c.resumeShardBytes(c.largestOf(nil)))
	}
	if len(r.Servers) > 0 {
		c.serverMemory(t, r, in, add)
		conns += int64(len(r.Servers) * (c.Learners + 2))
	}
	if r.Coordinator {
		conns += int64(servers + c.Learners + 1)
	}
	add("connections' buffers", conns*rdma.ConnBytes(kind))
	return p, nil
}

// serverMemory adds what the shard servers of r keep.
func (c *Config) serverMemory(t Topology, r Roles, in PlanInputs, add func(string, int64)) {
	kind := c.memoryKind()
	pc := c.PSConfig(c.Spec.Layout(), 0)
	var own []int
	for _, s := range r.Servers {
		own = append(own, t.Servers[s]...)
	}
	var weights, state, copies, ckpt int64
	for _, k := range own {
		n := c.largestOf([]int{k})
		weights += rdma.MsgBytes(kind, n)
		sm := pc.ShardMemory(k, c.Overlap, true)
		sm.Detached = rdma.MsgBytes(kind, n)
		state += sm.Momentum + sm.Acc + sm.RuleState
		copies += sm.Pulled + sm.Snapshots + sm.Detached
		if in.Checkpoints {
			ckpt += 4*int64(n) + sm.Momentum + sm.Acc + sm.RuleState + sm.Pulled
		}
	}
	var recv, codec int64
	for _, s := range r.Servers {
		n := c.largestOf(t.Servers[s])
		recv += int64(c.Learners) * rdma.RecvBytes(kind, n)
		codec += int64(c.Learners)*c.Codec.Buffers(n) + int64(c.Learners+1)*c.WeightsCodec().Buffers(n)
	}
	// What a shard server holds only while it starts (the initial vector,
	// or the checkpoint it reads) is let go before the training's buffers
	// are made (the copies, the pushes, the codecs', a checkpoint's): the
	// process's peak is the larger of the two phases, so the start counts
	// only beyond them.
	start, name := 4*int64(c.Spec.VectorLen()), "initial weights while the shard servers start"
	if in.Resume {
		start, name = c.resumeShardBytes(c.largestOf(nil)), "the checkpoint while it is read (the shards run and one more)"
		for _, k := range own {
			start += c.resumeShardBytes(c.largestOf([]int{k}))
		}
	}
	add(name+", beyond the buffers of training", start-(copies+ckpt+recv+codec))
	add("shards' weights", weights)
	add("shards' momentum, accumulation and rule state", state)
	add("shards' copies of their weights (learners' pulls for the rule, snapshots, a slow reader's)", copies)
	add("checkpoint being written", ckpt)
	add("pushes being received (one per learner)", recv)
	add("shard servers' codec buffers", codec)
}

// resumeShardBytes is what one shard of n values of a checkpoint takes
// decoded: its weights, momentum and accumulation, its rule state and
// pulled copies.
func (c *Config) resumeShardBytes(n int) int64 {
	pc := c.PSConfig(nil, 0)
	b := int64(3)
	if pc.Solver.NeedsPulled() && c.Protocol == ps.Softsync {
		b += int64(2 * c.Learners)
	}
	return b * 4 * int64(n)
}

// largestOf returns the values of the largest of shards (nil: of every
// shard).
func (c *Config) largestOf(shards []int) int {
	rs, err := ps.Ranges(c.Spec.VectorLen(), c.Shards)
	if err != nil {
		return 0
	}
	n := 0
	for k, r := range rs {
		if shards == nil || slices.Contains(shards, k) {
			n = max(n, r.Len())
		}
	}
	return n
}

// processName names the process that runs r (see ProcessMemory.Process).
func processName(t Topology, r Roles) string {
	if len(t.Processes) == 1 {
		return "one process"
	}
	var names []string
	for _, s := range r.Servers {
		names = append(names, fmt.Sprintf("shard server %d", s))
	}
	for _, l := range r.Learners {
		names = append(names, fmt.Sprintf("learner %d", l))
	}
	switch {
	case r.Coordinator && r.Evaluator:
		names = append(names, "head")
	case r.Coordinator:
		names = append(names, "coordinator")
	case r.Evaluator:
		names = append(names, "evaluator")
	}
	return strings.Join(names, " + ")
}

// CheckMemory returns an error wrapping ErrNoMemory unless the processes
// here (indices into m.Processes: those that run on this host) need at
// most available bytes; where names where that figure comes from (as
// "MemAvailable in /proc/meminfo"). The error names the need, the
// figure, the processes' needs and the network's largest buffer.
func CheckMemory(m JobMemory, here []int, available int64, where string) error {
	var need int64
	for _, i := range here {
		need += m.Processes[i].Bytes
	}
	if need <= available {
		return nil
	}
	return fmt.Errorf("%w: the job needs %s, this machine has %s available (%s): %s; the network's largest buffer is %s", ErrNoMemory,
		FormatMemory(need), FormatMemory(available), where, m.Summary(here), m.Largest)
}

// Summary lists the needs of the processes here (nil: all), those of
// the same kind together: "head 1.1 GiB, 2 shard servers 0.9 GiB each,
// 2 learners 0.8 GiB each".
func (m JobMemory) Summary(here []int) string {
	if here == nil {
		for i := range m.Processes {
			here = append(here, i)
		}
	}
	type group struct {
		kind  string
		n     int
		bytes int64
		name  string
	}
	var gs []*group
	for _, i := range here {
		p := m.Processes[i]
		kind := p.Process
		if !strings.Contains(kind, "+") {
			kind = strings.TrimRight(kind, "0123456789 ")
		}
		var g *group
		for _, x := range gs {
			if x.kind == kind && x.bytes == p.Bytes {
				g = x
			}
		}
		if g == nil {
			g = &group{kind: kind, bytes: p.Bytes, name: p.Process}
			gs = append(gs, g)
		}
		g.n++
	}
	var parts []string
	for _, g := range gs {
		if g.n == 1 {
			parts = append(parts, fmt.Sprintf("%s %s", g.name, FormatMemory(g.bytes)))
			continue
		}
		parts = append(parts, fmt.Sprintf("%d %ss %s each", g.n, g.kind, FormatMemory(g.bytes)))
	}
	return strings.Join(parts, ", ")
}

// FormatMemory writes a byte count in binary units: 31.2 GiB, 870 MiB.
func FormatMemory(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.0f KiB", float64(b)/(1<<10))
}
