package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/isa"
	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/rdma/transportbench"
	"github.com/softsync/softsync/tools/internal/textfmt"
)

// Steps are the steps of bench all, in the order they run (--skip
// names them).
var Steps = []string{"peak", "gemm", "train", "pytorch", "data", "torchvision", "transport", "iperf3", "speedup"}

// trainNets are the trainings bench all measures, softsync and PyTorch.
var trainNets = []struct {
	model string
	batch int
}{{"lenet", 64}, {"lenet", 4}, {"cifar10_full", 100}, {"cifar10_full", 4}}

// AllConfig is a run of bench all (softsync bench all --help says what
// each step measures).
type AllConfig struct {
	Out, Doc     string   // the folder of results.json and summary.md; a page whose tables to regenerate ("": none)
	GoBench      []string // files of go test -bench output to add
	Quick        bool     // tiny sizes and times: checks that every step runs
	Repeat       int      // runs of each training, PyTorch and speedup figure (median kept)
	Images       int      // images per training run
	TorchSeconds float64  // timed seconds per PyTorch network and run
	TrainThreads []int    // thread counts of the trainings
	Skip         []string // steps not to run (of Steps)
	Python       string   // with Debian's python3-torch and python3-torchvision
	Script       string   // bench/torch_train_throughput.py
	DataScript   string   // bench/torch_data_throughput.py
	// ISA is the --isa every step runs at ("": each its default; the
	// trainings then run at both avx512 and avx2 on an AVX-512 host).
	ISA string
	// Info is the compute engine of this process: the machine the
	// results describe and the OpenBLAS core PyTorch is given.
	Info  kernels.Info
	Log   *slog.Logger
	Procs Processes
}

// ErrStepsFailed says that a step of softsync's own failed; the results
// list it under failed. A reference that could not run (PyTorch, iperf3)
// is recorded as missing without it.
var ErrStepsFailed = errors.New("some benchmarks failed (results.json lists them under failed)")

// benchRun is one run of bench all.
type benchRun struct {
	ctx  context.Context
	o    AllConfig
	res  *Results
	core string // OPENBLAS_CORETYPE softsync runs with, given to PyTorch too
	// The yardsticks, from the peak step: FMA GFLOP/s per level on one
	// core and on all cores, and the one-core copy bandwidth of the
	// largest buffer.
	peakOne, peakAll map[string]float64
	copyOne          float64
	ownFailed        bool // a softsync step failed (references may be missing without failing the run)
}

// All runs every step not skipped, each softsync benchmark in a process
// of its own (o.Procs), beside its references, and writes o.Out's
// results.json and summary.md (and o.Doc's tables); it returns
// ErrStepsFailed once they are written if one of softsync's own steps
// failed.
func All(ctx context.Context, o AllConfig) error {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	info := o.Info
	start := time.Now()
	r := &benchRun{ctx: ctx, o: o, core: info.CoreType, peakOne: map[string]float64{}, peakAll: map[string]float64{},
		res: &Results{Schema: Schema, Date: start.UTC().Truncate(time.Second), Quick: o.Quick,
			Commit: DetectCommit(), Machine: DetectMachine(info)}}
	o.Log.Info("bench all", "cpu", r.res.Machine.CPU, "isa", info.ISA, "core", info.CoreName, "load", r.res.Machine.LoadBefore)
	r.step("peak", r.peak)
	r.step("gemm", r.gemm)
	r.step("train", r.train)
	r.step("data", r.data)
	for _, path := range o.GoBench {
		r.step("go-bench "+path, func() error { return r.goBench(path) })
	}
	r.step("transport", r.transport)
	r.step("speedup", r.speedup)
	r.res.Seconds = time.Since(start).Seconds()
	r.res.Machine.LoadAfter = loadAverage()
	if err := WriteOutputs(r.res, o.Out, o.Doc); err != nil {
		return err
	}
	o.Log.Info("bench all done", "out", o.Out, "figures", len(r.res.Figures), "failed", len(r.res.Failed), "took", textfmt.Duration(r.res.Seconds))
	if r.ownFailed {
		return ErrStepsFailed
	}
	return nil
}

// step runs one step unless --skip names it, recording its failure.
func (r *benchRun) step(name string, f func() error) {
	if slices.Contains(r.o.Skip, name) {
		return
	}
	r.o.Log.Info("bench all", "step", name)
	if err := f(); err != nil {
		r.fail(name, err, true)
	}
}

