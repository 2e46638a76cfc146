package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps"
)

// SpeedupRow is one job of softsync bench speedup.
type SpeedupRow struct {
	Model        string      `json:"model"`
	Batch        int         `json:"batch"`
	Data         string      `json:"data"`           // --data as given ("": the model's default)
	Transport    string      `json:"transport"`      // as asked (--transport)
	Used         string      `json:"transport_used"` // the learners' connections' (the report's: shm for auto on one host); "" for independent jobs
	Protocol     string      `json:"protocol"`
	Learners     int         `json:"learners"`
	Shards       int         `json:"shards"`
	EarlyPush    bool        `json:"early_push"`
	Bind         string      `json:"bind"`           // launch --bind ("" for independent jobs)
	ImagesPerSec float64     `json:"images_per_sec"` // of the median run
	Runs         []float64   `json:"runs"`           // images/s of every run, in order
	Speedup      float64     `json:"speedup"`        // images/s over λ = the first --learners of the same model, transport, protocol, shards and early push
	Efficiency   float64     `json:"efficiency"`     // speedup / (λ / the first λ)
	Steps        int64       `json:"steps"`
	Seconds      float64     `json:"seconds"`
	Processes    []ProcUsage `json:"processes"` // of the median run: the head, the shard servers, the learners (none for independent jobs)
}

// Independent is the transport of bench speedup's rows of independent
// jobs (SpeedupGrid.Ceiling).
const Independent = "independent"

// SpeedupGrid is what bench speedup varies: every combination of its
// lists is a job.
type SpeedupGrid struct {
	Models     []ModelBatch
	Data       string // train's --data ("": each model's own)
	Protocols  []string
	Learners   []int
	Transports []string
	Shards     []int
	EarlyPush  []bool
	Binds      []string // launch --bind values
	Steps      int      // mini-batches per learner
	// Ceiling adds, at each λ, λ independent one-learner jobs at once in
	// this process (runIndependent).
	Ceiling bool
}

// Jobs returns the jobs of bench speedup in the order they run in each
// round: by model, protocol, λ, then transport, shard count, early push
// and binding, so that the variants of one λ run side by side; with
// Ceiling, each model's independent jobs for every λ first.
func (g SpeedupGrid) Jobs() []Job {
	var js []Job
	for _, m := range g.Models {
		for _, l := range g.Learners {
			if g.Ceiling {
				js = append(js, Job{ModelBatch: m, Data: "synthetic", Protocol: "none", Transport: Independent, Learners: l, Steps: g.Steps})
			}
		}
		for _, proto := range g.Protocols {
			for _, l := range g.Learners {
				for _, tr := range g.Transports {
					for _, s := range g.Shards {
						for _, e := range g.EarlyPush {
							for _, b := range g.Binds {
								js = append(js, Job{ModelBatch: m, Data: g.Data, Protocol: proto, Transport: tr, Learners: l, Shards: s,
									EarlyPush: e, Bind: b, Steps: g.Steps})
							}
						}
					}
				}
			}
		}
	}
	return js
}

// SpeedupConfig is a run of bench speedup.
type SpeedupConfig struct {
	Jobs   []Job
	Repeat int // runs of each job, in rounds of all the jobs
	Procs  Processes
	// Engine returns the compute engine of one thread the independent
	// jobs run on, created on first use (nil without independent jobs).
	Engine func() (kernels.Engine, error)
}

// Speedup runs every job cfg.Repeat times, in rounds, and returns a row
// per job from its median run, the speedup over the first λ of the same
// model, protocol, transport, shard count, early push and binding.
func Speedup(ctx context.Context, cfg SpeedupConfig) ([]SpeedupRow, error) {
	runs := make([][]*JobResult, len(cfg.Jobs))
	for range cfg.Repeat {
		for i, j := range cfg.Jobs {
			res, err := j.run(ctx, cfg.Procs, cfg.Engine)
			if err != nil {
				return nil, err
			}
			runs[i] = append(runs[i], res)
		}
	}
	return speedupRows(cfg.Jobs, runs), nil
}

// speedupRows makes a row of each job from its runs (runs[i] are job i's,
// each with its report): the median run by images/s (the lower of the two
// middle ones for an even count), the speedup over the first job of the
// same model, protocol, transport, shard count, early push and binding.
func speedupRows(jobs []Job, runs [][]*JobResult) []SpeedupRow {
	var rows []SpeedupRow
	base := map[string]SpeedupRow{} // the first row of each model, protocol, transport, shard count, early push and binding
	for i, j := range jobs {
		r := SpeedupRow{Model: j.Model, Batch: j.Batch, Data: j.Data, Transport: j.Transport, Protocol: j.Protocol, Learners: j.Learners,
			Shards: j.Shards, EarlyPush: j.EarlyPush, Bind: j.Bind}
		for _, x := range runs[i] {
			r.Runs = append(r.Runs, x.Report.ImagesPerSec)
		}
		sorted := slices.SortedStableFunc(slices.Values(runs[i]), func(a, b *JobResult) int { return cmp.Compare(a.Report.ImagesPerSec, b.Report.ImagesPerSec) })
		mid := sorted[(len(sorted)-1)/2]
		r.ImagesPerSec, r.Steps, r.Seconds, r.Processes, r.Used = mid.Report.ImagesPerSec, mid.Report.Steps, mid.Report.Seconds, mid.Usage, mid.Report.Transport
		key := fmt.Sprintf("%s %s %s %d %v %s", j.ModelBatch, j.Protocol, j.Transport, j.Shards, j.EarlyPush, j.Bind)
		b, ok := base[key]
		if !ok {
			b, base[key] = r, r
		}
		r.Speedup = r.ImagesPerSec / b.ImagesPerSec
		r.Efficiency = r.Speedup * float64(b.Learners) / float64(r.Learners)
		rows = append(rows, r)
	}
	return rows
}

