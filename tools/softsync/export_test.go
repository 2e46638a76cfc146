package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softsync/softsync/learner"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
)

// TestExport writes mlp weights as ONNX, and checks the errors: the
// weights of another network, an unknown model, an unwritable path,
// missing flags. (learner/nn/onnx tests the model itself.)
func TestExport(t *testing.T) {
	dir := t.TempDir()
	spec, err := nn.Builtin("mlp")
	if err != nil {
		t.Fatal(err)
	}
	params := make([]float32, spec.VectorLen())
	spec.Init(params, 1)
	w := filepath.Join(dir, "mlp.weights")
	mean := make([]float32, spec.Input.Len())
	for i := range mean {
		mean[i] = float32(i%7) / 7
	}
	if err := learner.SaveWeights(w, spec, learner.Weights{Params: params, Normalizer: data.Normalizer{Scale: 1.0 / 255, Mean: mean}}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "mlp.onnx")
	msg := run(t, "export", "--onnx", out, "--model", "mlp", "--load", w)
	for _, want := range []string{"wrote " + out, `"pixels"`, "per-pixel image (1×1×28×28)", `"logits"`, "[batch, 10]"} {
		if !strings.Contains(msg, want) {
			t.Errorf("output lacks %q:\n%s", want, msg)
		}
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// Field 1 of ModelProto, ir_version 7, comes first; the weights follow.
	if !bytes.HasPrefix(b, []byte{0x08, 0x07}) || len(b) < 4*len(params) {
		t.Errorf("%s: %d bytes starting % x", out, len(b), b[:min(8, len(b))])
	}

	other := filepath.Join(dir, "lenet.onnx")
	_, err = runErr("export", "--onnx", other, "--model", "lenet", "--load", w)
	if !errors.Is(err, learner.ErrWeightsMismatch) || !strings.Contains(err.Error(), w) || !strings.Contains(err.Error(), "--load") {
		t.Errorf("mlp weights as lenet: %v", err)
	}
	if _, err := os.Stat(other); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed export left %s: %v", other, err)
	}
	if _, err = runErr("export", "--onnx", other, "--model", "nosuchnet", "--load", w); !errors.Is(err, nn.ErrUnknownNet) ||
		!strings.Contains(err.Error(), "nosuchnet") {
		t.Errorf("unknown model: %v", err)
	}
	for _, bad := range []string{filepath.Join(w, "x.onnx"), filepath.Join(dir, "no", "x.onnx")} {
		if _, err = runErr("export", "--onnx", bad, "--model", "mlp", "--load", w); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("--onnx %s: %v", bad, err)
		}
	}
	// A folder where the file should go: the rename fails, naming it.
	if _, err = runErr("export", "--onnx", dir, "--model", "mlp", "--load", w); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("--onnx %s (a folder): %v", dir, err)
	}
	if _, err = runErr("export", "--model", "mlp", "--load", w); err == nil || !strings.Contains(err.Error(), "--onnx is required") {
		t.Errorf("no --onnx: %v", err)
	}
	if _, err = runErr("export", "--onnx", out, "--model", "mlp", "--load", filepath.Join(dir, "none.weights")); !errors.Is(err, os.ErrNotExist) ||
		!strings.Contains(err.Error(), "none.weights") {
		t.Errorf("missing weights file: %v", err)
	}
}
