package data

import (
	"bytes"
	"errors"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"math"
	"os"
	"testing"

	"github.com/softsync/softsync/learner/data/internal/turbo"
)

// decoders are the JPEG decoding paths of this build: Go's image/jpeg
// always, libjpeg-turbo when built in.
func decoders(t *testing.T) map[string]*decoder {
	m := map[string]*decoder{"go": newDecoder(true)}
	if turbo.Built {
		d := newDecoder(false)
		if d.pureGo {
			t.Fatal("turbojpeg built in but its decoder did not start")
		}
		m["turbo"] = d
	}
	return m
}

// smooth is a w×h test picture whose colours vary slowly, as in photos.
func smooth(w, h int) *image.RGBA {
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			o := m.PixOffset(x, y)
			m.Pix[o], m.Pix[o+1], m.Pix[o+2], m.Pix[o+3] = byte(40+4*x), byte(200-3*y), byte(60+(x+y)/2), 255
		}
	}
	return m
}

// diff returns the largest and the mean absolute difference of two RGB
// images of the same size.
func diff(t *testing.T, a, b RGB) (maxd int, mean float64) {
	t.Helper()
	if a.W != b.W || a.H != b.H {
		t.Fatalf("sizes differ: %dx%d and %dx%d", a.W, a.H, b.W, b.H)
	}
	sum := 0
	for i := range a.Pix[:3*a.W*a.H] {
		d := int(a.Pix[i]) - int(b.Pix[i])
		d = max(d, -d)
		maxd, sum = max(maxd, d), sum+d
	}
	return maxd, float64(sum) / float64(3*a.W*a.H)
}

func rgbOf(m image.Image) RGB {
	b := m.Bounds()
	img := RGB{Pix: make([]byte, 3*b.Dx()*b.Dy()), W: b.Dx(), H: b.Dy()}
	toRGB(m, img)
	return img
}

