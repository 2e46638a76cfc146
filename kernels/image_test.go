package kernels

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/softsync/softsync/kernels/isa"
)

// imageKernels are the implementations of Images this build has: the
// reference and the native kernels at every level the CPU runs.
func imageKernels(t *testing.T) map[string]Images {
	m := map[string]Images{"reference": ReferenceImages()}
	if !NativeBuilt() {
		return m
	}
	for _, l := range isa.All {
		n, err := NativeImagesAt(l)
		if err != nil {
			if isa.Supported(l) {
				t.Fatalf("native image kernels at %v: %v", l, err)
			}
			continue
		}
		m["native/"+l.String()] = n
	}
	return m
}

func randImage(rng *rand.Rand, w, h int) []byte {
	b := make([]byte, 3*w*h)
	for i := range b {
		b[i] = byte(rng.IntN(256))
	}
	return b
}

// TestImageCropMirror checks a crop without resize, mirrored or not and
// normalised, against the pixels picked by hand.
func TestImageCropMirror(t *testing.T) {
	const w, h = 5, 4
	src := make([]byte, 3*w*h)
	for y := range h {
		for x := range w {
			for c := range 3 {
				src[3*(y*w+x)+c] = byte(100*c + 10*y + x)
			}
		}
	}
	// Crop columns 1…3, rows 2…3 of the unresized image.
	x, y := NewResizeAxis(w, w, 1, 3), NewResizeAxis(h, h, 2, 2)
	mean := make([]float32, 3*2*3)
	for i := range mean {
		mean[i] = float32(i)
	}
	for name, im := range imageKernels(t) {
		for _, mirror := range []bool{false, true} {
			dst := make([]float32, 3*2*3)
			tmp := make([]byte, ImageTmpLen(x, y))
			im.ResizeCHW(src, w, h, x, y, mirror, 0.5, mean, dst, tmp)
			for c := range 3 {
				for j := range 2 {
					for i := range 3 {
						col := 1 + i
						if mirror {
							col = 3 - i
						}
						want := 0.5*float32(100*c+10*(2+j)+col) - mean[(c*2+j)*3+i]
						if got := dst[(c*2+j)*3+i]; got != want {
							t.Fatalf("%s mirror=%v: channel %d (%d,%d) = %v, want %v", name, mirror, c, j, i, got, want)
						}
					}
				}
			}
			u8 := make([]byte, 3*2*3)
			im.Resize(src, w, h, x, y, u8, tmp)
			for j := range 2 {
				if !bytes.Equal(u8[j*9:(j+1)*9], src[3*((2+j)*w+1):3*((2+j)*w+4)]) {
					t.Fatalf("%s: row %d of the crop is %v", name, j, u8[j*9:(j+1)*9])
				}
			}
		}
	}
}

// resizeTolerance bounds the distance of a resized value from the float64
// definition: half a unit for the rounding of each of the two byte
// passes, and a little for the 16-bit coefficients (at most Taps/2 units
// of 2⁻¹⁴ each, times 255, per pass).
const resizeTolerance = 1.05

// naiveResize is the resize of one channel in float64, straight from the
// definition (a triangle of half-width max(in/out, 1)).
func naiveResize(src []byte, sw, sh, c, dw, dh, j, i int) float64 {
	weights := func(in, out, o int) map[int]float64 {
		s := float64(in) / float64(out)
		fs := max(s, 1)
		center := (float64(o) + 0.5) * s
		w, sum := map[int]float64{}, 0.0
		for x := 0; x < in; x++ {
			v := 1 - math.Abs((float64(x)+0.5-center)/fs)
			if v > 0 {
				w[x] = v
				sum += v
			}
		}
		for x := range w {
			w[x] /= sum
		}
		return w
	}
	var v float64
	for y, wy := range weights(sh, dh, j) {
		for x, wx := range weights(sw, dw, i) {
			v += wy * wx * float64(src[3*(y*sw+x)+c])
		}
	}
	return v
}

