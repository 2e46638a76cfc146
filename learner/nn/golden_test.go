package nn

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/kerneltest"
	"github.com/softsync/softsync/ps/param"
)

// goldenDir is the folder of the golden results: weights, a batch, logits,
// loss and every parameter gradient of lenet and cifar10_full computed by
// PyTorch with Caffe's layer semantics, and of a small network of the
// newer layers and narrowed alexnet and resnet18 (see its README.md),
// written by its generate.py (which needs PyTorch).
const goldenDir = "testdata/golden"

type goldenManifest struct {
	Net    string  `json:"net"`
	Spec   string  `json:"spec"` // the spec file in the folder; empty: the built-in network Net
	Batch  int     `json:"batch"`
	Input  string  `json:"input"`
	Labels string  `json:"labels"`
	Logits string  `json:"logits"`
	Loss   float64 `json:"loss"`
	// EvalLogits are the logits in evaluation mode (batch norm's running
	// statistics, no dropout); DropoutSeed is the seed of the training
	// pass's dropout masks (Net.SetSeed).
	EvalLogits  string `json:"eval_logits"`
	DropoutSeed uint64 `json:"dropout_seed"`
	Params      []struct {
		Name  string `json:"name"`
		Shape []int  `json:"shape"`
		File  string `json:"file"`
		Grad  string `json:"grad"`
	} `json:"params"`
}

func readF32(t *testing.T, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func maxAbs(v []float32) float64 {
	m := 0.0
	for _, x := range v {
		m = max(m, math.Abs(float64(x)))
	}
	return m
}

// closeTo checks ‖got − want‖∞ ≤ tol·‖want‖∞.
func closeTo(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	var maxErr, maxRef float64
	worst := 0
	for i := range want {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		if d > maxErr || math.IsNaN(d) {
			maxErr, worst = d, i
		}
		maxRef = max(maxRef, math.Abs(float64(want[i])))
	}
	if !(maxErr <= tol*maxRef) {
		t.Errorf("%s: max error %.3g (at %d: %g, want %g) exceeds %.0e × %.3g",
			what, maxErr, worst, got[worst], want[worst], tol, maxRef)
	}
}

// TestGolden loads the weights of an independent PyTorch computation with
// Caffe's layer semantics and matches logits, loss and every parameter
// gradient (and batch norm's batch statistics, and the logits at test),
// through every engine.
func TestGolden(t *testing.T) {
	root := goldenDir
	for _, name := range []string{"lenet", "cifar10_full", "layers", "alexnet", "resnet18"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(root, name)
			raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
			if err != nil {
				t.Fatal(err)
			}
			var m goldenManifest
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			spec, err := goldenSpec(dir, &m)
			if err != nil {
				t.Fatal(err)
			}
			x := readF32(t, filepath.Join(dir, m.Input))
			lb, _ := os.ReadFile(filepath.Join(dir, m.Labels))
			labels := make([]int32, len(lb)/4)
			for i := range labels {
				labels[i] = int32(binary.LittleEndian.Uint32(lb[4*i:]))
			}
			logits := readF32(t, filepath.Join(dir, m.Logits))
			kerneltest.ForEachEngine(t, func(t *testing.T, e kernels.Engine) {
				for _, w := range []int{1, 3} {
					t.Run(fmt.Sprintf("workers=%d", w), func(t *testing.T) { checkGolden(t, dir, &m, spec, e, w, x, labels, logits) })
				}
			})
		})
	}
}

// goldenSpec is the spec of a golden folder.
func goldenSpec(dir string, m *goldenManifest) (*Spec, error) {
	if m.Spec == "" {
		return Builtin(m.Net)
	}
	src, err := os.ReadFile(filepath.Join(dir, m.Spec))
	if err != nil {
		return nil, err
	}
	return Parse(m.Net+".net", src)
}

