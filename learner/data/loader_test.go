package data

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
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

// newLoader returns a lone learner's loader of plan p.
func newLoader(t *testing.T, d *Dataset, p Plan, z Normalizer) *Loader {
	t.Helper()
	l, err := NewSingleLoader(d, p, z)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// epochs reads the loader to its end, reporting every batch as done, and
// returns the image indices of each epoch.
func epochs(t *testing.T, l *Loader, perEpoch, il int) [][]int {
	t.Helper()
	var out [][]int
	ctx := context.Background()
	for n := 0; ; n++ {
		b, err := l.Next(ctx)
		if errors.Is(err, ErrEnd) {
			return out
		}
		if errors.Is(err, ErrIdle) { // the last chunk is not complete yet
			n--
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if e, i := n/perEpoch, n%perEpoch; b.Epoch != e || b.Index != i {
			t.Fatalf("batch (epoch %d, index %d), want (%d, %d)", b.Epoch, b.Index, e, i)
		}
		if b.Index == 0 {
			out = append(out, nil)
		}
		for j := range b.Labels {
			id := imageIndex(t, b.X[j*il:(j+1)*il])
			if int(b.Labels[j]) != id%7 {
				t.Fatalf("image %d has label %d, want %d", id, b.Labels[j], id%7)
			}
			out[b.Epoch] = append(out[b.Epoch], id)
		}
		if err := l.Done(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLoaderEpochs(t *testing.T) {
	d := indexed(103, 2, 3, 7)
	z := Normalizer{Scale: 1}
	p := Plan{Batch: 10, Chunk: 3, Epochs: 3, Seed: 5}
	ep := epochs(t, newLoader(t, d, p, z), 10, 6)
	if len(ep) != 3 {
		t.Fatalf("%d epochs, want 3", len(ep))
	}
	for e, ids := range ep {
		s := slices.Clone(ids)
		slices.Sort(s)
		if len(slices.Compact(s)) != 100 {
			t.Fatalf("epoch %d repeats an image", e)
		}
		if want := EpochOrder(5, e, 103)[:100]; !slices.Equal(ids, want) {
			t.Fatalf("epoch %d does not follow EpochOrder", e)
		}
	}
	if slices.Equal(ep[0], ep[1]) || slices.Equal(ep[1], ep[2]) {
		t.Fatal("epochs are not reshuffled")
	}
	if slices.IsSorted(ep[0]) {
		t.Fatal("epoch 0 is not shuffled")
	}
	// The same seed gives the same stream, whatever the chunk size;
	// another seed another one.
	p2 := p
	p2.Chunk = 7
	if again := epochs(t, newLoader(t, d, p2, z), 10, 6); !slices.Equal(again[2], ep[2]) {
		t.Fatal("same seed, different stream")
	}
	p3 := p
	p3.Seed, p3.Epochs = 6, 1
	if other := epochs(t, newLoader(t, d, p3, z), 10, 6); slices.Equal(other[0], ep[0]) {
		t.Fatal("different seeds, same stream")
	}
}

// TestLoaderShared: three learners sharing one dispatcher, each on its
// own goroutine, see every image of each epoch once between them.
func TestLoaderShared(t *testing.T) {
	d := indexed(100, 1, 2, 7)
	p := Plan{Images: 100, Batch: 1, Chunk: 4, Epochs: 2, Seed: 9}
	disp, err := NewDispatcher(p)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a loader that never ends fails
	defer cancel()
	var mu sync.Mutex
	seen := map[[2]int]int{}
	var wg sync.WaitGroup
	for r := range 3 {
		l, err := NewLoader(d, LoaderConfig{Plan: p, Source: Local{D: disp, Learner: r}, Normalizer: Normalizer{Scale: 1}})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		wg.Go(func() {
			for {
				b, err := l.Next(ctx)
				switch {
				case errors.Is(err, ErrEnd):
					return
				case errors.Is(err, ErrIdle):
					continue // the next Next waits
				case err != nil:
					t.Errorf("learner %d, waiting for its next mini-batch: %v", r, err)
					return
				}
				mu.Lock()
				seen[[2]int{b.Epoch, int(b.X[0])}]++
				mu.Unlock()
				if err := l.Done(ctx, b); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if len(seen) != 200 {
		t.Fatalf("%d (epoch, image) pairs seen, want 200", len(seen))
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("image %v seen %d times", k, n)
		}
	}
}

// scripted is a Source that hands out one chunk, then reports ErrIdle,
// then, when asked to wait, waits for release and ends.
type scripted struct {
	calls    []bool // wait argument of each Next
	release  chan struct{}
	complete []Chunk
}

func (s *scripted) Next(ctx context.Context, wait bool) (Chunk, error) {
	s.calls = append(s.calls, wait)
	switch {
	case len(s.calls) == 1:
		return Chunk{First: 1, Count: 2, Stride: 1}, nil
	case !wait:
		return Chunk{}, ErrIdle
	}
	select {
	case <-s.release:
		return Chunk{}, ErrEnd
	case <-ctx.Done():
		return Chunk{}, ctx.Err()
	}
}

func (s *scripted) Complete(_ context.Context, c Chunk) error {
	s.complete = append(s.complete, c)
	return nil
}

// TestLoaderIdle: the batches of the chunk come first, then ErrIdle once,
// then Next waits until the source ends, and ErrEnd sticks; the chunk is
// completed by Done of its last batch only.
func TestLoaderIdle(t *testing.T) {
	d := indexed(10, 1, 1, 7)
	src := &scripted{release: make(chan struct{})}
	l, err := NewLoader(d, LoaderConfig{Plan: Plan{Batch: 2, Chunk: 2, Epochs: 1}, Source: src, Normalizer: Normalizer{Scale: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	for i := range 2 {
		b, err := l.Next(ctx)
		if err != nil || b.Index != 1+i || b.Pos != i || b.Last() != (i == 1) {
			t.Fatalf("batch %d: %+v, %v", i, b, err)
		}
		if err := l.Done(ctx, b); err != nil {
			t.Fatal(err)
		}
		if want := i; len(src.complete) != want {
			t.Fatalf("after batch %d: %d completions, want %d", i, len(src.complete), want)
		}
	}
	if _, err := l.Next(ctx); !errors.Is(err, ErrIdle) {
		t.Fatalf("after the chunk: %v, want ErrIdle", err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := l.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("idle loader: %v, want to wait", err)
	}
	close(src.release)
	for range 2 {
		if _, err := l.Next(ctx); !errors.Is(err, ErrEnd) {
			t.Fatalf("after the end: %v, want ErrEnd", err)
		}
	}
	if !slices.Equal(src.calls, []bool{false, false, true}) {
		t.Fatalf("source asked with wait = %v", src.calls)
	}
}

func TestLoaderNormalizes(t *testing.T) {
	d := Synthetic(40, 3, 4, 4, 5, 3)
	z := MeanNormalizer(d)
	z.Scale = 0.25
	l := newLoader(t, d, Plan{Batch: 8, Chunk: 1, Epochs: 1, Seed: 1}, z)
	b, err := l.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
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
	disp, _ := NewDispatcher(Plan{Images: 10, Batch: 1, Chunk: 1})
	for _, c := range []LoaderConfig{
		{Plan: Plan{Batch: 0, Chunk: 1}, Source: Local{D: disp}},
		{Plan: Plan{Batch: 11, Chunk: 1}, Source: Local{D: disp}}, // fewer images than a batch
		{Plan: Plan{Batch: 1, Chunk: 1}},                          // no source
		{Plan: Plan{Batch: 1, Chunk: 1}, Source: Local{D: disp}, Normalizer: Normalizer{Scale: 1, Mean: make([]float32, 2)}},
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
	l := newLoader(t, d, Plan{Batch: 16, Chunk: 1 << 20, Epochs: 1000, Seed: 1}, MeanNormalizer(d))
	ctx := context.Background()
	next := func() {
		if _, err := l.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 40 { // past an epoch boundary
		next()
	}
	if a := testing.AllocsPerRun(200, next); a != 0 {
		t.Fatalf("Next allocates %v times per batch", a)
	}
}

// TestLoaderCloseStopsProducer closes a loader whose producer waits on a
// full queue and checks that its goroutine ends (polling with a deadline:
// it may still be returning when Close does).
func TestLoaderCloseStopsProducer(t *testing.T) {
	d := indexed(20, 1, 1, 2)
	// The loaders of earlier tests are closed, but their producers may
	// still be returning: wait for them to be gone (or counted as leaks).
	waitProducers(t, 0)
	before := producers()
	disp, _ := NewDispatcher(Plan{Images: 20, Batch: 2, Chunk: 2, Epochs: 5})
	l, err := NewLoader(d, LoaderConfig{Plan: Plan{Batch: 2, Chunk: 2, Epochs: 5}, Source: Local{D: disp}, Normalizer: Normalizer{Scale: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Next(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := producers(); n != before+1 {
		t.Fatalf("%d producer goroutines running with one loader open, want %d", n, before+1)
	}
	l.Close()
	l.Close()
	// Close returns once the producer has signalled its exit; the goroutine
	// itself may still be returning, so wait for it to be gone.
	waitProducers(t, before)
}

// waitProducers waits up to 10 s for at most n producer goroutines to be
// running, and fails the test if more remain.
func waitProducers(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for producers() > n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := producers(); got > n {
		t.Fatalf("%d producer goroutines running, want at most %d", got, n)
	}
}

// producers counts the goroutines running a Loader's producer.
func producers() int {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "data.(*producer).run(")
		}
		buf = make([]byte, 2*len(buf))
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
