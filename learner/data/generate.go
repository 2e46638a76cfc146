package data

import (
	"bytes"
	"fmt"
	"image"
	"image/jpeg"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// FolderGen describes an image folder that GenerateImageFolder writes.
type FolderGen struct {
	Classes    int     // ≥ 1
	Train, Val int     // images per class in train/ and val/ (Val 0: no val folder)
	W, H       int     // mean size; each image's sides vary by up to ±Vary of it
	Vary       float64 // 0 … 0.9
	Quality    int     // JPEG quality, 1 … 100
	Noise      int     // per-pixel noise amplitude (0 … 127): higher makes larger files
	// Texture is the amplitude (0 … 127) of a photograph-like texture
	// added to each image (fractal noise down to single pixels, see
	// addTexture): it makes JPEGs as large, and as slow to decode, as
	// photographs of the same quality. 0: none.
	Texture int
	Seed    uint64
}

// ImageNetLike is the generator of benchmark folders whose JPEGs stand
// in for ImageNet's: 500×375 on average (±20% each side), quality 90 with
// 4:2:0 chroma, about 110 KB each, like ImageNet's training images.
func ImageNetLike(classes, perClass int, seed uint64) FolderGen {
	return FolderGen{Classes: classes, Train: perClass, W: 500, H: 375, Vary: 0.2, Quality: 90, Noise: 4, Texture: 80, Seed: seed}
}

// GenerateImageFolder writes an ImageNet-style folder of JPEGs into dir
// (dir/train/cNNN/iNNNNN.jpg, dir/val/…) that a network can learn: each
// class has a random colour prototype over a 4×4 grid of cells, smoothly
// interpolated, so that it survives resizing, cropping and mirroring;
// each image is its class's prototype, shifted a little in brightness,
// plus uniform noise. Image content and sizes are drawn from Seed. It
// stands in for ImageNet in tests and benchmarks.
func GenerateImageFolder(dir string, g FolderGen) error {
	if g.Classes < 1 || g.Train < 1 || g.W < 1 || g.H < 1 || g.Quality < 1 || g.Quality > 100 || g.Vary < 0 || g.Vary > 0.9 ||
		g.Noise < 0 || g.Noise > 127 || g.Texture < 0 || g.Texture > 127 {
		return fmt.Errorf("%w: image folder generator: %+v", ErrConfig, g)
	}
	rng := rand.New(rand.NewPCG(g.Seed, 0x1a6e))
	const grid = 4
	protos := make([][grid * grid * 3]float64, g.Classes)
	for k := range protos {
		for i := range protos[k] {
			protos[k][i] = float64(30 + rng.IntN(196))
		}
	}
	var buf bytes.Buffer
	for _, split := range []struct {
		name string
		n    int
	}{{"train", g.Train}, {"val", g.Val}} {
		for k := 0; k < g.Classes && split.n > 0; k++ {
			cdir := filepath.Join(dir, split.name, fmt.Sprintf("c%03d", k))
			if err := os.MkdirAll(cdir, 0o755); err != nil {
				return err
			}
			for i := range split.n {
				w := max(1, int(float64(g.W)*(1+g.Vary*(2*rng.Float64()-1))))
				h := max(1, int(float64(g.H)*(1+g.Vary*(2*rng.Float64()-1))))
				m := protoImage(&protos[k], w, h, rng.IntN(41)-20, g.Noise, rng)
				if g.Texture > 0 {
					addTexture(m, g.Texture, rng)
				}
				buf.Reset()
				if err := jpeg.Encode(&buf, m, &jpeg.Options{Quality: g.Quality}); err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(cdir, fmt.Sprintf("i%05d.jpg", i)), buf.Bytes(), 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// protoImage renders a prototype (grid×grid cells of RGB) at w×h,
// bilinearly interpolated between cell centres, plus shift and noise.
func protoImage(p *[48]float64, w, h, shift, noise int, rng *rand.Rand) *image.RGBA {
	const grid = 4
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		fy := min(max((float64(y)+0.5)*grid/float64(h)-0.5, 0), grid-1)
		y0 := min(int(fy), grid-2)
		ty := fy - float64(y0)
		for x := range w {
			fx := min(max((float64(x)+0.5)*grid/float64(w)-0.5, 0), grid-1)
			x0 := min(int(fx), grid-2)
			tx := fx - float64(x0)
			for c := range 3 {
				at := func(cy, cx int) float64 { return p[(cy*grid+cx)*3+c] }
				v := (1-ty)*((1-tx)*at(y0, x0)+tx*at(y0, x0+1)) + ty*((1-tx)*at(y0+1, x0)+tx*at(y0+1, x0+1))
				v += float64(shift)
				if noise > 0 {
					v += float64(rng.IntN(2*noise+1) - noise)
				}
				m.Pix[m.PixOffset(x, y)+c] = byte(min(max(v, 0), 255))
			}
			m.Pix[m.PixOffset(x, y)+3] = 255
		}
	}
	return m
}

// addTexture adds fractal value noise to m: for cells of 1, 2, 4, … 64
// pixels, random values on the cells' corners, bilinearly interpolated,
// of amplitude proportional to the cell size to the power 0.2 (amp at
// the coarsest scale; flatter than photographs' spectrum, so that files
// reach ImageNet's size at its quality), mostly in brightness (the three
// channels share 3/4 of each value), as photographs' detail is.
func addTexture(m *image.RGBA, amp int, rng *rand.Rand) {
	b := m.Bounds()
	w, h := b.Dx(), b.Dy()
	const octaves = 7
	sum := make([]float64, 3*w*h)
	for o := range octaves {
		cell := 1 << o
		a := float64(amp) * math.Pow(float64(cell)/float64(int(1)<<(octaves-1)), 0.2)
		gw, gh := w/cell+2, h/cell+2
		grid := make([]float64, 4*gw*gh) // brightness, then three chroma values, per corner
		for i := range grid {
			grid[i] = (2*rng.Float64() - 1) * a
		}
		for y := range h {
			fy := float64(y) / float64(cell)
			y0 := int(fy)
			ty := fy - float64(y0)
			for x := range w {
				fx := float64(x) / float64(cell)
				x0 := int(fx)
				tx := fx - float64(x0)
				at := func(gy, gx, k int) float64 { return grid[4*(gy*gw+gx)+k] }
				for k := range 4 {
					v := (1-ty)*((1-tx)*at(y0, x0, k)+tx*at(y0, x0+1, k)) + ty*((1-tx)*at(y0+1, x0, k)+tx*at(y0+1, x0+1, k))
					if k == 0 {
						for c := range 3 {
							sum[3*(y*w+x)+c] += 0.75 * v
						}
					} else {
						sum[3*(y*w+x)+k-1] += 0.25 * v
					}
				}
			}
		}
	}
	for y := range h {
		for x := range w {
			for c := range 3 {
				p := m.PixOffset(b.Min.X+x, b.Min.Y+y) + c
				m.Pix[p] = byte(min(max(float64(m.Pix[p])+sum[3*(y*w+x)+c], 0), 255))
			}
		}
	}
}
