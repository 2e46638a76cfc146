package learner

import (
	"errors"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
)

func randomParams(s *nn.Spec, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	w := make([]float32, s.VectorLen())
	for i := range w {
		w[i] = float32(r.NormFloat64())
	}
	return w
}

func TestWeightsRoundTrip(t *testing.T) {
	s := spec(t, "lenet")
	w := randomParams(s, 1)
	mean := randomParams(s, 2)[:s.Input.Len()]
	path := filepath.Join(t.TempDir(), "lenet.weights")
	if err := SaveWeights(path, s, Weights{Params: w, Normalizer: data.Normalizer{Scale: 1.0 / 256, Mean: mean}}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := 8 + 4 + 4 + len("lenet") + 32 + 8 + 4*len(w) + 8 + 4*len(mean) + 4; len(b) != want || string(b[:8]) != "SSWEIGHT" {
		t.Fatalf("file of %d bytes starting %q, want %d bytes starting SSWEIGHT", len(b), b[:8], want)
	}
	got, err := LoadWeights(path, s)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Params, w) || !slices.Equal(got.Normalizer.Mean, mean) || got.Normalizer.Scale != 1.0/256 {
		t.Fatal("weights changed in a round trip")
	}
	// Without a mean image.
	if err := SaveWeights(path, s, Weights{Params: w, Normalizer: data.Normalizer{Scale: 1}}); err != nil {
		t.Fatal(err)
	}
	if got, err := LoadWeights(path, s); err != nil || got.Normalizer.Mean != nil || got.Normalizer.Scale != 1 || !slices.Equal(got.Params, w) {
		t.Fatalf("no mean: %v, %+v", err, got.Normalizer)
	}
	// Multipliers and fillers do not change what the parameters mean.
	alt, err := nn.Parse("alt.net", []byte(strings.ReplaceAll(string(s.Format()), "lr_mult=1", "lr_mult=3")))
	if err != nil {
		t.Fatal(err)
	}
	if SpecHash(alt) != SpecHash(s) {
		t.Error("changing lr_mult changed the architecture hash")
	}
	if _, err := LoadWeights(path, alt); err != nil {
		t.Errorf("loading into the same architecture with other multipliers: %v", err)
	}
}

func TestWeightsErrors(t *testing.T) {
	lenet, mlp := spec(t, "lenet"), spec(t, "mlp")
	dir := t.TempDir()
	path := filepath.Join(dir, "w.bin")
	if err := SaveWeights(path, mlp, Weights{Params: randomParams(mlp, 2), Normalizer: data.Normalizer{Scale: 1, Mean: make([]float32, 784)}}); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(path)
	wider, err := nn.Parse("mlp.net", []byte(strings.Replace(string(mlp.Format()), "out=64", "out=65", 1)))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	flip := func(i int) []byte {
		b := slices.Clone(good)
		b[i] ^= 0x10
		return b
	}
	for _, tc := range []struct {
		name string
		path string
		spec *nn.Spec
		want error
	}{
		{"other net", path, lenet, ErrWeightsMismatch},
		{"same name, other shape", path, wider, ErrWeightsMismatch},
		{"flipped parameter bit", write("flip.bin", flip(len(good)/2)), mlp, ErrWeightsChecksum},
		{"flipped checksum", write("crc.bin", flip(len(good)-1)), mlp, ErrWeightsChecksum},
		{"truncated", write("short.bin", good[:len(good)-10]), mlp, ErrWeightsFormat},
		{"trailing bytes", write("long.bin", append(slices.Clone(good), 0)), mlp, ErrWeightsFormat},
		{"bad magic", write("magic.bin", flip(0)), mlp, ErrWeightsFormat},
		{"version 2", write("v2.bin", flip(9)), mlp, ErrWeightsFormat},
		{"huge name", write("name.bin", flip(15)), mlp, ErrWeightsFormat},
		{"empty", write("empty.bin", nil), mlp, ErrWeightsFormat},
		{"mean count", write("mean.bin", flip(len(good)-4-4*784-3)), mlp, ErrWeightsFormat},
		{"missing", filepath.Join(dir, "nope.bin"), mlp, fs.ErrNotExist},
	} {
		_, err := LoadWeights(tc.path, tc.spec)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("%s: %v, want %v naming %s", tc.name, err, tc.want, tc.path)
		}
	}
	// A file intact but for a non-finite value is refused, naming the
	// file and the first bad value.
	for _, tc := range []struct {
		what  string
		spoil func(*Weights)
	}{
		{"parameter 17 is -Inf", func(w *Weights) { w.Params[17], w.Params[40] = float32(math.Inf(-1)), float32(math.NaN()) }},
		{"input scale 0 is NaN", func(w *Weights) { w.Normalizer.Scale = float32(math.NaN()) }},
		{"mean value 783 is +Inf", func(w *Weights) { w.Normalizer.Mean[783] = float32(math.Inf(1)) }},
	} {
		w := Weights{Params: randomParams(mlp, 2), Normalizer: data.Normalizer{Scale: 1, Mean: make([]float32, 784)}}
		tc.spoil(&w)
		p := filepath.Join(dir, "nonfinite.bin")
		if err := SaveWeights(p, mlp, w); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadWeights(p, mlp); !errors.Is(err, ErrWeightsNonFinite) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), tc.what) {
			t.Errorf("%s: %v, want ErrWeightsNonFinite naming %s and %q", tc.what, err, p, tc.what)
		}
	}
	if err := SaveWeights(filepath.Join(dir, "x"), mlp, Weights{Params: make([]float32, 3)}); !errors.Is(err, ErrWeightsMismatch) {
		t.Errorf("saving 3 values for the mlp: %v", err)
	}
	if err := SaveWeights(filepath.Join(dir, "x"), mlp, Weights{Params: randomParams(mlp, 1), Normalizer: data.Normalizer{Mean: make([]float32, 3)}}); !errors.Is(err, ErrWeightsMismatch) {
		t.Errorf("saving a mean of 3 values for the mlp: %v", err)
	}
	if err := SaveWeights(filepath.Join(dir, "no", "such", "dir"), mlp, Weights{Params: randomParams(mlp, 1)}); err == nil {
		t.Error("saving into a missing folder succeeded")
	}
}
