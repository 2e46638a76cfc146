package cluster

import (
	"math"
	"slices"
	"time"

	"github.com/softsync/softsync/ps"
)

// Report is the run report of a job (softsync train --json);
// docs/report.md describes every field. Fractions are fractions (0.0093
// for 0.93%); test errors are null when there is no test set; no field is
// omitted.
type Report struct {
	Model        string        `json:"model"`
	Params       int           `json:"params"`
	Data         string        `json:"data"`
	TrainImages  int           `json:"train_images"`
	TestImages   int           `json:"test_images"`
	Learners     int           `json:"learners"`
	Batch        int           `json:"batch"`
	Epochs       int           `json:"epochs"`
	EpochsDone   float64       `json:"epochs_done"`
	Interrupted  bool          `json:"interrupted"`
	Steps        int64         `json:"steps"`
	LearnerSteps []int64       `json:"learner_steps"`
	Images       int64         `json:"images"`
	TestError    *float64      `json:"test_error"`
	TestError5   *float64      `json:"test_error_top5"`
	ImagesPerSec float64       `json:"images_per_sec"`
	Seconds      float64       `json:"seconds"`
	History      []ReportEpoch `json:"history"`
	// DataWait is the time the learners waited for their data, all
	// together; DataWaitFraction that over the learners' training time
	// (Seconds × Learners).
	DataWait         float64 `json:"data_wait_seconds"`
	DataWaitFraction float64 `json:"data_wait_fraction"`
	// DataSkipped counts the images that could not be read or decoded,
	// DataSkippedFirst names the first few.
	DataSkipped      int      `json:"data_skipped"`
	DataSkippedFirst []string `json:"data_skipped_first"`

	Protocol     string `json:"protocol"`
	N            int    `json:"n"`
	NSchedule    string `json:"n_schedule,omitempty"`
	MaxStaleness int    `json:"max_staleness"`
	LRMode       string `json:"lr_mode"`
	MomentumComp bool   `json:"momentum_comp"`
	// PulledBytes is the memory the shards keep for the rules that
	// compare a gradient with the weights it was computed on: Σ over the
	// shards of ps.Stats.PulledBytes.
	PulledBytes uint64          `json:"pulled_bytes"`
	Shards      int             `json:"shards"`
	Transport   string          `json:"transport"`
	Compress    string          `json:"compress"`
	Overlap     bool            `json:"overlap"`
	EarlyPush   bool            `json:"early_push"`
	Staleness   ReportStaleness `json:"staleness"`
	Updates     uint64          `json:"updates"`
	Partial     uint64          `json:"partial_updates"`
	Gradients   uint64          `json:"gradients"`
	Dropped     uint64          `json:"gradients_dropped"`
	BytesSent   uint64          `json:"bytes_sent"`
	Traffic     ReportTraffic   `json:"traffic"`
	ShardStats  []ReportShard   `json:"shard_stats"`
	// RepliesDetached counts the weights replies still being read when
	// their shard was to update (ps.ServerStats.Detached, every shard
	// server): the shard went on with a copy of its weights.
	RepliesDetached uint64 `json:"replies_detached"`
	// Memory is the job's memory plan as its command checked it
	// (Config.Planned; nil: not planned).
	Memory *JobMemory `json:"memory,omitempty"`

	// The processes of the job (one for a job in one process), and what
	// a job of several processes adds.
	Processes   []ReportProcess `json:"processes"`
	Connections []Connection    `json:"connections"`
	Chunks      ReportChunks    `json:"chunks"`
	Lost        int             `json:"learners_lost"`
	Restarts    int             `json:"learner_restarts"`

	// The checkpoints written during the job and those that failed.
	CheckpointsWritten int                      `json:"checkpoints_written"`
	CheckpointFailures ReportCheckpointFailures `json:"checkpoint_failures"`

	Solver  ReportSolver `json:"solver"`
	Seed    uint64       `json:"seed"`
	Threads int          `json:"threads"` // per learner
	Engine  string       `json:"engine"`
}

// ReportEpoch is one entry of Report.History.
type ReportEpoch struct {
	Epoch      int      `json:"epoch"`
	TrainLoss  float64  `json:"train_loss"`
	TestError  *float64 `json:"test_error"`
	TestError5 *float64 `json:"test_error_top5"`
	Seconds    float64  `json:"seconds"`
}

// ReportStaleness summarises the staleness of a shard's accepted
// gradients.
type ReportStaleness struct {
	Mean      float64  `json:"mean"`
	Max       int      `json:"max"`
	Histogram []uint64 `json:"histogram"`
}

// ReportTraffic is the learners' traffic, by direction.
type ReportTraffic struct {
	PushRawBytes  uint64  `json:"push_raw_bytes"`
	PushWireBytes uint64  `json:"push_wire_bytes"`
	PullRawBytes  uint64  `json:"pull_raw_bytes"`
	PullWireBytes uint64  `json:"pull_wire_bytes"`
	CodecSeconds  float64 `json:"codec_seconds"`
}

