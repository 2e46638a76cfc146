package data

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/gif" // GIF, recognised by image.Decode
	"image/jpeg"
	_ "image/png" // PNG, recognised by image.Decode

	"github.com/softsync/softsync/learner/data/internal/turbo"
)

// ErrImage: a file is not an image this package can decode (empty,
// truncated, or of another format). The message names the file.
var ErrImage = errors.New("undecodable image")

// RGB is a decoded image, or a rectangle of one: W×H pixels of 3 bytes
// (red, green, blue), row-major with no padding (pixel (x, y) at
// Pix[3·(y·W+x)]), pixel (X+x, Y+y) of the image as decoded, FullW×FullH.
//
// SrcW×SrcH is the size of the encoded image, which a JPEG decoded at a
// reduced DCT scale exceeds.
type RGB struct {
	Pix          []byte
	W, H         int
	X, Y         int
	FullW, FullH int
	SrcW, SrcH   int
}

// rectFunc chooses the rectangle of an image to decode once its size is
// known (w×h as decoded, srcW×srcH as encoded): columns x0 … x1−1 and rows
// y0 … y1−1. A decoder may return more.
type rectFunc interface {
	rect(w, h, srcW, srcH int) (x0, y0, x1, y1 int)
}

// TurboJPEG reports whether JPEGs are decoded by libjpeg-turbo in this
// build (the turbojpeg build tag with cgo); otherwise by Go's image/jpeg.
func TurboJPEG() bool { return turbo.Built }

// decoder turns encoded images into RGB, recognising the format by
// content, not by name: JPEG by libjpeg-turbo when built in (pureGo
// unset), at the smallest DCT scale whose shorter side is still ≥ the
// asked length; everything else (and JPEG in pure-Go builds) by Go's
// image packages at full size. Greyscale, CMYK/YCCK and paletted images
// become RGB; an alpha channel is dropped (the colour of each pixel is
// kept as stored, not blended). A decoder is used by one goroutine; the
// image it returns lives in its buffer until the next call.
type decoder struct {
	pureGo bool
	tj     *turbo.Decoder
	buf    []byte
}

func newDecoder(pureGo bool) *decoder {
	d := &decoder{pureGo: pureGo || !turbo.Built}
	if !d.pureGo {
		tj, err := turbo.NewDecoder()
		if err != nil { // out of memory for a handle: decode in Go
			d.pureGo = true
		}
		d.tj = tj
	}
	return d
}

func (d *decoder) close() {
	if d.tj != nil {
		d.tj.Close()
	}
}

// isJPEG reports whether src starts with JPEG's SOI marker.
func isJPEG(src []byte) bool {
	return len(src) >= 3 && src[0] == 0xff && src[1] == 0xd8 && src[2] == 0xff
}

// decode decodes src; minShort > 0 lets a JPEG decode smaller, down to
// a shorter side of minShort. The error wraps ErrImage.
func (d *decoder) decode(src []byte, minShort int) (RGB, error) {
	return d.decodeRect(src, minShort, nil)
}

// decodeRect is decode of the rectangle r chooses (nil: the whole image).
// libjpeg-turbo decodes only that rectangle of a JPEG (widened to whole
// iMCU columns); other decoders decode the whole image.
func (d *decoder) decodeRect(src []byte, minShort int, r rectFunc) (RGB, error) {
	if len(src) == 0 {
		return RGB{}, fmt.Errorf("%w: empty file", ErrImage)
	}
	if isJPEG(src) && !d.pureGo {
		hd, err := d.tj.Header(src)
		if err != nil {
			return RGB{}, fmt.Errorf("%w: %w", ErrImage, err)
		}
		w, h := turbo.ScaledSize(hd.W, hd.H, minShort)
		x0, y0, x1, y1 := 0, 0, w, h
		if r != nil {
			x0, y0, x1, y1 = r.rect(w, h, hd.W, hd.H)
		}
		d.buf = grow(d.buf, 3*w*(y1-y0))
		x, cw, err := d.tj.DecodeRect(src, hd, w, h, x0, y0, x1, y1, d.buf)
		if err != nil {
			return RGB{}, fmt.Errorf("%w: %w", ErrImage, err)
		}
		return RGB{Pix: d.buf[:3*cw*(y1-y0)], W: cw, H: y1 - y0, X: x, Y: y0, FullW: w, FullH: h, SrcW: hd.W, SrcH: hd.H}, nil
	}
	var m image.Image
	var err error
	if isJPEG(src) {
		m, err = jpeg.Decode(bytes.NewReader(src))
	} else {
		m, _, err = image.Decode(bytes.NewReader(src))
	}
	if err != nil {
		return RGB{}, fmt.Errorf("%w: %w", ErrImage, err)
	}
	b := m.Bounds()
	img := d.alloc(b.Dx(), b.Dy())
	toRGB(m, img)
	if r != nil {
		r.rect(img.W, img.H, img.W, img.H) // the whole image serves any rectangle
	}
	return img, nil
}

func (d *decoder) alloc(w, h int) RGB {
	d.buf = grow(d.buf, 3*w*h)
	return RGB{Pix: d.buf[:3*w*h], W: w, H: h, FullW: w, FullH: h, SrcW: w, SrcH: h}
}

// grow returns b with n bytes, reallocated (with room to spare) only when
// too small.
func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n, n+n/4)
	}
	return b[:n]
}

// toRGB writes m into img (of m's size).
func toRGB(m image.Image, img RGB) {
	b := m.Bounds()
	switch m := m.(type) {
	case *image.YCbCr:
		for y := range img.H {
			row := img.Pix[3*y*img.W:]
			for x := range img.W {
				yi, ci := m.YOffset(b.Min.X+x, b.Min.Y+y), m.COffset(b.Min.X+x, b.Min.Y+y)
				row[3*x], row[3*x+1], row[3*x+2] = color.YCbCrToRGB(m.Y[yi], m.Cb[ci], m.Cr[ci])
			}
		}
	case *image.Gray:
		for y := range img.H {
			row := img.Pix[3*y*img.W:]
			for x := range img.W {
				g := m.Pix[m.PixOffset(b.Min.X+x, b.Min.Y+y)]
				row[3*x], row[3*x+1], row[3*x+2] = g, g, g
			}
		}
	case *image.CMYK:
		for y := range img.H {
			row := img.Pix[3*y*img.W:]
			for x := range img.W {
				p := m.Pix[m.PixOffset(b.Min.X+x, b.Min.Y+y):]
				row[3*x], row[3*x+1], row[3*x+2] = color.CMYKToRGB(p[0], p[1], p[2], p[3])
			}
		}
	default:
		for y := range img.H {
			row := img.Pix[3*y*img.W:]
			for x := range img.W {
				c := color.NRGBAModel.Convert(m.At(b.Min.X+x, b.Min.Y+y)).(color.NRGBA)
				row[3*x], row[3*x+1], row[3*x+2] = c.R, c.G, c.B
			}
		}
	}
}
