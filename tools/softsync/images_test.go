package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softsync/softsync/learner"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
)

// tinyNet is a network of 16×16 crops of RGB images and classes classes.
func tinyNet(t *testing.T, classes int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tiny.net")
	spec := `input channels=3 height=16 width=16
conv conv1 out=8 kernel=3 pad=1 weight=gaussian:0.01
relu relu1
pool pool1 mode=max kernel=2 stride=2
fc   fc1 out=` + string(rune('0'+classes)) + ` weight=gaussian:0.01
softmax loss
`
	if err := os.WriteFile(path, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// jpegFolder writes a learnable image folder: 4 classes of train
// training and val validation JPEGs of about 32×24 pixels.
func jpegFolder(t *testing.T, train, val int) string {
	t.Helper()
	dir := t.TempDir()
	if err := data.GenerateImageFolder(dir, data.FolderGen{Classes: 4, Train: train, Val: val, W: 32, H: 24, Vary: 0.2,
		Quality: 90, Noise: 20, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestTrainImageFolder trains a small network on a folder of JPEGs, one
// of them broken, with every output: the report has the top-5 error of
// every epoch, the learners' data wait and the skipped file by name; the
// summary shows them; the weights file keeps the training set's
// per-channel mean, which --load takes back to measure the same errors.
func TestTrainImageFolder(t *testing.T) {
	dir, net, out := jpegFolder(t, 24, 6), tinyNet(t, 4), t.TempDir()
	bad := filepath.Join(dir, "train", "c001", "i00003.jpg")
	if err := os.WriteFile(bad, []byte("GIF89a, or not"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, weights, plot := filepath.Join(out, "run.json"), filepath.Join(out, "run.weights"), filepath.Join(out, "run.png")
	text := run(t, "train", "--data", dir, "--model", net, "--epochs", "3", "--batch", "8", "--lr", "0.0002", "--lr-steps", "none",
		"--learners", "2", "--protocol", "softsync", "--threads", "1", "--data-threads", "2", "--quiet",
		"--json", rep, "--save", weights, "--plot", plot)
	for _, want := range []string{"top-5", "data wait", "images skipped", "1 (cannot be read or decoded"} {
		if !strings.Contains(text, want) {
			t.Errorf("summary lacks %q:\n%s", want, text)
		}
	}
	r := readReport(t, rep)
	if r["data"] != dir || r["train_images"] != 96.0 || r["test_images"] != 24.0 || r["test_error_top5"] == nil ||
		r["data_skipped"] != 1.0 || !(r["data_wait_seconds"].(float64) > 0) {
		t.Errorf("report: data %v, %v and %v images, top-5 %v, skipped %v, data wait %v", r["data"], r["train_images"], r["test_images"],
			r["test_error_top5"], r["data_skipped"], r["data_wait_seconds"])
	}
	if first := r["data_skipped_first"].([]any); len(first) != 1 || !strings.Contains(first[0].(string), bad) {
		t.Errorf("data_skipped_first %v, want %s", first, bad)
	}
	for i, h := range r["history"].([]any) {
		if h.(map[string]any)["test_error_top5"] == nil {
			t.Errorf("epoch %d without a top-5 error: %v", i+1, h)
		}
	}
	if te := r["test_error"].(float64); te > 0.25 {
		t.Errorf("test error %v after 3 epochs (chance 0.75)", te)
	}
	spec, err := nn.Load(net)
	if err != nil {
		t.Fatal(err)
	}
	w, err := learner.LoadWeights(weights, spec)
	if err != nil {
		t.Fatal(err)
	}
	m, plane := w.Normalizer.Mean, 16*16
	if w.Normalizer.Scale != 1 || len(m) != 3*plane || m[0] != m[plane-1] || m[plane] != m[2*plane-1] || m[0] < 30 || m[0] == m[plane] {
		t.Errorf("weights file's mean: scale %v, %d values, R %v…%v G %v", w.Normalizer.Scale, len(m), m[0], m[plane-1], m[plane])
	}
	if fi, err := os.Stat(plot); err != nil || fi.Size() == 0 {
		t.Errorf("--plot: %v", err)
	}
	again := filepath.Join(out, "again.json")
	run(t, "train", "--data", dir, "--model", net, "--load", weights, "--epochs", "0", "--batch", "8", "--threads", "1", "--quiet", "--json", again)
	if a := readReport(t, again); a["test_error"] != r["test_error"] || a["test_error_top5"] != r["test_error_top5"] {
		t.Errorf("--load: test errors %v and %v, the run's %v and %v", a["test_error"], a["test_error_top5"], r["test_error"], r["test_error_top5"])
	}
}

// TestTrainImageErrors: the image flags are checked, and bad image data
// stops the job before it starts with an error naming the path (and
// line, and both class counts).
func TestTrainImageErrors(t *testing.T) {
	dir, net := jpegFolder(t, 2, 1), tinyNet(t, 4)
	base := func(more ...string) []string {
		return append([]string{"train", "--model", net, "--epochs", "1", "--batch", "2", "--threads", "1", "--quiet"}, more...)
	}
	empty := jpegFolder(t, 2, 1)
	os.MkdirAll(filepath.Join(empty, "train", "c009"), 0o755)
	strict := jpegFolder(t, 2, 1)
	for _, f := range []string{"train/c000/i00001.jpg", "val/c002/i00000.jpg"} {
		os.WriteFile(filepath.Join(strict, f), []byte("x"), 0o644)
	}
	list := filepath.Join(t.TempDir(), "train.txt")
	os.WriteFile(list, []byte("c000/i00000.jpg 0\nc001/i00000.jpg\n"), 0o644)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{base("--data", dir, "--crop", "middle"), []string{`--crop "middle"`}},
		{base("--data", dir, "--resize", "12"), []string{"--resize", "12 is shorter than the network's input 16×16"}},
		{base("--data", dir, "--data-threads", "-1"), []string{"--data-threads"}},
		{base("--data", dir, "--data-nice", "20"), []string{"--data-nice: must be 0 … 19, got 20"}},
		{base("--data", "synthetic", "--model", "mlp", "--data-nice", "5"), []string{"--data-nice: applies to image data"}},
		{base("--data", idxFolder(t, 20, 10), "--model", "mlp", "--mirror=false"), []string{"--mirror: applies to image data"}},
		{base("--data", dir, "--model", tinyNet(t, 5)), []string{"the data has 4 classes, tiny has 5 outputs"}},
		{base("--data", dir, "--model", "mlp"), []string{"mlp takes 1"}},
		{base("--data", empty), []string{filepath.Join(empty, "train", "c009"), "holds no images"}},
		{base("--data", list, "--data-root", filepath.Join(dir, "train")), []string{list + ":2"}},
		{base("--data", strict, "--strict-data"), []string{"2 image(s) cannot be decoded", "c000/i00001.jpg", "val/c002/i00000.jpg"}},
	} {
		_, err := runErr(c.args...)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %v, want %q", c.args[1:], err, w)
			}
		}
	}
}

// TestBenchDataJSON: bench data measures the pipeline on a folder and
// prints its images/s and threads.
func TestBenchDataJSON(t *testing.T) {
	dir := jpegFolder(t, 4, 0)
	out := run(t, "bench", "data", "--data", dir, "--model", tinyNet(t, 4), "--threads", "1", "--min-time", "10ms", "--json")
	var r map[string]any
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !(r["images_per_sec"].(float64) > 0) || r["threads"] != 1.0 || r["images"] != 16.0 || r["resize"] != 18.0 ||
		r["height"] != 16.0 || r["decoded"].(float64) < 16 {
		t.Errorf("bench data: %v", r)
	}
	if _, err := runErr("bench", "data", "--model", tinyNet(t, 4)); err == nil || !strings.Contains(err.Error(), "--data") {
		t.Errorf("no --data: %v", err)
	}
}

// TestReproImageNet runs the ImageNet design on a small folder with a
// small network standing in for alexnet, 3 learners, one epoch: the table
// has top-1 and top-5 errors and the data wait, report.json the top-5
// error of every run, and the top-5 plot is written. The simulator
// refuses image data.
func TestReproImageNet(t *testing.T) {
	dir, net, out := jpegFolder(t, 12, 3), tinyNet(t, 4), t.TempDir()
	args := []string{"repro", "--imagenet", dir, "--model", net, "--learners", "3", "--batch", "4", "--single-batch", "12",
		"--n", "3", "--lr-modes", "staleness", "--epochs", "1", "--lr", "0.0002", "--out", out, "--threads", "1", "--data-threads", "2"}
	text := run(t, args...)
	if !strings.Contains(text, "| run | λ × μ | top-1 error | top-5 error |") || !strings.Contains(text, "| 3-softsync, α0/τ | 3 × 4 |") {
		t.Errorf("table:\n%s", text)
	}
	es := readEntries(t, filepath.Join(out, "report.json"))
	if len(es) != 3 {
		t.Fatalf("%d runs, want 3", len(es))
	}
	for _, e := range es {
		if e["test_error_top5"] == nil || e["data"] != dir || e["mode"] != "real" {
			t.Errorf("run %v", e)
		}
	}
	for _, f := range []string{"test-error.png", "test-error-top5.png", "staleness.png"} {
		if fi, err := os.Stat(filepath.Join(out, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if _, err := runErr(append(args, "--sim")...); err == nil || !strings.Contains(err.Error(), "simulator") {
		t.Errorf("--sim on image data: %v", err)
	}
	if _, err := runErr("repro", "--imagenet", dir, "--data", "mnist"); err == nil || !strings.Contains(err.Error(), "--data and --imagenet") {
		t.Errorf("--data and --imagenet: %v", err)
	}
}
