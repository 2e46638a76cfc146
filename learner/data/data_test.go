package data

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// indexed returns n one-channel h×w images whose pixels all equal the
// image's index (n ≤ 256), labelled index mod classes.
func indexed(n, h, w, classes int) *Dataset {
	d := &Dataset{Source: "indexed", N: n, C: 1, H: h, W: w, Classes: classes, Scale: 1,
		Pixels: make([]uint8, n*h*w), Labels: make([]int32, n)}
	for i := 0; i < n; i++ {
		for j := 0; j < h*w; j++ {
			d.Pixels[i*h*w+j] = uint8(i)
		}
		d.Labels[i] = int32(i % classes)
	}
	return d
}

func sameData(t *testing.T, got, want *Dataset) {
	t.Helper()
	if got.N != want.N || got.C != want.C || got.H != want.H || got.W != want.W {
		t.Fatalf("shape %d×%d×%d×%d, want %d×%d×%d×%d", got.N, got.C, got.H, got.W, want.N, want.C, want.H, want.W)
	}
	if !bytes.Equal(got.Pixels, want.Pixels) {
		t.Fatal("pixels differ")
	}
	for i := range want.Labels {
		if got.Labels[i] != want.Labels[i] {
			t.Fatalf("label %d = %d, want %d", i, got.Labels[i], want.Labels[i])
		}
	}
}

// wantErr checks that err wraps sentinel and that its message names file
// and contains each of the words.
func wantErr(t *testing.T, err, sentinel error, file string, words ...string) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("error %v does not wrap %v", err, sentinel)
	}
	for _, w := range append([]string{file}, words...) {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("error %q does not mention %q", err, w)
		}
	}
}

func writeMNIST(t *testing.T, dir string, train, test *Dataset, gz bool) {
	t.Helper()
	sfx := ""
	if gz {
		sfx = ".gz"
	}
	if err := WriteIDX(filepath.Join(dir, MNISTTrainImages+sfx), filepath.Join(dir, MNISTTrainLabels+sfx), train, gz); err != nil {
		t.Fatal(err)
	}
	if err := WriteIDX(filepath.Join(dir, MNISTTestImages+sfx), filepath.Join(dir, MNISTTestLabels+sfx), test, gz); err != nil {
		t.Fatal(err)
	}
}

func TestMNISTRoundTrip(t *testing.T) {
	for _, gz := range []bool{false, true} {
		dir := t.TempDir()
		train, test := Synthetic(50, 1, 28, 28, 10, 1), Synthetic(20, 1, 28, 28, 10, 2)
		writeMNIST(t, dir, train, test, gz)
		gtrain, gtest, err := LoadMNIST(dir)
		if err != nil {
			t.Fatalf("gz=%v: %v", gz, err)
		}
		sameData(t, gtrain, train)
		sameData(t, gtest, test)
		if gtrain.Scale != 0.00390625 || gtrain.Classes != 10 {
			t.Fatalf("scale %v classes %d, want 0.00390625 and 10", gtrain.Scale, gtrain.Classes)
		}
	}
}

func TestMNISTErrors(t *testing.T) {
	dir := t.TempDir()
	d := indexed(12, 4, 5, 10)
	img, lab := filepath.Join(dir, "img"), filepath.Join(dir, "lab")
	if err := WriteIDX(img, lab, d, false); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(img)
	rawLab, _ := os.ReadFile(lab)
	put := func(name string, b []byte, gz bool) string {
		p := filepath.Join(dir, name)
		if gz {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			zw.Write(b)
			zw.Close()
			b = buf.Bytes()
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}

	if got, err := ReadIDX(img, lab, 10); err != nil {
		t.Fatal(err)
	} else {
		sameData(t, got, d)
	}

	_, err := ReadIDX(filepath.Join(dir, "nope"), lab, 10)
	wantErr(t, err, ErrMissing, "nope")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file error %v does not wrap fs.ErrNotExist", err)
	}
	_, _, err = LoadMNIST(filepath.Join(dir, "nodir"))
	wantErr(t, err, ErrMissing, "nodir")
	_, _, err = LoadMNIST(dir)
	wantErr(t, err, ErrMissing, MNISTTrainImages)

	for _, gz := range []bool{false, true} {
		sfx := map[bool]string{false: "", true: ".gz"}[gz]
		bad := append([]byte{}, raw...)
		bad[3] = 0x01 // label magic in an image file
		p := put("magic"+sfx, bad, gz)
		_, err = ReadIDX(p, lab, 10)
		wantErr(t, err, ErrFormat, p, "0x00000801", "0x00000803")

		p = put("short"+sfx, raw[:len(raw)-7], gz)
		_, err = ReadIDX(p, lab, 10)
		wantErr(t, err, ErrTruncated, p)

		p = put("hdr"+sfx, raw[:10], gz)
		_, err = ReadIDX(p, lab, 10)
		wantErr(t, err, ErrTruncated, p, "header")

		p = put("long"+sfx, append(append([]byte{}, raw...), 1, 2, 3), gz)
		_, err = ReadIDX(p, lab, 10)
		wantErr(t, err, ErrFormat, p)

		bl := append([]byte{}, rawLab...)
		bl[8+5] = 10
		p = put("label"+sfx, bl, gz)
		_, err = ReadIDX(img, p, 10)
		wantErr(t, err, ErrLabel, p, "label 10", "item 5")

		p = put("fewlabels"+sfx, append([]byte{0, 0, 8, 1, 0, 0, 0, 11}, rawLab[8:19]...), gz)
		_, err = ReadIDX(img, p, 10)
		wantErr(t, err, ErrFormat, p, "11 labels", "12 images")
	}

	// A gzip stream whose checksum is wrong.
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(raw)
	zw.Close()
	b := buf.Bytes()
	b[len(b)-6] ^= 0xff
	p := put("crc.gz", b, false)
	_, err = ReadIDX(p, lab, 10)
	wantErr(t, err, ErrFormat, p)

	// A header announcing far more data than the (gzipped) file holds.
	huge := append([]byte{}, raw[:16]...)
	huge[4], huge[5] = 0x7f, 0xff
	p = put("huge.gz", huge, true)
	_, err = ReadIDX(p, lab, 10)
	if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrFormat) {
		t.Fatalf("huge header: %v", err)
	}
}

