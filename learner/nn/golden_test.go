package nn

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/kerneltest"
)

// goldenDir is the folder of the golden results: weights, a batch, logits,
// loss and every parameter gradient of lenet and cifar10_full computed by
// PyTorch with Caffe's layer semantics (see its README.md), written by its
// generate.py (which needs PyTorch).
const goldenDir = "testdata/golden"

type goldenManifest struct {
	Net    string  `json:"net"`
	Batch  int     `json:"batch"`
	Input  string  `json:"input"`
	Labels string  `json:"labels"`
	Logits string  `json:"logits"`
	Loss   float64 `json:"loss"`
	Params []struct {
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
// gradient, through every engine.
func TestGolden(t *testing.T) {
	root := goldenDir
	for _, name := range []string{"lenet", "cifar10_full"} {
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
			spec, err := Builtin(m.Net)
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
	loss := net.Forward(x, labels)
	closeTo(t, "logits", net.Logits(), logits, 1e-5)
	if math.Abs(float64(loss)-m.Loss) > 1e-5*m.Loss {
		t.Errorf("loss %.7g, want %.7g", loss, m.Loss)
	}
	net.Backward()
	for i, p := range m.Params {
		s := layout[i]
		closeTo(t, s.Name+" gradient", net.Grads()[s.Offset:s.Offset+s.Len], readF32(t, filepath.Join(dir, p.Grad)), 1e-4)
	}
	// A second pass gives the same gradients (nothing accumulates).
	g1 := append([]float32(nil), net.Grads()...)
	net.Forward(x, labels)
	net.Backward()
	closeTo(t, "second backward", net.Grads(), g1, 0)
}