func (r *benchRun) fail(step string, err error, own bool) {
	r.o.Log.Warn("bench all: step failed", "step", step, "err", err)
	r.res.Failed = append(r.res.Failed, Failure{Step: step, Reason: err.Error()})
	r.ownFailed = r.ownFailed || own
}

func (r *benchRun) add(f Figure) { r.res.Figures = append(r.res.Figures, f) }

// self runs softsync with args in a process of its own and decodes its
// JSON output into v.
func (r *benchRun) self(v any, args ...string) error {
	pre := []string{"--log-level", "warn"}
	if r.o.ISA != "" && !slices.Contains(args, "--isa") {
		pre = append(pre, "--isa", r.o.ISA) // as asked of bench all
	}
	return r.o.Procs.RunJSON(r.ctx, nil, v, slices.Concat(pre, args)...)
}

func (r *benchRun) peak() error {
	args := []string{"bench", "peak", "--json"}
	if r.o.Quick {
		args = append(args, "--min-time", "5ms", "--rounds", "1", "--copy-sizes", "256KiB,1MiB")
	}
	var p PeakResult
	if err := r.self(&p, args...); err != nil {
		return err
	}
	stat := "best of 5 rounds"
	for _, l := range p.Levels {
		r.peakOne[l.ISA], r.peakAll[l.ISA] = l.GFlopsCore, l.GFlops
		params := map[string]any{"isa": l.ISA}
		r.add(Figure{Group: "peak", Name: "FMA " + l.ISA + ", one core", Params: params, Value: l.GFlopsCore, Unit: "GFLOP/s", Stat: stat, Runs: []float64{l.GFlopsCore}})
		r.add(Figure{Group: "peak", Name: fmt.Sprintf("FMA %s, %d cores", l.ISA, l.Cores), Params: params, Value: l.GFlops, Unit: "GFLOP/s", Stat: stat, Runs: []float64{l.GFlops}})
	}
	for _, c := range p.Copy {
		r.copyOne = c.GBsCore // the largest buffer is last
		params := map[string]any{"bytes": c.Bytes}
		r.add(Figure{Group: "peak", Name: "copy " + textfmt.Size(c.Bytes) + ", one core", Params: params, Value: c.GBsCore, Unit: "GB/s", Stat: stat, Runs: []float64{c.GBsCore}})
		r.add(Figure{Group: "peak", Name: fmt.Sprintf("copy %s, %d cores", textfmt.Size(c.Bytes), c.Cores), Params: params, Value: c.GBs, Unit: "GB/s", Stat: stat, Runs: []float64{c.GBs}})
	}
	return nil
}

func (r *benchRun) gemm() error {
	args := []string{"bench", "gemm", "--json"}
	if r.o.Quick {
		args = append(args, "--sizes", "64x64x64", "--min-time", "1ms", "--rounds", "1")
	}
	var rows []GemmResult
	if err := r.self(&rows, args...); err != nil {
		return err
	}
	for _, g := range rows {
		f := Figure{Group: "gemm", Name: fmt.Sprintf("sgemm %d×%d×%d, Go API", g.M, g.N, g.K),
			Params: map[string]any{"m": g.M, "n": g.N, "k": g.K}, Value: g.GFlops, Unit: "GFLOP/s",
			Stat: "best of 4 rounds", Runs: []float64{g.GFlops}, Extra: map[string]float64{"pure_go_gflops": g.GFlopsRef}}
		f.Compare("raw C loop over cblas_sgemm, same process", g.GFlopsC, "GFLOP/s", []float64{g.GFlopsC})
		r.add(f)
	}
	return nil
}

// trainKey names one training configuration of the train step.
type trainKey struct {
	model          string
	batch, threads int
	isa            string // "" = the best level
}