// ReportShard is one shard's counters.
type ReportShard struct {
	Shard int `json:"shard"`
	// Pushed are the gradients the learners pushed to the shard: each
	// was accepted (Gradients), dropped as too stale (Dropped), ignored
	// as a mini-batch the shard already had (Redone), given up as
	// computed on an earlier life's weights (StaleLife), or never reached
	// it (Lost: its learner died first).
	Pushed    uint64 `json:"pushed"`
	Lost      uint64 `json:"lost"`
	Redone    uint64 `json:"redone"`
	StaleLife uint64 `json:"stale_life"`
	// Resent counts the pushes sent again on a new connection that the
	// shard had already (not in Pushed).
	Resent uint64 `json:"resent"`
	// GivenUp are the job's mini-batches the shard never had: lost with
	// a restart of its server after the data was done. Gradients +
	// Dropped + GivenUp is every mini-batch of the job.
	GivenUp          uint64          `json:"given_up"`
	Updates          uint64          `json:"updates"`
	Partial          uint64          `json:"partial_updates"`
	Refused          uint64          `json:"refused_updates"`
	RefusedGradients []uint64        `json:"gradients_refused"` // per learner id
	Gradients        uint64          `json:"gradients"`
	Dropped          uint64          `json:"gradients_dropped"`
	Staleness        ReportStaleness `json:"staleness"`
	PulledBytes      uint64          `json:"pulled_bytes"` // ps.Stats.PulledBytes
}

// ReportProcess is one process of the job and the roles it ran.
type ReportProcess struct {
	Rank     int      `json:"rank"` // -1 when not started by a launcher
	Host     string   `json:"host"`
	PID      int      `json:"pid"`
	Roles    []string `json:"roles"`    // "server", "learner", "evaluator", in that order
	Servers  []int    `json:"servers"`  // the shard servers it ran, by index
	Learners []int    `json:"learners"` // the learners it ran, by id
}

// ReportChunks counts the chunks of data handed to the learners.
type ReportChunks struct {
	Handed     int `json:"handed"`
	Completed  int `json:"completed"`
	Reassigned int `json:"reassigned"`
	Batches    int `json:"batches"` // mini-batches delivered: their gradients reached every shard
	Redone     int `json:"redone"`  // mini-batches handed out again: a shard lacked them
}

// ReportCheckpointFailures counts the checkpoints that failed during the
// job and describes the last one (zero values: none failed).
type ReportCheckpointFailures struct {
	Count       int     `json:"count"`
	LastVersion uint64  `json:"last_version"`
	LastEpoch   float64 `json:"last_epoch"`   // epochs trained when it began
	LastSeconds float64 `json:"last_seconds"` // training time when it failed
	LastTime    string  `json:"last_time"`    // when it failed, RFC 3339 in UTC
	LastError   string  `json:"last_error"`
}

// ReportSolver is the solver's settings.
type ReportSolver struct {
	LR          float64 `json:"lr"`
	Momentum    float64 `json:"momentum"`
	WeightDecay float64 `json:"weight_decay"`
	LRSteps     []int   `json:"lr_steps"`
	LRGamma     float64 `json:"lr_gamma"`
}

