package onnx

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/softsync/softsync/kernels/kerneltest"
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps/param"
)

// exportCase is a network with seeded weights and a normaliser.
type exportCase struct {
	name   string
	spec   *nn.Spec
	params []float32
	z      data.Normalizer
}

// loadSpec reads a spec: a built-in name, or a file of testdata or of
// learner/nn's golden folder (the narrowed alexnet and resnet18).
func loadSpec(t *testing.T, name string) *nn.Spec {
	t.Helper()
	if !strings.HasSuffix(name, ".net") {
		spec, err := nn.Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		return spec
	}
	src, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := nn.Parse(name, src)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// seededParams are spec's initial weights (seed) with every bias, batch
// norm scale and shift and running statistic drawn at random too, so that
// none is a constant that would hide a misplaced tensor.
func seededParams(spec *nn.Spec, seed uint64) []float32 {
	params := make([]float32, spec.VectorLen())
	spec.Init(params, seed)
	r := rand.New(rand.NewPCG(seed, 1))
	for _, s := range spec.Layout() {
		v := params[s.Offset : s.Offset+s.Len]
		suffix := s.Name[strings.LastIndex(s.Name, ".")+1:]
		isBN := s.Kind == param.State || strings.HasSuffix(s.Name, ".weight") && isBatchNorm(spec, s.Name)
		for i := range v {
			switch {
			case suffix == "running_var":
				v[i] = 0.5 + r.Float32()
			case suffix == "running_mean", suffix == "bias":
				v[i] = 0.2 * (2*r.Float32() - 1)
			case isBN: // the scale
				v[i] = 0.5 + r.Float32()
			}
		}
	}
	return params
}

func isBatchNorm(spec *nn.Spec, segName string) bool {
	for _, l := range spec.Layers {
		if l.Kind == nn.BatchNorm && segName == l.Name+".weight" {
			return true
		}
	}
	return false
}

// normaliser is a scale and a mean of the given kind: "none", "channel"
// (a per-channel mean image, data.ChannelMeanImage) or "pixel" (a mean
// image of random values).
func normaliser(spec *nn.Spec, scale float32, kind string, seed uint64) data.Normalizer {
	z := data.Normalizer{Scale: scale}
	r := rand.New(rand.NewPCG(seed, 2))
	in := spec.Input
	switch kind {
	case "channel":
		z.Mean = make([]float32, in.Len())
		plane := in.H * in.W
		for c := range in.C {
			m := scale * 255 * r.Float32()
			for i := range plane {
				z.Mean[c*plane+i] = m
			}
		}
	case "pixel":
		z.Mean = make([]float32, in.Len())
		for i := range z.Mean {
			z.Mean[i] = scale * 255 * r.Float32()
		}
	}
	return z
}

const goldenDir = "../testdata/golden"

// exportCases are the networks of the round trip: every layer kind, the
// pooling edges, the built-in lenet and cifar10_full, and alexnet and
// resnet18 narrowed as in learner/nn's golden tests, with each kind of
// normaliser.
func exportCases(t *testing.T) []exportCase {
	specs := []struct {
		name, spec string
		scale      float32
		mean       string
	}{
		{"every", "testdata/every.net", 0.5, "none"},
		{"pools", "testdata/pools.net", 1.0 / 255, "pixel"},
		{"lenet", "lenet", 0.00390625, "pixel"},
		{"cifar10_full", "cifar10_full", 1, "pixel"},
		{"alexnet", filepath.Join(goldenDir, "alexnet", "spec.net"), 1, "channel"},
		{"resnet18", filepath.Join(goldenDir, "resnet18", "spec.net"), 1.0 / 58, "channel"},
	}
	var cases []exportCase
	for i, s := range specs {
		spec := loadSpec(t, s.spec)
		cases = append(cases, exportCase{s.name, spec, seededParams(spec, uint64(i+1)), normaliser(spec, s.scale, s.mean, uint64(i+1))})
	}
	return cases
}

// TestExportPyTorch exports each case, computes softsync's logits at test
// on random pixels, and has testdata/check.py check the models with
// python3-onnx's checker and compute the logits with PyTorch from the
// models' graphs and initialisers. Without /usr/bin/python3, onnx or
// torch the test skips, unless SOFTSYNC_REQUIRE_LAUNCHERS=1 (set by make
// test, which installs them): then it fails.
func TestExportPyTorch(t *testing.T) {
	dir := t.TempDir()
	e := kerneltest.Fastest(t)
	type manifestCase struct {
		Name          string `json:"name"`
		Model         string `json:"model"`
		Pixels        string `json:"pixels"`
		Input         string `json:"input"`
		Logits        string `json:"logits"`
		Probabilities string `json:"probabilities"`
		Batch         int    `json:"batch"`
		Shape         []int  `json:"shape"`
		Classes       int    `json:"classes"`
	}
	var manifest struct {
		Tol   float64        `json:"tol"`
		Cases []manifestCase `json:"cases"`
	}
	manifest.Tol = 1e-5 // the golden tests' tolerance for logits
	const batch = 3
	for i, c := range exportCases(t) {
		var buf bytes.Buffer
		if err := Export(&buf, c.spec, c.params, c.z); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		in := c.spec.Input
		ds := &data.Dataset{N: batch, C: in.C, H: in.H, W: in.W, Scale: c.z.Scale, Pixels: make([]uint8, batch*in.Len())}
		r := rand.New(rand.NewPCG(uint64(i), 3))
		pixels := make([]float32, len(ds.Pixels))
		for k := range ds.Pixels {
			ds.Pixels[k] = uint8(r.IntN(256))
			pixels[k] = float32(ds.Pixels[k])
		}
		x := make([]float32, len(pixels))
		for n := range batch {
			c.z.Fill(ds, n, x[n*in.Len():])
		}
		net, err := nn.New(c.spec, e, nn.Config{Batch: batch, Inference: true})
		if err != nil {
			t.Fatal(err)
		}
		copy(net.Params(), c.params)
		net.Evaluate(x, make([]int32, batch))
		logits, probs := net.Logits(), net.Probs()
		if !slices.ContainsFunc(logits, func(v float32) bool { return v != 0 }) || slices.ContainsFunc(logits, func(v float32) bool { return v != v }) {
			t.Fatalf("%s: softsync's logits are degenerate: %v", c.name, logits)
		}
		mc := manifestCase{Name: c.name, Batch: batch, Shape: []int{in.C, in.H, in.W}, Classes: c.spec.Classes()}
		for _, f := range []struct {
			path *string
			file string
			b    []byte
		}{
			{&mc.Model, c.name + ".onnx", buf.Bytes()}, {&mc.Pixels, c.name + ".pixels.f32", f32bytes(pixels)},
			{&mc.Input, c.name + ".input.f32", f32bytes(x)}, {&mc.Logits, c.name + ".logits.f32", f32bytes(logits)},
			{&mc.Probabilities, c.name + ".probabilities.f32", f32bytes(probs)},
		} {
			*f.path = filepath.Join(dir, f.file)
			if err := os.WriteFile(*f.path, f.b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		net.Close()
		manifest.Cases = append(manifest.Cases, mc)
	}
	mb, _ := json.Marshal(manifest)
	mpath := filepath.Join(dir, "manifest.json")
	if err := os.WriteFile(mpath, mb, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const python = "/usr/bin/python3"
	cmd := exec.CommandContext(ctx, python, "testdata/check.py", mpath)
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1")
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	var exit *exec.ExitError
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) || errors.As(err, &exit) && exit.ExitCode() == missingModule {
		msg := fmt.Sprintf("%s testdata/check.py needs Debian's python3-onnx and python3-torch (make deps-test): %v", python, err)
		if os.Getenv("SOFTSYNC_REQUIRE_LAUNCHERS") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if err != nil {
		t.Fatalf("testdata/check.py: %v", err)
	}
	passed := 0
	for line := range strings.Lines(string(out)) {
		if strings.HasPrefix(line, "ok ") {
			passed++
		}
	}
	if passed != len(manifest.Cases) {
		t.Fatalf("testdata/check.py passed %d of %d cases", passed, len(manifest.Cases))
	}
}

// missingModule is check.py's exit status when python3-onnx or
// python3-torch is not installed.
const missingModule = 3

func f32bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}