func encodeJPEG(t *testing.T, m image.Image, q int) []byte {
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, m, &jpeg.Options{Quality: q}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestDecodeJPEG decodes colour (4:2:0) and greyscale JPEGs by every path:
// each is within JPEG's loss of the source pixels, and libjpeg-turbo and
// Go agree within the rounding of their inverse DCT and chroma upsampling.
func TestDecodeJPEG(t *testing.T) {
	col := smooth(37, 29)
	grey := image.NewGray(image.Rect(0, 0, 21, 18))
	for i := range grey.Pix {
		grey.Pix[i] = byte(30 + i%200)
	}
	for _, tc := range []struct {
		name string
		src  image.Image
	}{{"ycbcr", col}, {"grey", grey}} {
		file := encodeJPEG(t, tc.src, 95)
		want := rgbOf(tc.src)
		var got []RGB
		for name, d := range decoders(t) {
			img, err := d.decode(file, 0)
			if err != nil {
				t.Fatalf("%s %s: %v", tc.name, name, err)
			}
			if m, mean := diff(t, img, want); mean > 2 || m > 10 {
				t.Errorf("%s %s: differs from the source by %d at most, %.2f on average", tc.name, name, m, mean)
			}
			got = append(got, RGB{Pix: bytes.Clone(img.Pix), W: img.W, H: img.H})
		}
		if len(got) == 2 {
			if m, mean := diff(t, got[0], got[1]); m > 4 || mean > 1 {
				t.Errorf("%s: libjpeg-turbo and Go differ by %d at most, %.2f on average", tc.name, m, mean)
			}
		}
	}
}

// TestDecodeCMYK decodes an Adobe CMYK (YCCK) JPEG: every path turns it
// into the RGB of its inks, C·K/255 and so on (Adobe's inverted inks).
func TestDecodeCMYK(t *testing.T) {
	file, err := os.ReadFile("testdata/cmyk.jpg") // 16×12, written by libjpeg-turbo from the inks below
	if err != nil {
		t.Fatal(err)
	}
	const w, h = 16, 12
	want := RGB{Pix: make([]byte, 3*w*h), W: w, H: h}
	for y := range h {
		for x := range w {
			c, m, ye, k := 255-12*x, 255-16*y, 128+4*x, 255-5*(x+y)
			p := want.Pix[3*(y*w+x):]
			p[0], p[1], p[2] = byte(c*k/255), byte(m*k/255), byte(ye*k/255)
		}
	}
	var got []RGB
	for name, d := range decoders(t) {
		img, err := d.decode(file, 0)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if m, mean := diff(t, img, want); m > 12 || mean > 2 {
			t.Errorf("%s: differs from the inks' RGB by %d at most, %.2f on average", name, m, mean)
		}
		got = append(got, RGB{Pix: bytes.Clone(img.Pix), W: img.W, H: img.H})
	}
	if len(got) == 2 {
		if m, _ := diff(t, got[0], got[1]); m > 4 {
			t.Errorf("libjpeg-turbo and Go differ by %d", m)
		}
	}
}

// TestDecodeLossless decodes PNG (RGB, alpha, greyscale, 16-bit,
// paletted) and GIF to their exact pixels.
func TestDecodeLossless(t *testing.T) {
	col := smooth(9, 7)
	nrgba := image.NewNRGBA(image.Rect(0, 0, 5, 4))
	for i := range nrgba.Pix {
		nrgba.Pix[i] = byte(17 * i)
	}
	grey16 := image.NewGray16(image.Rect(0, 0, 6, 3))
	for i := range 18 {
		grey16.SetGray16(i%6, i/6, color.Gray16{Y: uint16(3000 * i)})
	}
	pal := image.NewPaletted(image.Rect(0, 0, 4, 4), color.Palette{color.RGBA{255, 0, 0, 255}, color.RGBA{0, 0, 255, 255}, color.RGBA{10, 20, 30, 255}})
	for i := range pal.Pix {
		pal.Pix[i] = byte(i % 3)
	}
	d := decoders(t)["go"]
	for _, tc := range []struct {
		name string
		m    image.Image
		gif  bool
		want func(x, y int) [3]byte
	}{
		{"png-rgb", col, false, func(x, y int) [3]byte { p := col.Pix[col.PixOffset(x, y):]; return [3]byte{p[0], p[1], p[2]} }},
		{"png-alpha", nrgba, false, func(x, y int) [3]byte { p := nrgba.Pix[nrgba.PixOffset(x, y):]; return [3]byte{p[0], p[1], p[2]} }},
		{"png-grey16", grey16, false, func(x, y int) [3]byte { v := byte(3000 * (y*6 + x) >> 8); return [3]byte{v, v, v} }},
		{"png-paletted", pal, false, func(x, y int) [3]byte {
			r, g, b, _ := pal.At(x, y).RGBA()
			return [3]byte{byte(r >> 8), byte(g >> 8), byte(b >> 8)}
		}},
		{"gif", pal, true, func(x, y int) [3]byte {
			r, g, b, _ := pal.At(x, y).RGBA()
			return [3]byte{byte(r >> 8), byte(g >> 8), byte(b >> 8)}
		}},
	} {
		var buf bytes.Buffer
		var err error
		if tc.gif {
			err = gif.Encode(&buf, tc.m, nil)
		} else {
			err = png.Encode(&buf, tc.m)
		}
		if err != nil {
			t.Fatal(err)
		}
		for name, dec := range map[string]*decoder{"go": d, "default": newDecoder(false)} {
			img, err := dec.decode(buf.Bytes(), 0)
			if err != nil {
				t.Fatalf("%s %s: %v", tc.name, name, err)
			}
			b := tc.m.Bounds()
			if img.W != b.Dx() || img.H != b.Dy() {
				t.Fatalf("%s: %dx%d, want %dx%d", tc.name, img.W, img.H, b.Dx(), b.Dy())
			}
			for y := range img.H {
				for x := range img.W {
					if got, want := [3]byte(img.Pix[3*(y*img.W+x):]), tc.want(x, y); got != want {
						t.Fatalf("%s %s: pixel (%d,%d) = %v, want %v", tc.name, name, x, y, got, want)
					}
				}
			}
		}
	}
}

// TestDecodeScaled checks libjpeg-turbo's DCT scaling: a large JPEG asked
// for a much shorter side decodes at the smallest M/8 factor that keeps
// it, close to the full decode shrunk to that size.
func TestDecodeScaled(t *testing.T) {
	if w, h := turbo.ScaledSize(500, 375, 256); w != 500 || h != 375 { // 1/2 is too small
		t.Fatalf("ScaledSize(500, 375, 256) = %d×%d, want 500×375", w, h)
	}
	if w, h := turbo.ScaledSize(64, 48, 0); w != 64 || h != 48 {
		t.Fatalf("ScaledSize without target = %d×%d", w, h)
	}
	if w, h := turbo.ScaledSize(2000, 1600, 300); w != 500 || h != 400 { // 1/4
		t.Fatalf("ScaledSize(2000, 1600, 300) = %d×%d, want 500×400", w, h)
	}
	file := encodeJPEG(t, smooth(160, 120), 95)
	for name, d := range decoders(t) {
		img, err := d.decode(file, 30)
		if err != nil {
			t.Fatal(err)
		}
		wantW, wantH := 160, 120
		if name == "turbo" {
			wantW, wantH = 40, 30 // 2/8
		}
		if img.W != wantW || img.H != wantH {
			t.Fatalf("%s: decoded %dx%d, want %dx%d", name, img.W, img.H, wantW, wantH)
		}
		if name == "turbo" {
			small := shrink(smooth(160, 120), 4)
			if m, mean := diff(t, img, small); mean > 3 || m > 16 {
				t.Errorf("scaled decode differs from the shrunk image by %d at most, %.2f on average", m, mean)
			}
		}
	}
}

// shrink averages f×f blocks.
func shrink(m *image.RGBA, f int) RGB {
	b := m.Bounds()
	w, h := b.Dx()/f, b.Dy()/f
	img := RGB{Pix: make([]byte, 3*w*h), W: w, H: h}
	for y := range h {
		for x := range w {
			for c := range 3 {
				s := 0
				for dy := range f {
					for dx := range f {
						s += int(m.Pix[m.PixOffset(x*f+dx, y*f+dy)+c])
					}
				}
				img.Pix[3*(y*w+x)+c] = byte(math.Round(float64(s) / float64(f*f)))
			}
		}
	}
	return img
}

// TestDecodeBad: empty, truncated and non-image data fail with ErrImage
// on every path.
func TestDecodeBad(t *testing.T) {
	good := encodeJPEG(t, smooth(64, 64), 90)
	for _, tc := range []struct {
		name string
		b    []byte
	}{{"empty", nil}, {"truncated", good[:len(good)/2]}, {"text", []byte("not an image at all\n")}, {"header only", good[:20]}} {
		for name, d := range decoders(t) {
			if _, err := d.decode(tc.b, 0); !errors.Is(err, ErrImage) {
				t.Errorf("%s %s: err = %v, want ErrImage", tc.name, name, err)
			}
			// The decoder still works after a failure.
			if _, err := d.decode(good, 0); err != nil {
				t.Errorf("%s %s: a good image after the bad one: %v", tc.name, name, err)
			}
		}
	}
}

// fixedRect asks for a fixed rectangle (clipped to the image).
type fixedRect struct{ x0, y0, x1, y1 int }

func (r fixedRect) rect(w, h, _, _ int) (int, int, int, int) {
	return min(r.x0, w-1), min(r.y0, h-1), min(r.x1, w), min(r.y1, h)
}

// TestDecodeRect decodes rectangles of JPEGs (4:2:0, 4:4:4, greyscale,
// CMYK; odd sizes, so that rectangles cut iMCUs; full size and ½ scale)
// by every path: each holds at least the rectangle asked, and its pixels
// are exactly those of the whole image decoded by the same path. A
// truncated file fails whatever rectangle is asked.
func TestDecodeRect(t *testing.T) {
	files := map[string][]byte{"go-420": encodeJPEG(t, smooth(203, 151), 90)}
	if cmyk, err := os.ReadFile("testdata/cmyk.jpg"); err == nil {
		files["cmyk"] = cmyk
	} else {
		t.Fatal(err)
	}
	if turbo.Built {
		e, err := turbo.NewEncoder()
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		pix := rgbOf(smooth(203, 151)).Pix
		for name, sub := range map[string]int{"420": turbo.Sub420, "444": turbo.Sub444} {
			b, err := e.Encode(nil, pix, 203, 151, 90, sub, false)
			if err != nil {
				t.Fatal(err)
			}
			files["turbo-"+name] = b
		}
		grey := make([]byte, 203*151)
		for i := range grey {
			grey[i] = byte(i * 7)
		}
		if files["turbo-grey"], err = e.Encode(nil, grey, 203, 151, 90, turbo.SubGray, false); err != nil {
			t.Fatal(err)
		}
	}
	rects := []fixedRect{{0, 0, 1000, 1000}, {17, 9, 150, 100}, {1, 1, 2, 2}, {100, 140, 203, 151}, {33, 0, 41, 151}, {0, 70, 203, 71}}
	for fname, file := range files {
		for dname, d := range decoders(t) {
			for _, minShort := range []int{0, 70} {
				whole, err := d.decode(file, minShort)
				if err != nil {
					t.Fatalf("%s %s: %v", fname, dname, err)
				}
				whole.Pix = bytes.Clone(whole.Pix)
				for _, r := range rects {
					x0, y0, x1, y1 := r.rect(whole.W, whole.H, 0, 0)
					m, err := d.decodeRect(file, minShort, r)
					if err != nil {
						t.Fatalf("%s %s %v: %v", fname, dname, r, err)
					}
					if m.FullW != whole.W || m.FullH != whole.H || m.X > x0 || m.Y > y0 || m.X+m.W < x1 || m.Y+m.H < y1 {
						t.Fatalf("%s %s %v: got %d×%d at (%d,%d) of %d×%d, want [%d,%d)×[%d,%d) of %d×%d",
							fname, dname, r, m.W, m.H, m.X, m.Y, m.FullW, m.FullH, x0, x1, y0, y1, whole.W, whole.H)
					}
					for y := range m.H {
						row := m.Pix[3*y*m.W : 3*(y+1)*m.W]
						full := whole.Pix[3*((m.Y+y)*whole.W+m.X):][:3*m.W]
						if !bytes.Equal(row, full) {
							t.Fatalf("%s %s %v (minShort %d): row %d differs from the whole image's", fname, dname, r, minShort, m.Y+y)
						}
					}
				}
			}
			if _, err := d.decodeRect(file[:len(file)*2/3], 0, fixedRect{0, 0, 8, 8}); !errors.Is(err, ErrImage) {
				t.Errorf("%s %s: the top of a truncated file: err = %v, want ErrImage", fname, dname, err)
			}
		}
	}
}
