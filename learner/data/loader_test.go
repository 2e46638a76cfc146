package data

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
)

// imageIndex recovers the index of an image of an indexed data set from
// its normalised values (scale 1, no mean).
func imageIndex(t *testing.T, x []float32) int {
	t.Helper()
	for _, v := range x[1:] {
		if v != x[0] {
			t.Fatalf("image values differ: %v", x)
		}
	}
	return int(x[0])
}

// epochs reads k epochs of a loader and returns the image indices of each.
func epochs(t *testing.T, l *Loader, k, il int) [][]int {
	t.Helper()
	var out [][]int
	for e := 0; e < k; e++ {
		var ids []int
		for i := 0; i < l.BatchesPerEpoch(); i++ {
			b := l.Next()
			if b.Epoch != e || b.Index != i {
				t.Fatalf("batch (epoch %d, index %d), want (%d, %d)", b.Epoch, b.Index, e, i)
			}
			for j := range b.Labels {
				id := imageIndex(t, b.X[j*il:(j+1)*il])
				if int(b.Labels[j]) != id%7 {
					t.Fatalf("image %d has label %d, want %d", id, b.Labels[j], id%7)
				}
				ids = append(ids, id)
			}
		}
		out = append(out, ids)
	}
	return out
}

func TestLoaderEpochs(t *testing.T) {
	d := indexed(103, 2, 3, 7)
	z := Normalizer{Scale: 1}
	l, err := NewLoader(d, LoaderConfig{Batch: 10, Seed: 5, Normalizer: z})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.BatchesPerEpoch() != 10 {
		t.Fatalf("BatchesPerEpoch = %d, want 10", l.BatchesPerEpoch())
	}
	ep := epochs(t, l, 3, 6)
	for e, ids := range ep {
		s := slices.Clone(ids)
		slices.Sort(s)
		if len(slices.Compact(s)) != 100 {
			t.Fatalf("epoch %d repeats an image", e)
		}
	}
	if slices.Equal(ep[0], ep[1]) || slices.Equal(ep[1], ep[2]) {
		t.Fatal("epochs are not reshuffled")
	}
	if slices.IsSorted(ep[0]) {
		t.Fatal("epoch 0 is not shuffled")
	}

	// The same seed gives the same stream; another seed another one.
	l2, _ := NewLoader(d, LoaderConfig{Batch: 10, Seed: 5, Normalizer: z})
	defer l2.Close()
	if again := epochs(t, l2, 3, 6); !slices.Equal(again[2], ep[2]) {
		t.Fatal("same seed, different stream")
	}
	l3, _ := NewLoader(d, LoaderConfig{Batch: 10, Seed: 6, Normalizer: z})
	defer l3.Close()
	if other := epochs(t, l3, 1, 6); slices.Equal(other[0], ep[0]) {
		t.Fatal("different seeds, same stream")
	}
}

func TestLoaderShards(t *testing.T) {
	d := indexed(100, 1, 2, 7)
	seen := map[int]int{}
	sizes := 0
	for r := 0; r < 3; r++ {
		l, err := NewLoader(d, LoaderConfig{Batch: 1, Seed: 9, Learner: r, Learners: 3, Normalizer: Normalizer{Scale: 1}})
		if err != nil {
			t.Fatal(err)
		}
		ep := epochs(t, l, 2, 2)
		l.Close()
		s0, s1 := slices.Clone(ep[0]), slices.Clone(ep[1])
		slices.Sort(s0)
		slices.Sort(s1)
		if !slices.Equal(s0, s1) {
			t.Fatalf("learner %d sees different images in its two epochs", r)
		}
		for _, id := range ep[0] {
			seen[id]++
		}
		sizes += len(ep[0])
		if n := len(ep[0]); n != 33 && n != 34 {
			t.Fatalf("learner %d shard has %d images", r, n)
		}
	}
	if len(seen) != 100 || sizes != 100 {
		t.Fatalf("shards cover %d images with %d visits, want 100 and 100", len(seen), sizes)
	}
}

func TestLoaderNormalizes(t *testing.T) {
	d := Synthetic(40, 3, 4, 4, 5, 3)
	z := MeanNormalizer(d)
	z.Scale = 0.25
	l, err := NewLoader(d, LoaderConfig{Batch: 8, Seed: 1, Normalizer: z})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	b := l.Next()
	il := d.ImageLen()
	// Find each batch image in the data set by its label and values.
	for j := 0; j < 8; j++ {
		found := false
		for k := 0; k < d.N && !found; k++ {
			ok := d.Labels[k] == b.Labels[j]
			for i := 0; ok && i < il; i++ {
				ok = b.X[j*il+i] == 0.25*float32(d.Pixels[k*il+i])-z.Mean[i]
			}
			found = ok
		}
		if !found {
			t.Fatalf("batch image %d is not a normalised image of the data set", j)
		}
	}
}

func TestLoaderConfigErrors(t *testing.T) {
	d := indexed(10, 1, 1, 2)
	for _, c := range []LoaderConfig{
		{Batch: 0},
		{Batch: 1, Learner: 3, Learners: 3},
		{Batch: 4, Learners: 3}, // shards of 3 images
		{Batch: 1, Normalizer: Normalizer{Scale: 1, Mean: make([]float32, 2)}},
	} {
		l, err := NewLoader(d, c)
		if err == nil {
			l.Close()
			t.Fatalf("%+v: no error", c)
		}
		if !errors.Is(err, ErrConfig) && !errors.Is(err, ErrShape) {
			t.Fatalf("%+v: %v", c, err)
		}
	}
}

