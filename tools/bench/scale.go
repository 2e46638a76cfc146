package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/softsync/softsync/ps/sim/costmodel"
)

// ScalePlan is where the processes of softsync bench scale run: of the C
// CPUs it may use, counted from 0 in increasing order, shard server k on
// the k-th, the head on the S shard servers', learner r on the (S + r)-th,
// for λ = 1, 2, 4, … up to C − S (and C − S itself). With fewer than S + 2 CPUs there is no curve of
// processes on CPUs of their own: then the CPUs are counted modulo C
// (learner r on the ((S + r) mod C)-th), λ goes up to C, and the jobs where
// λ + S > C share CPUs between shard servers and learners.
type ScalePlan struct {
	CPUs     []int  `json:"cpus"` // the CPUs this process may use, in order
	Shards   int    `json:"shards"`
	Learners []int  `json:"learners"` // the λ values, increasing
	Note     string `json:"note,omitempty"`
}

// PlanScale plans bench scale on cpus with shards shard servers, up to
// maxLearners learners (0: as many as fit).
func PlanScale(cpus []int, shards, maxLearners int) ScalePlan {
	p := ScalePlan{CPUs: cpus, Shards: shards}
	top := len(cpus) - shards
	if top < 2 {
		top = len(cpus)
		p.Note = fmt.Sprintf("too few CPUs for a scaling curve: %d CPU(s), and %d shard server(s) and 2 learners need %d; "+
			"running what fits, λ up to %d, the jobs marked shared with shard servers and learners on the same CPUs", len(cpus), shards, shards+2, top)
	}
	if maxLearners > 0 {
		top = min(top, maxLearners)
	}
	for l := 1; l < top; l *= 2 {
		p.Learners = append(p.Learners, l)
	}
	if top >= 1 {
		p.Learners = append(p.Learners, top)
	}
	return p
}

// Shared reports whether the job of λ learners puts two processes (the
// head aside) on one CPU.
func (p ScalePlan) Shared(learners int) bool { return learners+p.Shards > len(p.CPUs) }

// CPUsOf returns the CPUs a process of role ("eval", "ps", "learner") and
// id runs on.
func (p ScalePlan) CPUsOf(role string, id int) []int {
	c := len(p.CPUs)
	switch role {
	case "eval":
		return p.CPUs[:min(p.Shards, c)]
	case "ps":
		return []int{p.CPUs[id%c]}
	}
	return []int{p.CPUs[(p.Shards+id)%c]}
}

// simCPUs are the CPUs the prediction's inputs are measured on: those of
// the shard servers and of the first learner.
func (p ScalePlan) simCPUs() []int { return p.CPUs[:min(len(p.CPUs), p.Shards+1)] }

// ScaleRow is one job of softsync bench scale beside its prediction.
type ScaleRow struct {
	Protocol      string        `json:"protocol"` // hardsync, or softsync with n = λ
	Learners      int           `json:"learners"`
	ImagesPerSec  float64       `json:"images_per_sec"`
	Speedup       float64       `json:"speedup"`    // over the same protocol's λ = 1
	Efficiency    float64       `json:"efficiency"` // speedup / λ
	MeanStaleness float64       `json:"mean_staleness"`
	MaxStaleness  int           `json:"max_staleness"`
	Predicted     costmodel.Row `json:"predicted"` // softsync sim's row of the same λ and protocol
	Error         float64       `json:"error"`     // (predicted − measured) / measured images/s
	Steps         int64         `json:"steps"`
	Seconds       float64       `json:"seconds"`
	Shared        bool          `json:"shared"` // shard servers and learners shared CPUs
	Processes     []ProcUsage   `json:"processes"`
}

// ScaleResult is the output of softsync bench scale --json.
type ScaleResult struct {
	Model     string            `json:"model"`
	Batch     int               `json:"batch"`
	Transport string            `json:"transport"`
	Plan      ScalePlan         `json:"plan"`
	Inputs    *costmodel.Inputs `json:"inputs"` // softsync sim's, measured in the same run
	Rows      []ScaleRow        `json:"rows"`
}

// SimProtocolName is softsync sim's name of a job's protocol.
func SimProtocolName(proto string) string {
	if proto == "softsync" {
		return "λ-softsync"
	}
	return proto
}

// ScaleConfig is a run of bench scale: the same job (Model at μ = Batch,
// Steps mini-batches per learner of one compute thread, Shards shard
// servers) for every λ of Plan and every protocol (hardsync, softsync
// with n = λ) of Protocols, over Transport (tcp or shm).
type ScaleConfig struct {
	Model     string
	Batch     int
	Steps     int
	Shards    int
	Protocols []string
	Transport string
	Plan      ScalePlan
	Engine    string // --engine of the prediction's process
	Procs     Processes
}

// Scale predicts the jobs of cfg.Plan with softsync sim, run pinned to
// the CPUs of the shard servers and the first learner, then runs them,
// protocol by protocol, λ increasing, each process pinned where the plan
// puts it.
func Scale(ctx context.Context, cfg ScaleConfig) (*ScaleResult, error) {
	plan := cfg.Plan
	var pred struct {
		Inputs *costmodel.Inputs `json:"inputs"`
		Rows   []costmodel.Row   `json:"rows"`
	}
	var ls, sps []string
	for _, l := range plan.Learners {
		ls = append(ls, strconv.Itoa(l))
	}
	for _, p := range cfg.Protocols {
		sps = append(sps, SimProtocolName(p))
	}
	args := []string{"--log-level", "warn", "--threads", "1", "--engine", cfg.Engine,
		"sim", "--json", "--model", cfg.Model, "--batch", strconv.Itoa(cfg.Batch), "--learners", strings.Join(ls, ","),
		"--protocols", strings.Join(sps, ","), "--link", cfg.Transport, "--shards", strconv.Itoa(cfg.Shards), "--steps", strconv.Itoa(cfg.Steps)}
	if err := cfg.Procs.RunJSON(ctx, plan.simCPUs(), &pred, args...); err != nil {
		return nil, fmt.Errorf("the prediction: %w", err)
	}
	res := &ScaleResult{Model: cfg.Model, Batch: cfg.Batch, Transport: cfg.Transport, Plan: plan, Inputs: pred.Inputs}
	for _, proto := range cfg.Protocols {
		var base float64
		for _, l := range plan.Learners {
			j := Job{ModelBatch: ModelBatch{cfg.Model, cfg.Batch}, Protocol: proto, Transport: cfg.Transport,
				Learners: l, Shards: cfg.Shards, Steps: cfg.Steps, Pin: plan.CPUsOf}
			out, err := j.run(ctx, cfg.Procs, nil)
			if err != nil {
				return nil, err
			}
			rep := out.Report
			if base == 0 {
				base = rep.ImagesPerSec / float64(l)
			}
			r := ScaleRow{Protocol: proto, Learners: l, ImagesPerSec: rep.ImagesPerSec, Speedup: rep.ImagesPerSec / base,
				MeanStaleness: rep.Staleness.Mean, MaxStaleness: rep.Staleness.Max,
				Steps: rep.Steps, Seconds: rep.Seconds, Shared: plan.Shared(l), Processes: out.Usage}
			r.Efficiency = r.Speedup / float64(l)
			for _, p := range pred.Rows {
				if p.Learners == l && p.Protocol == SimProtocolName(proto) {
					r.Predicted = p
					r.Error = (p.ImagesPerSec - rep.ImagesPerSec) / rep.ImagesPerSec
				}
			}
			res.Rows = append(res.Rows, r)
		}
	}
	return res, nil
}