// checkGolden loads the golden weights into a network with the given
// workers and matches its forward and backward results.
func checkGolden(t *testing.T, dir string, m *goldenManifest, spec *Spec, e kernels.Engine, workers int, x []float32, labels []int32, logits []float32) {
	net, err := New(spec, e, Config{Batch: m.Batch, Workers: workers})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	layout := net.Layout()
	if len(layout) != len(m.Params) {
		t.Fatalf("%d segments, golden has %d parameters", len(layout), len(m.Params))
	}
	for i, p := range m.Params {
		v := readF32(t, filepath.Join(dir, p.File))
		if len(v) != layout[i].Len {
			t.Fatalf("%s (%s): %d values, segment %s has %d", p.Name, p.File, len(v), layout[i].Name, layout[i].Len)
		}
		copy(net.Params()[layout[i].Offset:], v)
	}
	for i := range net.Grads() {
		net.Grads()[i] = float32(math.NaN()) // Backward must overwrite every gradient
	}
	net.SetSeed(m.DropoutSeed)
	loss := net.Forward(x, labels)
	closeTo(t, "logits", net.Logits(), logits, 1e-5)
	if math.Abs(float64(loss)-m.Loss) > 1e-5*m.Loss {
		t.Errorf("loss %.7g, want %.7g", loss, m.Loss)
	}
	net.Backward()
	want := make([][]float32, len(m.Params))
	var largest float64 // of every learnable gradient
	for i, p := range m.Params {
		want[i] = readF32(t, filepath.Join(dir, p.Grad))
		if layout[i].Kind == param.Learnable {
			largest = max(largest, maxAbs(want[i]))
		}
	}
	for i, s := range layout {
		got := net.Grads()[s.Offset : s.Offset+s.Len]
		// The gradient of a bias that feeds a batch norm is zero but for
		// rounding, which differs from PyTorch's: both must be.
		if s.Kind == param.Learnable && maxAbs(want[i]) < 1e-5*largest {
			if g := maxAbs(got); g > 1e-4*largest {
				t.Errorf("%s gradient: largest %g, want 0 (PyTorch: %g) up to %g", s.Name, g, maxAbs(want[i]), 1e-4*largest)
			}
			continue
		}
		closeTo(t, s.Name+" gradient", got, want[i], 1e-4)
	}
	// A second pass gives the same gradients (nothing accumulates).
	g1 := append([]float32(nil), net.Grads()...)
	net.SetSeed(m.DropoutSeed)
	net.Forward(x, labels)
	net.Backward()
	closeTo(t, "second backward", net.Grads(), g1, 0)
	if m.EvalLogits != "" {
		net.Evaluate(x, labels)
		closeTo(t, "logits at test", net.Logits(), readF32(t, filepath.Join(dir, m.EvalLogits)), 1e-5)
	}
}

// TestGoldenNarrow: the narrowed alexnet and resnet18 of the golden files
// are the built-in networks with other channel counts and input sizes:
// the same layers, names, connections and every other key.
func TestGoldenNarrow(t *testing.T) {
	for _, name := range []string{"alexnet", "resnet18"} {
		full, err := Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		src, err := os.ReadFile(filepath.Join(goldenDir, name, "spec.net"))
		if err != nil {
			t.Fatal(err)
		}
		narrow, err := Parse(name+".net", src)
		if err != nil {
			t.Fatal(err)
		}
		if len(narrow.Layers) != len(full.Layers) {
			t.Fatalf("%s: %d layers, the built-in has %d", name, len(narrow.Layers), len(full.Layers))
		}
		for i := range full.Layers {
			a, b := full.Layers[i], narrow.Layers[i]
			a.Out, b.Out = 0, 0
			if !reflect.DeepEqual(a, b) || !slices.Equal(full.Inputs(i), narrow.Inputs(i)) {
				t.Errorf("%s: layer %d differs:\n%+v\n%+v", name, i, full.Layers[i], narrow.Layers[i])
			}
		}
	}
}

// TestBuiltinShapes checks every segment of the full-size alexnet and
// resnet18 against the parameter shapes of the same networks in PyTorch
// (shapes.json, written by generate.py from its alexnet and
// torchvision's resnet18): names, kinds and lengths.
func TestBuiltinShapes(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(goldenDir, "shapes.json"))
	if err != nil {
		t.Fatal(err)
	}
	var shapes map[string][][2]json.RawMessage
	if err := json.Unmarshal(raw, &shapes); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"alexnet", "resnet18"} {
		spec, err := Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		layout := spec.layout()
		want := shapes[name]
		if len(layout) != len(want) {
			t.Fatalf("%s: %d segments, PyTorch has %d", name, len(layout), len(want))
		}
		for i, w := range want {
			var pname string
			var dims []int
			if json.Unmarshal(w[0], &pname) != nil || json.Unmarshal(w[1], &dims) != nil {
				t.Fatalf("%s: bad entry %d", name, i)
			}
			n := 1
			for _, d := range dims {
				n *= d
			}
			seg := layout[i]
			state := strings.HasPrefix(pname[strings.LastIndex(pname, ".")+1:], "running_")
			if seg.Name != pname || seg.Len != n || (seg.Kind == param.State) != state {
				t.Errorf("%s: segment %d is %s (%d values, %v), PyTorch's %s %v", name, i, seg.Name, seg.Len, seg.Kind, pname, dims)
			}
		}
	}
}
