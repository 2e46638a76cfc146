package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/ps"
)

// trainReport is the run report of softsync train --json; docs/report.md
// describes every field. Fractions are fractions (0.0093 for 0.93%);
// test errors are null when there is no test set.
type trainReport struct {
	Model        string         `json:"model"`
	Params       int            `json:"params"`
	Data         string         `json:"data"`
	TrainImages  int            `json:"train_images"`
	TestImages   int            `json:"test_images"`
	Learners     int            `json:"learners"`
	Batch        int            `json:"batch"`
	Epochs       int            `json:"epochs"`
	EpochsDone   float64        `json:"epochs_done"`
	Interrupted  bool           `json:"interrupted"`
	Steps        int64          `json:"steps"`
	LearnerSteps []int64        `json:"learner_steps"`
	Images       int64          `json:"images"`
	TestError    *float64       `json:"test_error"`
	ImagesPerSec float64        `json:"images_per_sec"`
	Seconds      float64        `json:"seconds"`
	History      []historyEntry `json:"history"`

	Protocol     string    `json:"protocol"`
	N            int       `json:"n"`
	MaxStaleness int       `json:"max_staleness"`
	LRMode       string    `json:"lr_mode"`
	Shards       int       `json:"shards"`
	Transport    string    `json:"transport"`
	Compress     string    `json:"compress"`
	Overlap      bool      `json:"overlap"`
	Staleness    staleness `json:"staleness"`
	Updates      uint64    `json:"updates"`
	Partial      uint64    `json:"partial_updates"`
	Gradients    uint64    `json:"gradients"`
	Dropped      uint64    `json:"gradients_dropped"`
	BytesSent    uint64    `json:"bytes_sent"`
	Traffic      traffic   `json:"traffic"`
	ShardStats   []shard   `json:"shard_stats"`

	// The processes of the job (one for a job in one process), and what
	// a job of several processes adds.
	Processes   []reportProcess      `json:"processes"`
	Connections []cluster.Connection `json:"connections"`
	Chunks      chunks               `json:"chunks"`
	Lost        int                  `json:"learners_lost"`
	Restarts    int                  `json:"learner_restarts"`

	Solver  solver `json:"solver"`
	Seed    uint64 `json:"seed"`
	Threads int    `json:"threads"` // per learner
	Engine  string `json:"engine"`
}

type historyEntry struct {
	Epoch     int      `json:"epoch"`
	TrainLoss float64  `json:"train_loss"`
	TestError *float64 `json:"test_error"`
	Seconds   float64  `json:"seconds"`
}

type staleness struct {
	Mean      float64  `json:"mean"`
	Max       int      `json:"max"`
	Histogram []uint64 `json:"histogram"`
}

type traffic struct {
	PushRawBytes  uint64  `json:"push_raw_bytes"`
	PushWireBytes uint64  `json:"push_wire_bytes"`
	PullRawBytes  uint64  `json:"pull_raw_bytes"`
	PullWireBytes uint64  `json:"pull_wire_bytes"`
	CodecSeconds  float64 `json:"codec_seconds"`
}

type shard struct {
	Shard            int       `json:"shard"`
	Pushed           uint64    `json:"pushed"`
	Lost             uint64    `json:"lost"`
	Updates          uint64    `json:"updates"`
	Partial          uint64    `json:"partial_updates"`
	Refused          uint64    `json:"refused_updates"`
	RefusedGradients []uint64  `json:"gradients_refused"` // per learner id
	Gradients        uint64    `json:"gradients"`
	Dropped          uint64    `json:"gradients_dropped"`
	Staleness        staleness `json:"staleness"`
}

// reportProcess is one process of the job and the roles it ran.
type reportProcess struct {
	Rank     int      `json:"rank"` // -1 when not started by a launcher
	Host     string   `json:"host"`
	PID      int      `json:"pid"`
	Roles    []string `json:"roles"`    // "server", "learner", "evaluator", in that order
	Servers  []int    `json:"servers"`  // the shard servers it ran, by index
	Learners []int    `json:"learners"` // the learners it ran, by id
}

// processesOf lists the processes that ran the roles ps (in their order),
// one entry per host and pid.
func processesOf(ps []cluster.Process) []reportProcess {
	type key struct {
		host string
		pid  int
	}
	var out []reportProcess
	at := map[key]int{}
	for _, p := range ps {
		i, ok := at[key{p.Host, p.PID}]
		if !ok {
			i = len(out)
			at[key{p.Host, p.PID}] = i
			out = append(out, reportProcess{Rank: p.Rank, Host: p.Host, PID: p.PID, Servers: []int{}, Learners: []int{}})
		}
		rp := &out[i]
		switch p.Role {
		case cluster.RoleServer:
			rp.Servers = append(rp.Servers, p.ID)
		case cluster.RoleLearner:
			rp.Learners = append(rp.Learners, p.ID)
		}
		if !slices.Contains(rp.Roles, string(p.Role)) {
			rp.Roles = append(rp.Roles, string(p.Role))
		}
	}
	order := []string{string(cluster.RoleServer), string(cluster.RoleLearner), string(cluster.RoleEvaluator)}
	for i := range out {
		rp := &out[i]
		slices.SortFunc(rp.Roles, func(a, b string) int { return slices.Index(order, a) - slices.Index(order, b) })
		slices.Sort(rp.Servers)
		slices.Sort(rp.Learners)
	}
	return out
}

