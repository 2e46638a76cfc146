package kernels

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// imageKernels are the implementations of Images this build has.
func imageKernels(t *testing.T) map[string]Images {
	m := map[string]Images{"reference": ReferenceImages()}
	if n, err := NativeImages(); err == nil {
		m["native"] = n
	} else if NativeBuilt() {
		t.Fatalf("native engine built but no native image kernels: %v", err)
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
						if got := float64(dst[3*(j*tc.dw+i)+c]); math.Abs(got-want) > 1.01 {
							t.Fatalf("%s %v: (%d,%d,%d) = %v, want %.2f", name, tc, j, i, c, got, want)
						}
					}
				}
			}
			if first == nil {
				first = dst
			} else if !bytes.Equal(first, dst) {
				t.Fatalf("%v: native and reference differ", tc)
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
			if got := float64(dst[(c*ch+j)*cw+i]); math.Abs(got-want) > 1.01 {
				t.Fatalf("%s: %dx%d → %dx%d, crop %dx%d at (%d,%d) mirror=%v: (%d,%d,%d) = %v, want %.2f",
					name, sw, sh, dw, dh, cw, ch, x.Lo, y.Lo, mirror, c, j, i, got, want)
			}
		}
		if len(outs) == 2 && !slices.Equal(outs[0], outs[1]) {
			t.Fatalf("%dx%d → %dx%d crop %dx%d mirror=%v: native and reference differ", sw, sh, dw, dh, cw, ch, mirror)
		}
	}
}