// TestCIFAR10: the published file names and layout, read back from the
// archive's sub-folder. The names are the same for every caller: what one
// does with the slice it got changes nothing for the others.
func TestCIFAR10(t *testing.T) {
	names := CIFAR10TrainFiles()
	names[0] = "elsewhere.bin"
	if got := CIFAR10TrainFiles(); len(got) != 5 || got[0] != "data_batch_1.bin" || got[4] != "data_batch_5.bin" {
		t.Fatalf("CIFAR-10 training files %q after a caller changed its copy", got)
	}
	dir := t.TempDir()
	sub := filepath.Join(dir, "cifar-10-batches-bin")
	os.Mkdir(sub, 0o755)
	var parts []*Dataset
	for i, name := range CIFAR10TrainFiles() {
		p := Synthetic(3+i, 3, 32, 32, 10, uint64(i))
		parts = append(parts, p)
		if err := WriteCIFAR10(filepath.Join(sub, name), p); err != nil {
			t.Fatal(err)
		}
	}
	test := Synthetic(4, 3, 32, 32, 10, 9)
	if err := WriteCIFAR10(filepath.Join(sub, CIFAR10TestFile), test); err != nil {
		t.Fatal(err)
	}
	train, gtest, err := LoadCIFAR10(dir)
	if err != nil {
		t.Fatal(err)
	}
	sameData(t, gtest, test)
	if train.N != 3+4+5+6+7 {
		t.Fatalf("train has %d images, want 25", train.N)
	}
	off := 0
	for _, p := range parts {
		sameData(t, train.Slice(off, off+p.N), p)
		off += p.N
	}

	// Raw bytes of the published format: label byte, then the R, G, B planes.
	raw, _ := os.ReadFile(filepath.Join(sub, CIFAR10TestFile))
	if len(raw) != 4*3073 || raw[0] != byte(test.Labels[0]) || raw[1+1024] != test.Pixels[1024] {
		t.Fatal("CIFAR-10 file layout is not label + 3072 pixel bytes per record")
	}

	put := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, b, 0o644)
		return p
	}
	p := put("short.bin", raw[:len(raw)-1])
	_, err = ReadCIFAR10(p)
	wantErr(t, err, ErrTruncated, p)
	bad := append([]byte{}, raw...)
	bad[2*3073] = 10
	p = put("label.bin", bad)
	_, err = ReadCIFAR10(p)
	wantErr(t, err, ErrLabel, p, "record 2")
	_, err = ReadCIFAR10(filepath.Join(dir, "none.bin"))
	wantErr(t, err, ErrMissing, "none.bin")
	_, _, err = LoadCIFAR10(t.TempDir())
	wantErr(t, err, ErrMissing, "data_batch_1.bin")
}

func TestCheckShape(t *testing.T) {
	d := Synthetic(2, 1, 28, 28, 10, 1)
	if err := d.CheckShape(1, 28, 28, 10); err != nil {
		t.Fatal(err)
	}
	wantErr(t, d.CheckShape(3, 32, 32, 10), ErrShape, d.Source, "1×28×28", "3×32×32")
	wantErr(t, d.CheckShape(1, 28, 28, 5), ErrShape, d.Source, "10 classes")
}

func TestMeanNormalizer(t *testing.T) {
	d := &Dataset{N: 2, C: 1, H: 1, W: 3, Scale: 0.5, Pixels: []uint8{0, 10, 255, 4, 30, 1}}
	z := MeanNormalizer(d)
	want := []float32{1, 10, 64} // 0.5·(0+4)/2, 0.5·(10+30)/2, 0.5·(255+1)/2
	for i := range want {
		if z.Mean[i] != want[i] {
			t.Fatalf("mean %v, want %v", z.Mean, want)
		}
	}
	x := make([]float32, 3)
	z.Fill(d, 1, x)
	if x[0] != 1 || x[1] != 5 || x[2] != -63.5 {
		t.Fatalf("normalised image 1 = %v, want [1 5 -63.5]", x)
	}
}