func TestLoaderNoAllocs(t *testing.T) {
	d := Synthetic(500, 3, 8, 8, 10, 1)
	l, err := NewLoader(d, LoaderConfig{Batch: 16, Seed: 1, Normalizer: MeanNormalizer(d)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for range 40 { // past several epoch boundaries
		l.Next()
	}
	if a := testing.AllocsPerRun(200, func() { l.Next() }); a != 0 {
		t.Fatalf("Next allocates %v times per batch", a)
	}
}

func TestLoaderCloseStopsProducer(t *testing.T) {
	d := indexed(20, 1, 1, 2)
	before := runtime.NumGoroutine()
	l, _ := NewLoader(d, LoaderConfig{Batch: 2, Normalizer: Normalizer{Scale: 1}})
	l.Next()
	l.Close()
	l.Close()
	if after := runtime.NumGoroutine(); after > before {
		t.Fatalf("%d goroutines after Close, %d before", after, before)
	}
}

func TestBatches(t *testing.T) {
	d := indexed(23, 1, 2, 7)
	x := make([]float32, 10*2)
	labels := make([]int32, 10)
	var ns, ids []int
	for n := range Batches(d, Normalizer{Scale: 1}, x, labels) {
		ns = append(ns, n)
		for j := 0; j < n; j++ {
			ids = append(ids, imageIndex(t, x[2*j:2*j+2]))
			if int(labels[j]) != ids[len(ids)-1]%7 {
				t.Fatalf("label mismatch")
			}
		}
		for j := n; j < 10; j++ {
			if x[2*j] != 0 || labels[j] != 0 {
				t.Fatalf("padding row %d not zero", j)
			}
		}
	}
	if !slices.Equal(ns, []int{10, 10, 3}) {
		t.Fatalf("batch sizes %v, want [10 10 3]", ns)
	}
	for i, id := range ids {
		if id != i {
			t.Fatalf("image %d at position %d: not in order", id, i)
		}
	}
}

// TestGoMNIST locates the real MNIST through the Go module proxy and checks
// facts published with the data set.
func TestGoMNIST(t *testing.T) {
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	dir, err := LocateGoMNIST(context.Background(), goBin)
	if err != nil {
		t.Fatal(err)
	}
	// The test set (a sixth of the data) is enough to check the files.
	test, err := ReadIDX(filepath.Join(dir, MNISTTestImages+".gz"), filepath.Join(dir, MNISTTestLabels+".gz"), 10)
	if err != nil {
		t.Fatal(err)
	}
	if test.N != 10000 || test.H != 28 || test.W != 28 || test.Labels[0] != 7 || test.Labels[9999] != 6 {
		t.Fatalf("MNIST test set: %d images of %d×%d, labels %d…%d; want 10000 of 28×28, labels 7…6",
			test.N, test.H, test.W, test.Labels[0], test.Labels[9999])
	}
	// The well-known mean of MNIST's test pixels is 0.1325 on the 1/255
	// scale, 0.1320 on Caffe's 1/256.
	test.Scale = MNISTScale
	z := MeanNormalizer(test)
	var m float64
	for _, v := range z.Mean {
		m += float64(v)
	}
	if m /= float64(len(z.Mean)); m < 0.1315 || m > 0.1325 {
		t.Fatalf("mean MNIST test pixel %.4f, want 0.1320", m)
	}
	for _, n := range []string{MNISTTrainImages, MNISTTrainLabels} {
		if _, err := os.Stat(filepath.Join(dir, n+".gz")); err != nil {
			t.Fatal(err)
		}
	}

	_, err = LocateGoMNIST(context.Background(), filepath.Join(t.TempDir(), "no-go"))
	if !errors.Is(err, ErrMissing) {
		t.Fatalf("bad go binary: %v", err)
	}
}

// TestIdentify recognises the real MNIST test labels (through the Go
// module proxy, as TestGoMNIST) and Fashion-MNIST's when Debian's
// dataset-fashion-mnist is installed; other data is not recognised.
func TestIdentify(t *testing.T) {
	syn := Synthetic(100, 1, 28, 28, 10, 1)
	if got := Identify(syn, syn); got != "" {
		t.Fatalf("synthetic data identified as %q", got)
	}
	train := &Dataset{N: 60000} // Identify reads only the size of the training set
	dir, err := LocateGoMNIST(context.Background(), filepath.Join(runtime.GOROOT(), "bin", "go"))
	if err != nil {
		t.Fatal(err)
	}
	test, err := ReadIDX(filepath.Join(dir, MNISTTestImages+".gz"), filepath.Join(dir, MNISTTestLabels+".gz"), 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := Identify(train, test); got != NameMNIST {
		t.Fatalf("MNIST identified as %q", got)
	}
	if got := Identify(train, test.Subset(9999)); got != "" {
		t.Fatalf("a subset of MNIST identified as %q", got)
	}
	if _, err := os.Stat(FashionMNISTDir); err != nil {
		t.Skipf("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist): %v", err)
	}
	test, err = ReadIDX(filepath.Join(FashionMNISTDir, MNISTTestImages+".gz"), filepath.Join(FashionMNISTDir, MNISTTestLabels+".gz"), 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := Identify(train, test); got != NameFashionMNIST {
		t.Fatalf("Fashion-MNIST identified as %q", got)
	}
}