// train runs softsync's trainings and PyTorch's, alternating, --repeat
// times, and adds their medians side by side.
func (r *benchRun) train() error {
	levels := []string{""}
	switch {
	case r.o.ISA != "":
		levels = []string{r.o.ISA}
	case isa.Supported(isa.AVX512):
		levels = []string{"avx512", "avx2"} // both levels appear on an AVX-512 host
	}
	images, seconds := r.o.Images, r.o.TorchSeconds
	if r.o.Quick {
		images, seconds = 100, 0.2
	}
	runs := map[trainKey][]TrainResult{}
	torch := map[trainKey][]torchResult{}
	torchErr := map[int]error{}
	torchVersion := ""
	var nets [][2]string
	for _, n := range trainNets {
		nets = append(nets, [2]string{n.model, strconv.Itoa(n.batch)})
	}
	var keys []trainKey
	for rep := range r.o.Repeat {
		for _, th := range r.o.TrainThreads {
			for _, n := range trainNets {
				for _, l := range levels {
					k := trainKey{n.model, n.batch, th, l}
					if rep == 0 {
						keys = append(keys, k)
					}
					args := []string{"--threads", strconv.Itoa(th)}
					if l != "" {
						args = append(args, "--isa", l)
					}
					args = append(args, "bench", "train", "--model", n.model, "--batch", strconv.Itoa(n.batch),
						"--images", strconv.Itoa(images), "--json")
					var res TrainResult
					if err := r.self(&res, args...); err != nil {
						r.fail("train", err, true) // the other runs go on
						continue
					}
					runs[k] = append(runs[k], res)
				}
			}
			if slices.Contains(r.o.Skip, "pytorch") || torchErr[th] != nil {
				continue
			}
			cfg := torchConfig{Python: r.o.Python, Script: r.o.Script, Seconds: seconds, CoreType: r.core}
			v, res, err := runTorch(r.ctx, cfg, th, nets)
			if err != nil {
				torchErr[th] = err
				r.fail(fmt.Sprintf("pytorch, %d threads", th), err, false)
				continue
			}
			torchVersion = v
			for _, t := range res {
				k := trainKey{t.Model, t.Batch, th, ""}
				torch[k] = append(torch[k], t)
			}
		}
	}
	r.addTrain(keys, runs, trainRefs{torch, torchErr, torchVersion}, images)
	return nil
}

// trainRefs are the PyTorch runs of the train step: results per
// configuration (isa ""), the error of each thread count whose runs
// failed, and PyTorch's version.
type trainRefs struct {
	runs    map[trainKey][]torchResult
	err     map[int]error
	version string
}

// addTrain adds the trainings' figures: per configuration the median
// images/s beside PyTorch's, and for the runs on all cores the median
// GFLOP/s beside the peak the same processes measured.
func (r *benchRun) addTrain(keys []trainKey, runs map[trainKey][]TrainResult, torch trainRefs, images int) {
	refName := "PyTorch " + torch.version + " (bench/torch_train_throughput.py), same threads"
	for _, k := range keys {
		rs := runs[k]
		if len(rs) == 0 {
			continue // every run failed (listed under failed)
		}
		ips, cpu, gf, pk := make([]float64, len(rs)), make([]float64, len(rs)), make([]float64, len(rs)), make([]float64, len(rs))
		for i, x := range rs {
			ips[i], gf[i], pk[i] = x.ImagesPerSec, x.GFlops, x.PeakGFlops
			if x.CPUSeconds > 0 {
				cpu[i] = x.ImagesPerSec * x.Seconds / x.CPUSeconds
			}
		}
		level := rs[0].ISA
		params := map[string]any{"model": k.model, "batch": k.batch, "threads": k.threads, "isa": level, "images": images}
		name := fmt.Sprintf("%s μ=%d, %s, %s", k.model, k.batch, plural(k.threads, "thread"), level)
		f := Figure{Group: "train", Name: name, Params: params, Value: median(ips), Unit: "images/s",
			Stat: medianOf(len(rs)), Runs: ips, Extra: map[string]float64{"images_per_cpu_s": median(cpu)}}
		tk := trainKey{k.model, k.batch, k.threads, ""}
		switch ts := torch.runs[tk]; {
		case len(ts) > 0:
			tips, tcpu := make([]float64, len(ts)), make([]float64, len(ts))
			for i, t := range ts {
				tips[i], tcpu[i] = t.ImagesPerSec, t.ImagesPerCPU
			}
			f.Compare(refName, median(tips), "images/s", tips)
			f.Ref.Extra = map[string]float64{"images_per_cpu_s": median(tcpu)}
			if c := median(tcpu); c > 0 {
				f.Extra["ratio_per_cpu_s"] = median(cpu) / c
			}
		case torch.err[k.threads] != nil:
			f.Ref = &Ref{Name: "PyTorch", Missing: torch.err[k.threads].Error()}
		default:
			f.Ref = &Ref{Name: "PyTorch", Missing: "no PyTorch run of this configuration (--skip pytorch?)"}
		}
		r.add(f)
		// The FLOP rate against the peak of all cores, for the runs on
		// all cores.
		if k.threads == r.res.Machine.Cores {
			ff := Figure{Group: "train-flops", Name: name, Params: params, Value: median(gf), Unit: "GFLOP/s",
				Stat: medianOf(len(rs)), Runs: gf}
			ff.Compare(fmt.Sprintf("bench peak %s, %d cores, same process", level, k.threads), median(pk), "GFLOP/s", pk)
			r.add(ff)
		}
	}
}

