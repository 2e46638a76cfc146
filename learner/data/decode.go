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

// RGB is a decoded image: W×H pixels of 3 bytes (red, green, blue),
// row-major with no padding (pixel (x, y) at Pix[3·(y·W+x)]).
//
// SrcW×SrcH is the size of the encoded image, which a JPEG decoded at a
// reduced DCT scale exceeds.
type RGB struct {
	Pix        []byte
	W, H       int
	SrcW, SrcH int
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
	if len(src) == 0 {
		return RGB{}, fmt.Errorf("%w: empty file", ErrImage)
	}
	if isJPEG(src) && !d.pureGo {
		hd, err := d.tj.Header(src)
		if err != nil {
			return RGB{}, fmt.Errorf("%w: %w", ErrImage, err)
		}
		w, h := turbo.ScaledSize(hd.W, hd.H, minShort)
		img := d.alloc(w, h)
		img.SrcW, img.SrcH = hd.W, hd.H
		if err := d.tj.Decode(src, hd, w, h, img.Pix); err != nil {
			return RGB{}, fmt.Errorf("%w: %w", ErrImage, err)
		}
		return img, nil
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
	return img, nil
}

func (d *decoder) alloc(w, h int) RGB {
	if cap(d.buf) < 3*w*h {
		d.buf = make([]byte, 3*w*h)
	}
	return RGB{Pix: d.buf[:3*w*h], W: w, H: h, SrcW: w, SrcH: h}
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