// NewReport returns the report of the job c that ended with res. The
// transport is the one of the learners' connections ("mixed" when they
// differ), else c.Transport, else "inmem".
func NewReport(c *Config, res *Result) *Report {
	r := &Report{
		Model: c.Spec.Name, Params: c.Spec.NumParams(), Data: c.DataName, Learners: c.Learners, Batch: c.Batch, Epochs: c.Epochs,
		Steps: res.Steps, LearnerSteps: append([]int64{}, res.LearnerSteps...), Images: res.Images,
		TestError: fraction(res.TestError), TestError5: fraction(res.TestErrorTop5), ImagesPerSec: res.ImagesPerSec, Seconds: res.Seconds,
		DataWait: res.DataWait.Seconds(), DataSkipped: res.Skipped, DataSkippedFirst: append([]string{}, res.SkippedFirst...),
		History: []ReportEpoch{}, Protocol: c.Protocol.String(), N: c.N, MaxStaleness: c.MaxStaleness,
		LRMode: c.Solver.RuleString(), MomentumComp: c.Solver.MomentumComp, Shards: c.Shards, Transport: c.Transport, Compress: c.Codec.String(),
		Overlap: c.Overlap, EarlyPush: c.EarlyPush, ShardStats: []ReportShard{}, Seed: c.Seed, Threads: max(c.Workers, 1),
		Solver: ReportSolver{LR: c.Solver.LR, Momentum: c.Solver.Momentum, WeightDecay: c.Solver.WeightDecay,
			LRSteps: append([]int{}, c.Solver.LRSteps...), LRGamma: c.Solver.LRGamma},
		Interrupted: res.Interrupted, Processes: append([]ReportProcess{}, processesOf(res.Processes)...),
		Connections: append([]Connection{}, res.Connections...), Lost: res.Lost, Restarts: res.Restarts,
		Chunks: ReportChunks{Handed: res.Chunks.Handed, Completed: res.Chunks.Completed, Reassigned: res.Chunks.Reassigned, Batches: res.Chunks.Batches,
			Redone: res.Chunks.Redone},
	}
	if c.Train != nil {
		r.TrainImages = c.Train.Info().Len
	}
	r.CheckpointsWritten, r.CheckpointFailures.Count = res.Checkpoints.Written, res.Checkpoints.Failed
	if f := res.Checkpoints.LastFailure; f != nil {
		r.CheckpointFailures = ReportCheckpointFailures{Count: res.Checkpoints.Failed, LastVersion: f.Version, LastEpoch: f.Epochs,
			LastSeconds: f.Seconds, LastTime: f.Time.UTC().Format(time.RFC3339), LastError: f.Err.Error()}
	}
	if c.Test != nil {
		r.TestImages = c.Test.Info().Len
	}
	if c.Engine != nil {
		r.Engine = c.Engine.Name()
	}
	if t := res.Seconds * float64(max(c.Learners, 1)); t > 0 {
		r.DataWaitFraction = min(r.DataWait/t, 1)
	}
	if res.BatchesPerEpoch > 0 {
		done := res.Steps // mini-batches done: of the completed chunks when known
		if res.Chunks.Batches > 0 && !res.Interrupted {
			done = int64(res.Chunks.Batches)
		}
		r.EpochsDone = float64(done) / float64(res.BatchesPerEpoch)
	}
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
	} else if len(c.NSchedule) > 0 {
		r.NSchedule = c.NSchedule.String()
	}
	for _, h := range res.History {
		r.History = append(r.History, ReportEpoch{Epoch: h.Epoch, TrainLoss: h.TrainLoss, TestError: fraction(h.TestError),
			TestError5: fraction(h.TestErrorTop5), Seconds: h.Seconds})
	}
	r.Staleness = ReportStaleness{Histogram: []uint64{}}
	for k, s := range res.Shards {
		sh := ReportShard{Shard: k, Updates: s.Updates, Partial: s.Partial, Refused: s.Refused, RefusedGradients: append([]uint64{}, s.RefusedGradients...),
			Gradients: s.Gradients, Dropped: s.Dropped, Redone: s.Redone, StaleLife: s.StaleLife, Resent: s.Duplicates, Staleness: staleOf(&s),
			PulledBytes: s.PulledBytes}
		r.PulledBytes += s.PulledBytes
		if k < len(res.GivenUp) {
			sh.GivenUp = res.GivenUp[k]
		}
		if k < len(res.Pushes) {
			arrived := s.Gradients + s.Dropped + s.Redone + s.StaleLife
			sh.Pushed = max(res.Pushes[k], arrived)
			sh.Lost = sh.Pushed - arrived
		}
		r.ShardStats = append(r.ShardStats, sh)
		if k == 0 {
			r.Staleness, r.Updates, r.Partial, r.Gradients, r.Dropped = staleOf(&s), s.Updates, s.Partial, s.Gradients, s.Dropped
		}
	}
	r.RepliesDetached = res.Server.Detached
	r.Memory = c.Planned
	t := &res.Traffic
	r.BytesSent = t.FrameBytesSent + t.FrameBytesRecv
	push, pull := t.TotalSent(), t.TotalRecv()
	r.Traffic = ReportTraffic{PushRawBytes: push.RawBytes, PushWireBytes: push.WireBytes, PullRawBytes: pull.RawBytes,
		PullWireBytes: pull.WireBytes, CodecSeconds: (push.Time + pull.Time).Seconds()}
	return r
}

// fraction returns nil for NaN (no test set), else a pointer to v.
func fraction(v float64) *float64 {
	if math.IsNaN(v) {
		return nil
	}
	return &v
}

func staleOf(st *ps.Stats) ReportStaleness {
	h := st.Histogram
	if h == nil {
		h = []uint64{}
	}
	return ReportStaleness{Mean: st.MeanStaleness(), Max: st.MaxStaleness, Histogram: h}
}

// processesOf lists the processes that ran the roles ps (in their order),
// one entry per host and pid.
func processesOf(ps []Process) []ReportProcess {
	type key struct {
		host string
		pid  int
	}
	var out []ReportProcess
	at := map[key]int{}
	for _, p := range ps {
		i, ok := at[key{p.Host, p.PID}]
		if !ok {
			i = len(out)
			at[key{p.Host, p.PID}] = i
			out = append(out, ReportProcess{Rank: p.Rank, Host: p.Host, PID: p.PID, Servers: []int{}, Learners: []int{}})
		}
		rp := &out[i]
		switch p.Role {
		case RoleServer:
			rp.Servers = append(rp.Servers, p.ID)
		case RoleLearner:
			rp.Learners = append(rp.Learners, p.ID)
		}
		if !slices.Contains(rp.Roles, string(p.Role)) {
			rp.Roles = append(rp.Roles, string(p.Role))
		}
	}
	order := []string{string(RoleServer), string(RoleLearner), string(RoleEvaluator)}
	for i := range out {
		rp := &out[i]
		slices.SortFunc(rp.Roles, func(a, b string) int { return slices.Index(order, a) - slices.Index(order, b) })
		slices.Sort(rp.Servers)
		slices.Sort(rp.Learners)
	}
	return out
}