// goBench adds the results of a go test -bench output file: the
// convolution layers beside the one-core FMA peak of their level, the
// memory-bound layers beside the one-core copy bandwidth, the solver's
// passes beside memmove of the same bytes.
func (r *benchRun) goBench(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	list, err := parseGoBench(b)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	memmove := map[string]float64{} // ps/sgd: vector length → GB/s
	for _, x := range list {
		if rest, ok := strings.CutPrefix(x.Name, "Update/"); ok && strings.HasSuffix(rest, "/memmove") {
			memmove[strings.TrimSuffix(rest, "/memmove")], _ = x.primary()
		}
	}
	for _, x := range list {
		v, unit := x.primary()
		f := Figure{Group: filepath.Base(x.Pkg), Name: x.Name, Params: map[string]any{"pkg": x.Pkg, "iterations": x.N},
			Value: v, Unit: unit, Stat: "one go test -bench run", Runs: []float64{v}}
		parts := strings.Split(x.Name, "/")
		switch {
		case len(parts) == 4 && parts[0] == "Conv" && strings.HasSuffix(parts[1], "-1thread"):
			l := strings.TrimSuffix(strings.TrimPrefix(parts[1], "native-"), "-1thread")
			f.Compare("bench peak "+l+", one core", r.peakOne[l], "GFLOP/s", nil)
		case len(parts) == 4 && parts[0] == "Layers":
			f.Compare("copy bandwidth, one core, largest bench peak buffer", r.copyOne, "GB/s", nil)
		case f.Group == "sgd" && strings.HasPrefix(x.Name, "Update/n=") && !strings.HasSuffix(x.Name, "/memmove"):
			f.Compare("memmove of the same bytes", memmove[parts[1]], "GB/s", nil)
		case f.Group == "sgd" && strings.HasPrefix(x.Name, "FirstNonFinite/"):
			f.Compare("memmove of the same bytes", memmove["n=431080"], "GB/s", nil)
		}
		if f.Group == "sgd" {
			f.Group = "solver"
		}
		r.add(f)
	}
	return nil
}

// transport runs bench transport (inmem, tcp and shm, then verbs-emu, which
// needs the verbs build tag) and iperf3, the TCP reference.
func (r *benchRun) transport() error {
	args := []string{"bench", "transport", "--json", "--sizes", "1M,16M", "--min-time", "500ms"}
	iperfSec := 3
	if r.o.Quick {
		args = []string{"bench", "transport", "--json", "--sizes", "64K", "--codecs", "none,fp16", "--min-time", "10ms"}
		iperfSec = 1
	}
	var rows []transportbench.Row
	if err := r.self(&rows, append(args, "--transports", "inmem,tcp,shm")...); err != nil {
		return err
	}
	var emu []transportbench.Row
	if err := r.self(&emu, append(args, "--transports", "verbs-emu", "--baseline=false")...); err != nil {
		r.fail("transport verbs-emu", err, true)
	}
	rows = append(rows, emu...)
	iperfRef := &Ref{Name: "iperf3", Missing: "not run (--skip iperf3)"}
	if !slices.Contains(r.o.Skip, "iperf3") {
		ip, err := runIperf(r.ctx, iperfSec)
		if err != nil {
			iperfRef.Missing = err.Error()
			r.fail("iperf3", err, false)
		} else {
			iperfRef = &Ref{Name: fmt.Sprintf("%s, one TCP stream over loopback, %s buffer", ip.Version, textfmt.Size(ip.BufBytes)),
				Value: ip.GBps, Unit: "GB/s", Runs: []float64{ip.GBps}}
		}
	}
	for _, x := range rows {
		name := fmt.Sprintf("%s %s %s", x.Transport, x.Codec, textfmt.Size(x.Bytes))
		if x.Emulated {
			name += " (emulated)"
		}
		f := Figure{Group: "transport", Name: name,
			Params: map[string]any{"transport": x.Transport, "codec": x.Codec, "bytes": x.Bytes, "conn": x.Conn},
			Value:  x.GBps, Unit: "GB/s", Stat: "median round", Runs: []float64{x.GBps},
			Extra: map[string]float64{"wire_ratio": x.Ratio, "encode_ms": 1e3 * x.EncodeSec, "decode_ms": 1e3 * x.DecodeSec}}
		if strings.HasPrefix(x.Transport, "tcp") && (x.Codec == "none" || x.Codec == "-") {
			ref := *iperfRef
			f.Ref = &ref
			if ref.Value > 0 {
				f.Compare(ref.Name, ref.Value, ref.Unit, ref.Runs)
			}
		}
		r.add(f)
	}
	return nil
}