// TestImageResize checks resizes up and down against the float64
// definition (within the rounding of the two byte passes), and that both
// implementations agree to the bit and leave their input alone.
func TestImageResize(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	kernels := imageKernels(t)
	for _, tc := range []struct{ sw, sh, dw, dh int }{{17, 13, 9, 6}, {9, 7, 9, 7}, {10, 8, 23, 19}, {50, 40, 7, 11}, {3, 2, 1, 1}} {
		// Smooth images, so that rounding the horizontal pass to bytes
		// stays within a unit.
		src := make([]byte, 3*tc.sw*tc.sh)
		for y := range tc.sh {
			for x := range tc.sw {
				for c := range 3 {
					src[3*(y*tc.sw+x)+c] = byte(40 + 7*x + 5*y + 30*c + rng.IntN(3))
				}
			}
		}
		orig := slices.Clone(src)
		x, y := NewResizeAxis(tc.sw, tc.dw, 0, tc.dw), NewResizeAxis(tc.sh, tc.dh, 0, tc.dh)
		var first []byte
		for name, im := range kernels {
			dst := make([]byte, 3*tc.dw*tc.dh)
			im.Resize(src, tc.sw, tc.sh, x, y, dst, make([]byte, ImageTmpLen(x, y)))
			if !bytes.Equal(src, orig) {
				t.Fatalf("%s modified its input", name)
			}
			for j := range tc.dh {
				for i := range tc.dw {
					for c := range 3 {
						want := naiveResize(src, tc.sw, tc.sh, c, tc.dw, tc.dh, j, i)
						if got := float64(dst[3*(j*tc.dw+i)+c]); math.Abs(got-want) > resizeTolerance {
							t.Fatalf("%s %v: (%d,%d,%d) = %v, want %.2f", name, tc, j, i, c, got, want)
						}
					}
				}
			}
			if first == nil {
				first = dst
			} else if !bytes.Equal(first, dst) {
				t.Fatalf("%v: %s differs from another implementation", tc, name)
			}
		}
	}
}

// TestImageKernelsAgree runs random resizes, crops and mirrors through
// every implementation: each must match the float64 definition within
// the rounding of its two byte passes, and their floats must be
// identical.
func TestImageKernelsAgree(t *testing.T) {
	kernels := imageKernels(t)
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		sw, sh := 1+rng.IntN(80), 1+rng.IntN(80)
		dw, dh := 1+rng.IntN(60), 1+rng.IntN(60)
		cw, ch := 1+rng.IntN(dw), 1+rng.IntN(dh)
		x, y := NewResizeAxis(sw, dw, rng.IntN(dw-cw+1), cw), NewResizeAxis(sh, dh, rng.IntN(dh-ch+1), ch)
		src := randImage(rng, sw, sh)
		mean := make([]float32, 3*cw*ch)
		for i := range mean {
			mean[i] = rng.Float32() * 200
		}
		mirror := rng.IntN(2) == 1
		var outs [][]float32
		for name, im := range kernels {
			dst := make([]float32, 3*cw*ch)
			im.ResizeCHW(src, sw, sh, x, y, mirror, 1, mean, dst, make([]byte, ImageTmpLen(x, y)))
			outs = append(outs, dst)
			c, j, i := rng.IntN(3), rng.IntN(ch), rng.IntN(cw)
			col := x.Lo + i
			if mirror {
				col = x.Lo + cw - 1 - i
			}
			want := naiveResize(src, sw, sh, c, dw, dh, y.Lo+j, col) - float64(mean[(c*ch+j)*cw+i])
			if got := float64(dst[(c*ch+j)*cw+i]); math.Abs(got-want) > resizeTolerance {
				t.Fatalf("%s: %dx%d → %dx%d, crop %dx%d at (%d,%d) mirror=%v: (%d,%d,%d) = %v, want %.2f",
					name, sw, sh, dw, dh, cw, ch, x.Lo, y.Lo, mirror, c, j, i, got, want)
			}
		}
		for k := 1; k < len(outs); k++ {
			if !slices.Equal(outs[0], outs[k]) {
				t.Fatalf("%dx%d → %dx%d crop %dx%d mirror=%v: implementations differ", sw, sh, dw, dh, cw, ch, mirror)
			}
		}
	}
}

