package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/softsync/softsync/learner/cluster"

	"github.com/softsync/softsync/learner"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
)

// runErr runs softsync with args and returns its output and error.
func runErr(args ...string) (string, error) {
	var out bytes.Buffer
	root := newRootCmd(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// idxFolder writes synthetic training and test sets of 28×28 images, 10
// classes, as idx files under MNIST's names into a new folder.
func idxFolder(t *testing.T, train, test int) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []struct {
		images, labels string
		n              int
	}{{data.MNISTTrainImages, data.MNISTTrainLabels, train}, {data.MNISTTestImages, data.MNISTTestLabels, test}} {
		ds := data.Synthetic(f.n, 1, 28, 28, 10, uint64(f.n))
		if err := data.WriteIDX(filepath.Join(dir, f.images), filepath.Join(dir, f.labels), ds, true); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func readReport(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return r
}

// TestTrainSingle trains the mlp on an MNIST subset with every output,
// then reloads the saved weights and evaluates them: the same test error.
func TestTrainSingle(t *testing.T) {
	dir := t.TempDir()
	js, plot, w := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.png"), filepath.Join(dir, "w.bin")
	out := run(t, "train", "--model", "mlp", "--epochs", "2", "--train-subset", "2000", "--test-subset", "500",
		"--batch", "32", "--lr", "0.05", "--json", js, "--plot", plot, "--save", w, "--quiet")
	for _, want := range []string{"test error", "training time", "images/s"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	r := readReport(t, js)
	te, _ := r["test_error"].(float64)
	if r["model"] != "mlp" || r["learners"] != 1.0 || r["batch"] != 32.0 || r["epochs"] != 2.0 || r["epochs_done"] != 2.0 ||
		r["protocol"] != "hardsync" || r["transport"] != "inmem" || r["compress"] != "none" ||
		!(te > 0 && te < 0.25) || !(r["images_per_sec"].(float64) > 0) {
		t.Errorf("report %v", r)
	}
	hist, _ := r["history"].([]any)
	if len(hist) != 2 {
		t.Fatalf("history %v", r["history"])
	}
	h0, h1 := hist[0].(map[string]any), hist[1].(map[string]any)
	if h0["epoch"] != 1.0 || h1["epoch"] != 2.0 || h1["train_loss"].(float64) >= h0["train_loss"].(float64) ||
		h1["test_error"] != te || !(h1["seconds"].(float64) >= h0["seconds"].(float64)) {
		t.Errorf("history %v", hist)
	}
	if st := r["staleness"].(map[string]any); st["max"] != 0.0 || len(st["histogram"].([]any)) != 1 {
		t.Errorf("single learner staleness %v", st)
	}
	f, err := os.Open(plot)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(f)
	f.Close()
	if err != nil || img.Bounds().Dx() < 500 || img.Bounds().Dy() < 300 {
		t.Errorf("plot: %v, %v", err, img.Bounds())
	}
	spec, _ := nn.Builtin("mlp")
	if _, err := learner.LoadWeights(w, spec); err != nil {
		t.Fatal(err)
	}
	js2 := filepath.Join(dir, "eval.json")
	run(t, "train", "--model", "mlp", "--load", w, "--epochs", "0", "--test-subset", "500", "--json", js2, "--quiet")
	if r2 := readReport(t, js2); r2["test_error"] != te || r2["steps"] != 0.0 {
		t.Errorf("reloaded weights: test error %v after %v steps, trained %v", r2["test_error"], r2["steps"], te)
	}
	if _, err := runErr("train", "--model", "lenet", "--load", w, "--epochs", "0"); err == nil ||
		!strings.Contains(err.Error(), "--load") || !strings.Contains(err.Error(), w) {
		t.Errorf("mlp weights into lenet: %v", err)
	}
	_, err = runErr("train", "--model", "mlp", "--load", w, "--epochs", "0", "--test-subset", "500", "--expect-error", "0.001", "--quiet")
	if err == nil || !strings.Contains(err.Error(), "--expect-error") {
		t.Errorf("--expect-error 0.001 with test error %v: %v", te, err)
	}
}

// TestTrainDistributed runs asynchronous learners over loopback TCP with
// two shards and a codec; the report must add up.
func TestTrainDistributed(t *testing.T) {
	js := filepath.Join(t.TempDir(), "r.json")
	out := run(t, "train", "--model", "mlp", "--epochs", "1", "--max-steps", "120", "--train-subset", "3000",
		"--test-subset", "300", "--batch", "8", "--learners", "3", "--protocol", "softsync", "--n", "3",
		"--shards", "2", "--transport", "tcp", "--compress", "shuffle+s2", "--overlap", "--json", js, "--quiet")
	for _, want := range []string{"staleness", "updates", "bytes sent", "3-softsync", "1 process on 1 host;"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	r := readReport(t, js)
	// One process, listed once with every role it ran.
	if ps := r["processes"].([]any); len(ps) != 1 {
		t.Errorf("processes %v, want this one process", ps)
	} else if p := ps[0].(map[string]any); fmt.Sprint(p["roles"]) != "[server learner evaluator]" ||
		fmt.Sprint(p["learners"]) != "[0 1 2]" || fmt.Sprint(p["servers"]) != "[0]" || p["pid"] != float64(os.Getpid()) {
		t.Errorf("process %v, want roles [server learner evaluator], learners [0 1 2], servers [0], pid %d", p, os.Getpid())
	}
	if r["learners"] != 3.0 || r["protocol"] != "softsync" || r["n"] != 3.0 || r["shards"] != 2.0 ||
		r["transport"] != "tcp" || r["compress"] != "shuffle+s2" || r["lr_mode"] != "staleness" || r["overlap"] != true {
		t.Errorf("report %v", r)
	}
	if r["steps"] != 120.0 || r["images"] != 960.0 || r["epochs_done"] != 120.0/375 {
		t.Errorf("steps %v, images %v; want 120, 960", r["steps"], r["images"])
	}
	var perLearner float64
	for _, n := range r["learner_steps"].([]any) {
		perLearner += n.(float64)
	}
	if len(r["learner_steps"].([]any)) != 3 || perLearner != 120 {
		t.Errorf("learner_steps %v, want 3 counts adding up to 120", r["learner_steps"])
	}
	st := r["staleness"].(map[string]any)
	var sum, weighted float64
	for tau, c := range st["histogram"].([]any) {
		sum += c.(float64)
		weighted += float64(tau) * c.(float64)
	}
	if sum != r["gradients"].(float64) || sum+r["gradients_dropped"].(float64) != 120 ||
		math.Abs(weighted/sum-st["mean"].(float64)) > 1e-9 || !(st["mean"].(float64) > 0) {
		t.Errorf("staleness %v, gradients %v, dropped %v", st, r["gradients"], r["gradients_dropped"])
	}
	tr := r["traffic"].(map[string]any)
	if !(r["bytes_sent"].(float64) > 0) || !(tr["push_wire_bytes"].(float64) < tr["push_raw_bytes"].(float64)) {
		t.Errorf("bytes sent %v, traffic %v", r["bytes_sent"], tr)
	}
	if len(r["shard_stats"].([]any)) != 2 || len(r["history"].([]any)) != 0 {
		t.Errorf("shard_stats %v, history %v (a partial epoch has none)", r["shard_stats"], r["history"])
	}
	for _, sh := range r["shard_stats"].([]any) {
		sh := sh.(map[string]any)
		if g, ok := sh["gradients_refused"].([]any); sh["refused_updates"] != 0.0 || !ok || len(g) != 3 || g[0] != 0.0 {
			t.Errorf("shard %v: refused_updates %v, gradients_refused %v; want 0 and a 0 per learner", sh["shard"], sh["refused_updates"], sh["gradients_refused"])
		}
	}
}

// TestTrainRules runs a small job under delay compensation with the
// staleness rate, momentum compensation and an n schedule, learners
// prefetching: it completes, and the report shows the rule as given, the
// schedule, and the memory of the pulled weights.
func TestTrainRules(t *testing.T) {
	js := filepath.Join(t.TempDir(), "r.json")
	out := run(t, "train", "--model", "mlp", "--epochs", "2", "--train-subset", "600", "--test-subset", "100",
		"--batch", "8", "--learners", "4", "--protocol", "softsync", "--n", "4@0,2@1", "--lr-mode", "dc:0.04+staleness",
		"--momentum-comp", "--shards", "2", "--overlap", "--json", js, "--quiet")
	for _, want := range []string{"softsync (n 4@0,2@1), lr-mode dc:0.04+staleness, momentum-comp", "pulled weights kept"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	r := readReport(t, js)
	if r["lr_mode"] != "dc:0.04+staleness" || r["n"] != 4.0 || r["n_schedule"] != "4@0,2@1" || r["momentum_comp"] != true || r["epochs_done"] != 2.0 {
		t.Errorf("report: lr_mode %v, n %v, n_schedule %v, momentum_comp %v, epochs_done %v", r["lr_mode"], r["n"], r["n_schedule"], r["momentum_comp"], r["epochs_done"])
	}
	params := 0.0
	for _, p := range r["shard_stats"].([]any) {
		params += p.(map[string]any)["pulled_bytes"].(float64)
	}
	// One or two copies of each shard's range per learner: at most 2λ
	// copies of the vector, and more than none.
	if pb := r["pulled_bytes"].(float64); pb != params || !(pb > 0) || pb > 2*4*4*r["params"].(float64) {
		t.Errorf("pulled_bytes %v (shards: %v), %v parameters", pb, params, r["params"])
	}
	// Epoch 0 updates with every gradient (c₀ = 1), epoch 1 with every
	// two (c₀ = 2): fewer updates than gradients, more than half.
	if u, g := r["updates"].(float64), r["gradients"].(float64); !(u < g && u > g/2) || r["partial_updates"].(float64) > 1 {
		t.Errorf("%v updates of %v gradients, %v partial", u, g, r["partial_updates"])
	}
}

// TestReportRefused: the summary tells of refused updates, with the
// gradients each learner lost to them.
func TestReportRefused(t *testing.T) {
	var b strings.Builder
	writeText(&b, &cluster.Report{ShardStats: []cluster.ReportShard{{Refused: 3, RefusedGradients: []uint64{0, 2, 1}}}})
	if want := "refused updates  3 on shard 0 (each would have made a weight NaN or infinite); gradients discarded per learner [0 2 1]"; !strings.Contains(b.String(), want) {
		t.Errorf("summary:\n%s\nwant a line %q", b.String(), want)
	}
	b.Reset()
	writeText(&b, &cluster.Report{ShardStats: []cluster.ReportShard{{RefusedGradients: []uint64{0}}}})
	if strings.Contains(b.String(), "refused") {
		t.Errorf("summary without refusals:\n%s", b.String())
	}
}

// TestTrainBadFlags: every bad flag is an error naming it, before any
// data is read or anything starts.
func TestTrainBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"--learners", "0"}, "--learners"},
		{[]string{"--batch", "-1"}, "--batch"},
		{[]string{"--epochs", "-2"}, "--epochs"},
		{[]string{"--lr", "0"}, "--lr"},
		{[]string{"--lr", "NaN"}, "--lr"},
		{[]string{"--momentum", "1.5"}, "--momentum"},
		{[]string{"--weight-decay", "-1"}, "--weight-decay"},
		{[]string{"--lr-steps", "5,3"}, "--lr-steps"},
		{[]string{"--lr-steps", "x"}, "--lr-steps"},
		{[]string{"--lr-steps", "3", "--lr-gamma", "0"}, "--lr-gamma"},
		{[]string{"--protocol", "async"}, "--protocol"},
		{[]string{"--n", "2"}, "--n"}, // hardsync
		{[]string{"--protocol", "softsync", "--learners", "4", "--n", "5"}, "--n"},
		{[]string{"--protocol", "softsync", "--n", "0"}, "--n"},
		{[]string{"--max-staleness", "2"}, "--max-staleness"}, // hardsync
		{[]string{"--protocol", "softsync", "--max-staleness", "-1"}, "--max-staleness"},
		{[]string{"--lr-mode", "fast"}, "--lr-mode"},
		{[]string{"--lr-mode", "poly"}, "--lr-mode"},
		{[]string{"--lr-mode", "hinge:2"}, "--lr-mode"},
		{[]string{"--lr-mode", "dc:0"}, "--lr-mode"},
		{[]string{"--lr-mode", "dc+gap"}, "--lr-mode"},
		{[]string{"--lr-mode", "staleness+average"}, "--lr-mode"},
		{[]string{"--protocol", "softsync", "--learners", "4", "--n", "2@1"}, "--n"},
		{[]string{"--protocol", "softsync", "--learners", "4", "--n", "4@0,2@3,1@3"}, "--n"},
		{[]string{"--protocol", "softsync", "--learners", "4", "--n", "4@0,8@2"}, "--n"},
		{[]string{"--protocol", "softsync", "--learners", "4", "--n", "4@0,x"}, "--n"},
		{[]string{"--n", "4@0,2@1"}, "--n"}, // hardsync
		{[]string{"--shards", "0"}, "--shards"},
		{[]string{"--shards", "100000000"}, "--shards"},
		{[]string{"--transport", "udp"}, "--transport"},
		{[]string{"--compress", "lz4"}, "--compress"},
		{[]string{"--compress", "topk:2"}, "--compress"},
		{[]string{"--model", "nosuchnet"}, "--model"},
		{[]string{"--plot", "out.jpg"}, "--plot"},
		{[]string{"--json", "/no/such/dir/r.json"}, "--json"},
		{[]string{"--save", "/no/such/dir/w"}, "--save"},
		{[]string{"--load", "/no/such/file"}, "--load"},
		{[]string{"--max-steps", "-1"}, "--max-steps"},
		{[]string{"--train-subset", "-5"}, "--train-subset"},
		{[]string{"--expect-error", "2"}, "--expect-error"},
		{[]string{"--data", "/no/such/dir"}, "--data"},
		{[]string{"--threads", "-1"}, "--threads"},
		{[]string{"--chunk", "0"}, "--chunk"},
		{[]string{"--heartbeat", "0"}, "--heartbeat"},
		{[]string{"--heartbeat", "-1s"}, "--heartbeat"},
		{[]string{"--rendezvous-timeout", "0"}, "--rendezvous-timeout"},
		{[]string{"--rendezvous-timeout", "-1s"}, "--rendezvous-timeout"},
		{[]string{"--ps-timeout", "-1s"}, "--ps-timeout"},
		{[]string{"--sched", "fifo"}, "--sched"},
	} {
		_, err := runErrWithin(t, time.Minute, append([]string{"train"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("train %s: %v, want an error naming %s", strings.Join(c.args, " "), err, c.flag)
		}
		if c.flag == "--data" {
			continue
		}
		// Before any data is read: a data folder that does not exist
		// must not be what the error is about.
		args := append([]string{"train", "--data", "/no/such/data"}, c.args...)
		if _, err := runErrWithin(t, time.Minute, args...); err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%s: %v, want the error naming %s before the one about the data", strings.Join(args, " "), err, c.flag)
		}
	}
	// --shards beyond the limit of the control messages, or one shard per
	// parameter of LeNet: refused at once, naming the limit.
	for _, n := range []string{"2049", "6000", "431080"} {
		_, err := runErrWithin(t, time.Minute, "train", "--shards", n, "--data", "/no/such/data")
		if err == nil || !strings.Contains(err.Error(), "--shards") || !strings.Contains(err.Error(), "at most 2048") {
			t.Errorf("train --shards %s: %v, want an error naming --shards and its limit, 2048", n, err)
		}
	}
	if _, err := runErrWithin(t, time.Minute, "train", "--learners", "5000", "--shards", "600", "--data", "/no/such/data"); err == nil ||
		!strings.Contains(err.Error(), "--shards") || !strings.Contains(err.Error(), "at most 526") {
		t.Errorf("train --learners 5000 --shards 600: %v, want an error naming --shards and its limit for 5000 learners, 526", err)
	}
	// Shapes: CIFAR-10 files into LeNet, batch larger than a learner's share.
	if _, err := runErr("train", "--train-subset", "100", "--learners", "4", "--batch", "32"); err == nil || !strings.Contains(err.Error(), "--batch") {
		t.Errorf("batch 32 with 25 images per learner: %v", err)
	}
}

// TestRoleBadFlags: the role commands and launch refuse the bad values
// of the flags that only jobs of several processes use, naming the flag,
// before they dial or listen anywhere.
func TestRoleBadFlags(t *testing.T) {
	to := []string{"--coordinator", "127.0.0.1:1", "--insecure", "--data", "/no/such/data"}
	for _, c := range []struct {
		args []string
		flag string
	}{
		{append([]string{"learner", "--local-learners", "-1"}, to...), "--local-learners"},
		{append([]string{"learner", "--heartbeat", "0"}, to...), "--heartbeat"},
		{append([]string{"ps", "--heartbeat", "-1s"}, to...), "--heartbeat"},
		{append([]string{"ps", "--rendezvous-timeout", "0"}, to...), "--rendezvous-timeout"},
		{[]string{"eval", "--heartbeat", "-5s", "--data", "/no/such/data"}, "--heartbeat"},
		{[]string{"eval", "--ps-timeout", "-1m", "--data", "/no/such/data"}, "--ps-timeout"},
		{[]string{"launch", "-n", "1", "--", "--heartbeat", "0", "--data", "/no/such/data"}, "--heartbeat"},
		{[]string{"launch", "-n", "1", "--", "--rendezvous-timeout", "-1s", "--data", "/no/such/data"}, "--rendezvous-timeout"},
		{append([]string{"learner", "--sched", "idle"}, to...), "--sched"},
		{[]string{"launch", "-n", "1", "--", "--sched", "fifo", "--data", "/no/such/data"}, "--sched"},
		{[]string{"launch", "-n", "1", "--bind", "cores", "--", "--data", "/no/such/data"}, "--bind"},
	} {
		_, err := runErrWithin(t, time.Minute, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("softsync %s: %v, want an error naming %s", strings.Join(c.args, " "), err, c.flag)
		}
	}
}

func TestBenchTrainJSON(t *testing.T) {
	for _, learners := range []string{"1", "2"} {
		out := run(t, "bench", "train", "--model", "mlp", "--batch", "8", "--images", "800", "--learners", learners, "--json")
		var r map[string]any
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		if r["model"] != "mlp" || r["batch"] != 8.0 || r["learners"].(float64) != map[string]float64{"1": 1, "2": 2}[learners] ||
			!(r["images_per_sec"].(float64) > 0) || !(r["steps"].(float64) > 0) {
			t.Errorf("bench train --learners %s: %v", learners, r)
		}
	}
	out := run(t, "bench", "train", "--model", "mlp", "--batch", "8", "--images", "800", "--shards", "2", "--early-push", "--json")
	var r map[string]any
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if r["shards"] != 2.0 || r["early_push"] != true || !(r["images_per_sec"].(float64) > 0) {
		t.Errorf("bench train --shards 2 --early-push: %v", r)
	}
}

func TestRenderBar(t *testing.T) {
	p := cluster.Progress{Epoch: 3, Epochs: 10, Batch: 450, Batches: 900, Loss: 0.0412, Steps: 2250, TotalSteps: 9000}
	for _, width := range []int{40, 80, 200} {
		s := renderBar(p, 5120, 0, 83*time.Second, width)
		if n := len([]rune(s)); n > width {
			t.Errorf("width %d: %d columns: %q", width, n, s)
		}
		for _, want := range []string{"epoch 3/10", "450/900", "loss 0.0412", "5,120 img/s", "ETA 1m23s"} {
			if width >= 80 && !strings.Contains(s, want) {
				t.Errorf("width %d: %q lacks %q", width, s, want)
			}
		}
		if strings.Contains(s, "data wait") {
			t.Errorf("width %d: a data wait without waiting: %q", width, s)
		}
	}
	// Two learners that waited 3 s of their 2 × 100 s.
	w := p
	w.Elapsed, w.DataWait = 100*time.Second, 3*time.Second
	if s := renderBar(w, 5120, dataWait(w, 2), 83*time.Second, 100); !strings.Contains(s, "data wait 2%  ETA") {
		t.Errorf("data wait 1.5%%: %q", s)
	}
	s := renderBar(p, 1, 0, time.Second, 80)
	bar := s[strings.Index(s, "[")+1 : strings.Index(s, "]")]
	if fill := strings.Count(bar, "="); fill != len(bar)/2 || !strings.HasPrefix(bar, strings.Repeat("=", fill)+">") {
		t.Errorf("half-way bar: %q", s)
	}
}

// TestTrainDataFolders trains from folders of one's own: CIFAR-10 binary
// files (recognised by their names) and idx files under MNIST's names,
// both written in the real formats by the test. The idx files hold
// neither MNIST nor Fashion-MNIST, so the report names the folder.
func TestTrainDataFolders(t *testing.T) {
	cifar := t.TempDir()
	for i, name := range data.CIFAR10TrainFiles() {
		if err := data.WriteCIFAR10(filepath.Join(cifar, name), data.Synthetic(40, 3, 32, 32, 10, uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := data.WriteCIFAR10(filepath.Join(cifar, data.CIFAR10TestFile), data.Synthetic(30, 3, 32, 32, 10, 9)); err != nil {
		t.Fatal(err)
	}
	mnist := idxFolder(t, 200, 50)
	for _, c := range []struct {
		model, dir, want string
		train, test      float64
	}{{"cifar10_full", cifar, "CIFAR-10", 200, 30}, {"mlp", mnist, mnist, 200, 50}} {
		js := filepath.Join(t.TempDir(), "r.json")
		run(t, "train", "--model", c.model, "--data", c.dir, "--epochs", "1", "--batch", "8", "--json", js, "--quiet")
		r := readReport(t, js)
		if !strings.HasPrefix(r["data"].(string), c.want) || r["train_images"] != c.train || r["test_images"] != c.test || r["steps"] != c.train/8 {
			t.Errorf("--data %s: report %v", c.dir, r)
		}
	}
	// LeNet cannot take CIFAR-10 images: an error naming both flags.
	if _, err := runErr("train", "--model", "lenet", "--data", cifar); err == nil ||
		!strings.Contains(err.Error(), "--data") || !strings.Contains(err.Error(), "--model") {
		t.Errorf("lenet on CIFAR-10: %v", err)
	}
}

// TestTrainResume: softsync train in one process writes checkpoints with
// --checkpoint-dir, and --resume continues from the newest with the same
// flags, or onto another number of --shards: the resumed job keeps the
// history of the epochs before its checkpoint and completes every
// mini-batch of the job once.
func TestTrainResume(t *testing.T) {
	dir := t.TempDir()
	ckpt, ckpt2 := filepath.Join(dir, "ckpt"), filepath.Join(dir, "ckpt2")
	job := func(report, ckptDir string, more ...string) []string {
		return append([]string{"train", "--model", "lenet", "--epochs", "3", "--train-subset", "3200", "--test-subset", "200",
			"--batch", "8", "--learners", "2", "--protocol", "softsync", "--transport", "inmem", "--quiet", "--threads", "1",
			"--checkpoint-dir", ckptDir, "--checkpoint-every", "100", "--json", filepath.Join(dir, report)}, more...)
	}
	// The coordinator starts a checkpoint when a learner reports its
	// progress, every half second: the job lasts a few seconds (two
	// learners of one thread each, 1,200 mini-batches of LeNet).
	run(t, job("first.json", ckpt)...)
	first := readReport(t, filepath.Join(dir, "first.json"))
	if vs, _ := filepath.Glob(filepath.Join(ckpt, "v*")); len(vs) == 0 {
		t.Fatalf("the job wrote no checkpoint in %v s", first["seconds"])
	}
	if err := os.CopyFS(ckpt2, os.DirFS(ckpt)); err != nil {
		t.Fatal(err)
	}
	total := first["chunks"].(map[string]any)["batches"].(float64)
	for _, c := range []struct {
		name   string
		args   []string
		shards float64
	}{
		{"same flags", job("same.json", ckpt, "--resume", ckpt), 1},
		{"2 shards", job("shards.json", ckpt2, "--resume", ckpt2, "--shards", "2"), 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := runErr(c.args...)
			if err != nil {
				t.Fatalf("resume: %v\n%s", err, out)
			}
			r := readReport(t, c.args[slices.Index(c.args, "--json")+1])
			hist := r["history"].([]any)
			if r["chunks"].(map[string]any)["batches"] != total || r["epochs_done"] != 3.0 || float64(len(r["shard_stats"].([]any))) != c.shards ||
				len(hist) != 3 || r["test_error"] == nil {
				t.Errorf("resumed report: chunks %v (want %v batches), epochs done %v, %d shards, history %v", r["chunks"], total, r["epochs_done"], len(r["shard_stats"].([]any)), hist)
			}
			if h, h0 := hist[0].(map[string]any), first["history"].([]any)[0].(map[string]any); h["seconds"] != h0["seconds"] || h["train_loss"] != h0["train_loss"] {
				t.Errorf("epoch 1 resumed %v, the first run's %v: not the checkpoint's", h, h0)
			}
		})
	}
}