// speedup runs bench speedup (λ = 1 and 2 learner processes, tcp and
// shm side by side, --repeat rounds) on LeNet μ = 64 and, when CIFAR-10 is in
// ./cifar-10-batches-bin, cifar10_full μ = 100 (else that is listed as a
// missing reference, not a failure); the reference of λ = 2 is twice the
// same model, transport and protocol's λ = 1.
func (r *benchRun) speedup() error {
	models := []string{"lenet:64", "cifar10_full:100"}
	steps := map[string]int{"lenet:64": 200, "cifar10_full:100": 50} // a job of a few seconds each
	for _, m := range models {
		steps, repeat := steps[m], r.o.Repeat
		var dataArgs []string
		if _, err := os.Stat(cluster.CIFAR10Dir); err != nil && strings.HasPrefix(m, "cifar10_full") {
			dataArgs = []string{"--data", "synthetic"} // the same images/s: the work does not depend on the pixels
		}
		if r.o.Quick {
			m, _, _ = strings.Cut(m, ":")
			m, steps, repeat = m+":8", 5, 1
		}
		args := append([]string{"bench", "speedup", "--json", "--model", m, "--transport", "tcp,shm", "--ceiling",
			"--steps", strconv.Itoa(steps), "--repeat", strconv.Itoa(repeat)}, dataArgs...)
		var rows []SpeedupRow
		if err := r.self(&rows, args...); err != nil {
			return err
		}
		r.addSpeedup(rows)
	}
	return nil
}

func (r *benchRun) addSpeedup(rows []SpeedupRow) {
	base := map[string]float64{}
	for _, x := range rows {
		key := fmt.Sprintf("%s, %s, %s", ModelBatch{x.Model, x.Batch}, x.Transport, x.Protocol)
		if x.Data != "" {
			key += ", " + x.Data + " data"
		}
		f := Figure{Group: "speedup", Name: fmt.Sprintf("%s, λ=%d", key, x.Learners),
			Params: map[string]any{"model": x.Model, "batch": x.Batch, "data": x.Data, "transport": x.Transport, "protocol": x.Protocol,
				"learners": x.Learners, "steps": x.Steps},
			Value: x.ImagesPerSec, Unit: "images/s", Stat: medianOf(len(x.Runs)), Runs: x.Runs,
			Extra: map[string]float64{"speedup": x.Speedup}}
		for _, p := range x.Processes {
			role, _, _ := strings.Cut(p.Process, " ")
			k := "peak_rss_mib_" + role
			f.Extra[k] = max(f.Extra[k], float64(p.PeakRSS)/(1<<20))
		}
		if b, ok := base[key]; ok {
			f.Compare(fmt.Sprintf("%d × λ=1 (linear scaling)", x.Learners), b*float64(x.Learners), "images/s", nil)
		} else {
			base[key] = x.ImagesPerSec / float64(x.Learners)
		}
		r.add(f)
	}
}

// medianOf names the statistic of a figure taken over n runs.
func medianOf(n int) string {
	if n == 1 {
		return "one run"
	}
	return fmt.Sprintf("median of %d runs", n)
}

// plural returns "1 thread", "2 threads".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