type chunks struct {
	Handed     int `json:"handed"`
	Completed  int `json:"completed"`
	Reassigned int `json:"reassigned"`
	Batches    int `json:"batches"` // mini-batches of the completed chunks
}

type solver struct {
	LR          float64 `json:"lr"`
	Momentum    float64 `json:"momentum"`
	WeightDecay float64 `json:"weight_decay"`
	LRSteps     []int   `json:"lr_steps"`
	LRGamma     float64 `json:"lr_gamma"`
}

// fraction returns nil for NaN (no test set), else a pointer to v.
func fraction(v float64) *float64 {
	if math.IsNaN(v) {
		return nil
	}
	return &v
}

func staleOf(st *ps.Stats) staleness {
	h := st.Histogram
	if h == nil {
		h = []uint64{}
	}
	return staleness{Mean: st.MeanStaleness(), Max: st.MaxStaleness, Histogram: h}
}

func newReport(st *trainSetup, f *trainFlags, res *cluster.Result) *trainReport {
	c := &st.cfg
	r := &trainReport{
		Model: c.Spec.Name, Params: c.Spec.NumParams(), Data: st.dataName, TrainImages: c.Train.N,
		Learners: c.Learners, Batch: c.Batch, Epochs: c.Epochs, Steps: res.Steps, LearnerSteps: append([]int64{}, res.LearnerSteps...), Images: res.Images,
		TestError: fraction(res.TestError), ImagesPerSec: res.ImagesPerSec, Seconds: res.Seconds,
		History: []historyEntry{}, Protocol: c.Protocol.String(), N: c.N, MaxStaleness: c.MaxStaleness,
		LRMode: c.Solver.LRMode.String(), Shards: c.Shards, Transport: c.Transport, Compress: c.Codec.String(),
		Overlap: c.Overlap, ShardStats: []shard{}, Seed: c.Seed, Threads: st.threads, Engine: c.Engine.Name(),
		Solver: solver{LR: c.Solver.LR, Momentum: c.Solver.Momentum, WeightDecay: c.Solver.WeightDecay,
			LRSteps: append([]int{}, c.Solver.LRSteps...), LRGamma: c.Solver.LRGamma},
	}
	if res.BatchesPerEpoch > 0 {
		done := res.Steps // mini-batches done: of the completed chunks when known
		if res.Chunks.Batches > 0 && !res.Interrupted {
			done = int64(res.Chunks.Batches)
		}
		r.EpochsDone = float64(done) / float64(res.BatchesPerEpoch)
	}
	r.Interrupted = res.Interrupted
	r.Processes = append([]reportProcess{}, processesOf(res.Processes)...)
	r.Connections = append([]cluster.Connection{}, res.Connections...)
	r.Chunks = chunks{Handed: res.Chunks.Handed, Completed: res.Chunks.Completed, Reassigned: res.Chunks.Reassigned, Batches: res.Chunks.Batches}
	r.Lost, r.Restarts = res.Lost, res.Restarts
	if len(res.Connections) > 0 {
		r.Transport = res.Connections[0].Transport
		for _, c := range res.Connections[1:] {
			if c.Transport != r.Transport {
				r.Transport = "mixed"
			}
		}
	}
	if r.Transport == "" {
		r.Transport = "inmem"
	}
	if c.Protocol == ps.Hardsync {
		r.N = 0
	}
	if c.Test != nil {
		r.TestImages = c.Test.N
	}
	for _, h := range res.History {
		r.History = append(r.History, historyEntry{Epoch: h.Epoch, TrainLoss: h.TrainLoss, TestError: fraction(h.TestError), Seconds: h.Seconds})
	}
	r.Staleness = staleness{Histogram: []uint64{}}
	for k, s := range res.Shards {
		sh := shard{Shard: k, Updates: s.Updates, Partial: s.Partial, Refused: s.Refused, RefusedGradients: append([]uint64{}, s.RefusedGradients...),
			Gradients: s.Gradients, Dropped: s.Dropped, Staleness: staleOf(&s)}
		if k < len(res.Pushes) {
			sh.Pushed = res.Pushes[k]
			sh.Lost = sh.Pushed - min(sh.Pushed, s.Gradients+s.Dropped)
		}
		r.ShardStats = append(r.ShardStats, sh)
		if k == 0 {
			r.Staleness, r.Updates, r.Partial, r.Gradients, r.Dropped = staleOf(&s), s.Updates, s.Partial, s.Gradients, s.Dropped
		}
	}
	t := &res.Traffic
	r.BytesSent = t.FrameBytesSent + t.FrameBytesRecv
	push, pull := t.TotalSent(), t.TotalRecv()
	r.Traffic = traffic{PushRawBytes: push.RawBytes, PushWireBytes: push.WireBytes, PullRawBytes: pull.RawBytes,
		PullWireBytes: pull.WireBytes, CodecSeconds: (push.Time + pull.Time).Seconds()}
	return r
}