// ModelBatch is a network and its mini-batch size μ.
type ModelBatch struct {
	Model string
	Batch int
}

func (m ModelBatch) String() string { return fmt.Sprintf("%s μ=%d", m.Model, m.Batch) }

// Job is one training job of the process benchmarks: Steps mini-batches
// per learner of one compute thread, random order, a small test subset
// (of synthetic data, only the training images of the steps: one epoch),
// run as processes on this host (Processes.Launch), or, with transport
// Independent, as λ independent jobs in this process.
type Job struct {
	ModelBatch
	Data                string // train's --data ("": the model's default)
	Protocol, Transport string
	Learners, Shards    int
	EarlyPush           bool
	Bind                string // launch --bind ("": learners)
	Steps               int
	Pin                 func(role string, id int) []int // LaunchJob.Pin
}

func (j Job) run(ctx context.Context, procs Processes, engine func() (kernels.Engine, error)) (*JobResult, error) {
	if j.Transport == Independent {
		e, err := engine()
		if err != nil {
			return nil, err
		}
		return runIndependent(ctx, e, j)
	}
	args := []string{"--model", j.Model, "--batch", strconv.Itoa(j.Batch), "--epochs", "1000",
		"--max-steps", strconv.Itoa(j.Steps * j.Learners), "--protocol", j.Protocol, "--transport", j.Transport,
		"--test-subset", "100", "--quiet", "--lr", "0.01"}
	if j.EarlyPush {
		args = append(args, "--early-push")
	}
	if j.Data != "" {
		args = append(args, "--data", j.Data)
	}
	if j.Data == "synthetic" {
		// The images of the steps, one epoch, and no more: every process
		// holding the data makes them (alexnet's 50,000 would be 7.7 GB).
		args = append(args, "--train-subset", strconv.Itoa(j.Steps*j.Learners*j.Batch))
	}
	res, err := procs.Launch(ctx, LaunchJob{Learners: j.Learners, Shards: j.Shards, Bind: cmp.Or(j.Bind, "learners"), Pin: j.Pin,
		Threads: 1, Train: args})
	if err != nil {
		return nil, fmt.Errorf("%s, %s over %s with %d learners: %w", j.ModelBatch, j.Protocol, j.Transport, j.Learners, err)
	}
	return res, nil
}

// runIndependent runs j.Learners one-learner jobs of j's model at once in
// this process on e (one compute thread), each with its parameter server
// in process (bench train's job on random data), and returns them as the
// report of one job: their images over the time of the slowest. It is
// what λ learners make when nothing but the machine is shared (no
// transport, no shard server or head processes): the ceiling of the
// speedup of the same per-learner work on this machine.
func runIndependent(ctx context.Context, e kernels.Engine, j Job) (*JobResult, error) {
	spec, err := nn.Load(j.Model)
	if err != nil {
		return nil, fmt.Errorf("--model: %w", err)
	}
	cfg := trainJob(spec, e, j.Batch, 1, 1, j.Steps, ps.Hardsync, "inmem")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make([]*cluster.Job, j.Learners)
	for i := range jobs {
		if jobs[i], err = cluster.Start(ctx, cfg); err != nil {
			cancel()
			for _, started := range jobs[:i] {
				started.Wait()
			}
			return nil, fmt.Errorf("%s, independent job %d: %w", j.ModelBatch, i, err)
		}
	}
	results, errs := make([]*cluster.Result, len(jobs)), make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, job := range jobs {
		wg.Go(func() { results[i], errs[i] = job.Wait() })
	}
	wg.Wait()
	rep := &cluster.Report{}
	for i, res := range results {
		if errs[i] != nil {
			return nil, fmt.Errorf("%s, independent job %d of %d: %w", j.ModelBatch, i, len(jobs), errs[i])
		}
		rep.Steps += res.Steps
		rep.Seconds = max(rep.Seconds, res.Seconds)
	}
	rep.ImagesPerSec = float64(rep.Steps*int64(j.Batch)) / rep.Seconds
	return &JobResult{Report: rep, Usage: []ProcUsage{}}, nil
}