// TestImageSIMDShapes runs ImageNet-sized resizes (several tap counts,
// crops reaching the source's last row and column, odd row counts,
// mirrored or not) through every implementation: bytes and floats must be
// identical, and a flat image must stay flat.
func TestImageSIMDShapes(t *testing.T) {
	kernels := imageKernels(t)
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct{ sw, sh, dw, dh, cw, ch int }{
		{500, 375, 341, 256, 224, 224}, {375, 500, 256, 341, 224, 224}, {250, 188, 341, 256, 224, 224},
		{97, 61, 40, 30, 33, 17}, {600, 37, 100, 9, 100, 9}, {31, 29, 31, 29, 31, 29}, {1000, 700, 97, 65, 96, 65},
	} {
		src := randImage(rng, tc.sw, tc.sh)
		x := NewResizeAxis(tc.sw, tc.dw, tc.dw-tc.cw, tc.cw) // the crop's last column
		y := NewResizeAxis(tc.sh, tc.dh, tc.dh-tc.ch, tc.ch)
		mean := make([]float32, 3*tc.cw*tc.ch)
		for i := range mean {
			mean[i] = rng.Float32() * 100
		}
		for _, mirror := range []bool{false, true} {
			var f32 [][]float32
			var u8 [][]byte
			for _, im := range kernels {
				tmp := make([]byte, ImageTmpLen(x, y))
				d := make([]float32, 3*tc.cw*tc.ch)
				im.ResizeCHW(src, tc.sw, tc.sh, x, y, mirror, 1.0/255, mean, d, tmp)
				f32 = append(f32, d)
				b := make([]byte, 3*tc.cw*tc.ch)
				im.Resize(src, tc.sw, tc.sh, x, y, b, tmp)
				u8 = append(u8, b)
			}
			for k := 1; k < len(f32); k++ {
				if !slices.Equal(f32[0], f32[k]) || !bytes.Equal(u8[0], u8[k]) {
					t.Fatalf("%v mirror=%v: implementations differ", tc, mirror)
				}
			}
		}
		flat := bytes.Repeat([]byte{7, 200, 255}, tc.sw*tc.sh)
		for name, im := range kernels {
			b := make([]byte, 3*tc.cw*tc.ch)
			im.Resize(flat, tc.sw, tc.sh, x, y, b, make([]byte, ImageTmpLen(x, y)))
			if !bytes.Equal(b, bytes.Repeat([]byte{7, 200, 255}, tc.cw*tc.ch)) {
				t.Fatalf("%s %v: a flat image does not stay flat", name, tc)
			}
		}
	}
}

// TestResizeAxisWindow checks that an axis moved onto a window of its
// source reads the same pixels, that Set reuses memory, and that a window
// lacking needed pixels panics.
func TestResizeAxisWindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	src := randImage(rng, 120, 90)
	x, y := NewResizeAxis(120, 80, 20, 50), NewResizeAxis(90, 60, 5, 40)
	want := make([]byte, 3*50*40)
	ReferenceImages().Resize(src, 120, 90, x, y, want, make([]byte, ImageTmpLen(x, y)))
	x0, x1 := x.Needs()
	y0, y1 := y.Needs()
	x0, y0 = x0-3, y0-2 // a window a little larger than needed
	w, h := x1-x0, y1-y0
	part := make([]byte, 3*w*h)
	for r := range h {
		copy(part[3*r*w:3*(r+1)*w], src[3*((y0+r)*120+x0):])
	}
	x.Window(x0, w)
	y.Window(y0, h)
	for name, im := range imageKernels(t) {
		got := make([]byte, len(want))
		im.Resize(part, w, h, x, y, got, make([]byte, ImageTmpLen(x, y)))
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: the window resizes differently", name)
		}
	}
	a := NewResizeAxis(500, 341, 10, 224)
	if n := testing.AllocsPerRun(10, func() { a.Set(480, 320, 5, 224) }); n != 0 {
		t.Fatalf("Set allocates %v times", n)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a window without the needed pixels did not panic")
		}
	}()
	x.Window(5, w) // pixels 3… are needed
}

// TestImageCropOfResize checks that a crop of a resize holds exactly the
// pixels of the whole resize at its place (what a pack of pre-resized
// images relies on).
func TestImageCropOfResize(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	src := randImage(rng, 500, 375)
	fx, fy := NewResizeAxis(500, 341, 0, 341), NewResizeAxis(375, 256, 0, 256)
	whole := make([]byte, 3*341*256)
	ReferenceImages().Resize(src, 500, 375, fx, fy, whole, make([]byte, ImageTmpLen(fx, fy)))
	for name, im := range imageKernels(t) {
		x, y := NewResizeAxis(500, 341, 101, 224), NewResizeAxis(375, 256, 17, 224)
		crop := make([]byte, 3*224*224)
		im.Resize(src, 500, 375, x, y, crop, make([]byte, ImageTmpLen(x, y)))
		for j := range 224 {
			if !bytes.Equal(crop[3*224*j:3*224*(j+1)], whole[3*(341*(17+j)+101):][:3*224]) {
				t.Fatalf("%s: row %d of the crop differs from the whole resize", name, j)
			}
		}
	}
}