// distributed reports whether the run had more than one learner or shard:
// the staleness part of the summary and plot matters then.
func (r *trainReport) distributed() bool { return r.Learners > 1 || r.Shards > 1 }

// writeText prints the end-of-run summary.
func (r *trainReport) writeText(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	te := "n/a (no test set)"
	if r.TestError != nil {
		te = fmt.Sprintf("%.2f%% (%d test images)", 100**r.TestError, r.TestImages)
	}
	fmt.Fprintf(tw, "model\t%s (%s parameters), %s, %d learner(s) × batch %d\n", r.Model, thousands(int64(r.Params)), r.Data, r.Learners, r.Batch)
	fmt.Fprintf(tw, "test error\t%s\n", te)
	epochs := fmt.Sprintf("%d epochs", r.Epochs)
	if r.EpochsDone < float64(r.Epochs) {
		epochs = fmt.Sprintf("%.2f of %d epochs", r.EpochsDone, r.Epochs)
	}
	fmt.Fprintf(tw, "training time\t%s (%s, %s steps, %s images)\n", fmtDuration(r.Seconds), epochs, thousands(r.Steps), thousands(r.Images))
	fmt.Fprintf(tw, "images/s\t%s\n", thousands(int64(math.Round(r.ImagesPerSec))))
	if r.distributed() {
		proto := r.Protocol
		if r.Protocol == "softsync" {
			proto = fmt.Sprintf("%d-softsync", r.N)
		}
		fmt.Fprintf(tw, "parameter server\t%s, lr-mode %s, %d shard(s), %s, compress %s\n", proto, r.LRMode, r.Shards, r.Transport, r.Compress)
		fmt.Fprintf(tw, "staleness\tmean %.2f, max %d, histogram %s\n", r.Staleness.Mean, r.Staleness.Max, histText(r.Staleness.Histogram))
		fmt.Fprintf(tw, "updates\t%s (%s partial; %s gradients accepted, %s dropped)\n", thousands(int64(r.Updates)), thousands(int64(r.Partial)), thousands(int64(r.Gradients)), thousands(int64(r.Dropped)))
		fmt.Fprintf(tw, "steps per learner\t%s\n", spread(r.LearnerSteps))
		ratio := 1.0
		if r.Traffic.PushRawBytes > 0 {
			ratio = float64(r.Traffic.PushWireBytes) / float64(r.Traffic.PushRawBytes)
		}
		fmt.Fprintf(tw, "bytes sent\t%s (gradients at %.3f of raw size, codec time %s)\n", bytesText(r.BytesSent), ratio, fmtDuration(r.Traffic.CodecSeconds))
	}
	if len(r.ShardStats) > 0 && r.ShardStats[0].Refused > 0 {
		sh := r.ShardStats[0]
		fmt.Fprintf(tw, "refused updates\t%s on shard 0 (each would have made a weight NaN or infinite); gradients discarded per learner %v\n",
			thousands(int64(sh.Refused)), sh.RefusedGradients)
	}
	if len(r.Processes) > 0 {
		hosts := map[string]bool{}
		for _, p := range r.Processes {
			hosts[p.Host] = true
		}
		fmt.Fprintf(tw, "processes\t%s on %s; %d learner(s) lost, %d restart(s), %d chunk(s) reassigned\n",
			count(len(r.Processes), "process", "processes"), count(len(hosts), "host", "hosts"), r.Lost, r.Restarts, r.Chunks.Reassigned)
	}
	tw.Flush()
}

// writeJSON writes the report to path.
func (r *trainReport) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// count shows n with the singular or plural noun.
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// spread shows per-learner counts as "min–max (mean m)".
func spread(v []int64) string {
	if len(v) == 0 {
		return "–"
	}
	var sum int64
	for _, x := range v {
		sum += x
	}
	return fmt.Sprintf("%s–%s (mean %.1f)", thousands(slices.Min(v)), thousands(slices.Max(v)), float64(sum)/float64(len(v)))
}

// histText shows a staleness histogram as "τ=count" pairs, the largest
// buckets elided past 12.
func histText(h []uint64) string {
	var parts []string
	for tau, n := range h {
		if n == 0 {
			continue
		}
		if len(parts) == 12 {
			parts = append(parts, "…")
			break
		}
		parts = append(parts, fmt.Sprintf("%d:%d", tau, n))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// thousands formats n with thin separators: 1,234,567.
func thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func bytesText(n uint64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	}
	return fmt.Sprintf("%d bytes", n)
}

func fmtDuration(sec float64) string {
	d := time.Duration(sec * float64(time.Second))
	switch {
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Microsecond).String()
}
