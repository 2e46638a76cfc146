//go:build turbojpeg && cgo

package turbo

/*
#cgo pkg-config: libturbojpeg libjpeg
#cgo noescape ss_jdec_header
#cgo nocallback ss_jdec_header
#cgo noescape ss_jdec_rect
#cgo nocallback ss_jdec_rect
#include <stdlib.h>
#include <turbojpeg.h>
#include "jdec.h"

static int ss_tj_pixel_rgb(void) { return TJPF_RGB; }
static int ss_tj_pixel_cmyk(void) { return TJPF_CMYK; }
static int ss_tj_pixel_gray(void) { return TJPF_GRAY; }
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Built reports whether this build has the binding to libjpeg-turbo.
const Built = true

// Decoder is a libjpeg decompressor.
type Decoder struct {
	d *C.ss_jdec
	// FastDCT selects libjpeg-turbo's fast integer inverse DCT
	// (TJFLAG_FASTDCT, JDCT_IFAST) instead of the accurate one.
	FastDCT bool
}

// NewDecoder returns a decoder; it is freed by Close (or, failing that,
// when it is collected).
func NewDecoder() (*Decoder, error) {
	p := C.ss_jdec_new()
	if p == nil {
		return nil, fmt.Errorf("turbojpeg: cannot make a decompressor (out of memory)")
	}
	d := &Decoder{d: p}
	runtime.SetFinalizer(d, (*Decoder).Close)
	return d, nil
}

// Close frees the decompressor. The decoder must not be used afterwards.
func (d *Decoder) Close() {
	if d.d != nil {
		C.ss_jdec_free(d.d)
		d.d = nil
	}
}

func (d *Decoder) err(what string) error {
	return fmt.Errorf("%w: %s: %s", ErrDecode, what, C.GoString(&d.d.msg[0]))
}

// Header reads jpeg's size and colour space.
func (d *Decoder) Header(jpeg []byte) (Header, error) {
	if len(jpeg) == 0 {
		return Header{}, fmt.Errorf("%w: empty", ErrDecode)
	}
	var w, h, cs C.int
	if C.ss_jdec_header(d.d, (*C.uchar)(&jpeg[0]), C.ulong(len(jpeg)), &w, &h, &cs) != 0 {
		return Header{}, d.err("header")
	}
	return Header{W: int(w), H: int(h), ColorSpace: colorSpace(cs)}, nil
}

// colorSpace maps libjpeg's J_COLOR_SPACE to CSRGB … CSYCCK.
func colorSpace(cs C.int) int {
	switch cs {
	case C.JCS_RGB:
		return CSRGB
	case C.JCS_GRAYSCALE:
		return CSGray
	case C.JCS_CMYK:
		return CSCMYK
	case C.JCS_YCCK:
		return CSYCCK
	}
	return CSYCbCr
}

// Decode decodes jpeg, whose header is hd, at size sw×sh (hd's size or
// one ScaledSize returned) into dst as packed RGB (3·sw·sh bytes).
func (d *Decoder) Decode(jpeg []byte, hd Header, sw, sh int, dst []byte) error {
	_, _, err := d.DecodeRect(jpeg, hd, sw, sh, 0, 0, sw, sh, dst)
	return err
}

// DecodeRect decodes rows y0 … y1−1 and at least columns x0 … x1−1 of
// jpeg (header hd) at size sw×sh (hd's size or one ScaledSize returned)
// into dst as packed RGB, 3·w bytes a row, y1−y0 rows; dst must hold
// 3·sw·(y1−y0) bytes. The columns decoded are x … x+w−1: libjpeg-turbo
// decodes whole iMCUs (8 to 32 pixels wide), so they may reach beyond x0
// and x1. Its pixels are those of the whole image decoded.
//
// A decoding warning is an error only when the data ends before its EOI
// marker (a truncated file; all of such a file's data is then decoded,
// whatever rectangle is asked, so that the answer does not depend on
// it); libjpeg-turbo's other warnings (extraneous bytes before a marker,
// say) leave a complete image.
func (d *Decoder) DecodeRect(jpeg []byte, hd Header, sw, sh, x0, y0, x1, y1 int, dst []byte) (x, w int, err error) {
	if x0 < 0 || y0 < 0 || x1 > sw || y1 > sh || x0 >= x1 || y0 >= y1 {
		panic(fmt.Sprintf("turbo.DecodeRect: rectangle [%d,%d)×[%d,%d) of a %d×%d image", x0, x1, y0, y1, sw, sh))
	}
	if len(dst) < 3*sw*(y1-y0) {
		panic(fmt.Sprintf("turbo.DecodeRect: dst has %d bytes, need %d", len(dst), 3*sw*(y1-y0)))
	}
	num := 0
	for _, s := range scales {
		if scaled(hd.W, s) == sw && scaled(hd.H, s) == sh {
			num = 8 * s.num / s.den
		}
	}
	if num == 0 || len(jpeg) == 0 {
		return 0, 0, fmt.Errorf("%w: cannot decode a %d×%d JPEG at %d×%d", ErrDecode, hd.W, hd.H, sw, sh)
	}
	truncated := !hasEOI(jpeg)
	var ox, ow C.int
	n := C.ss_jdec_rect(d.d, (*C.uchar)(&jpeg[0]), C.ulong(len(jpeg)), C.int(num), C.int(sw), C.int(sh),
		C.int(x0), C.int(y0), C.int(x1), C.int(y1), cbool(truncated), cbool(d.FastDCT), (*C.uchar)(unsafe.Pointer(&dst[0])), &ox, &ow)
	switch {
	case n < 0:
		return 0, 0, d.err("decode")
	case n > 0 && truncated:
		return 0, 0, d.err("truncated (no EOI marker)")
	}
	return int(ox), int(ow), nil
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// Encoder is a TurboJPEG compressor handle.
type Encoder struct{ h C.tjhandle }

// NewEncoder returns an encoder; Close frees it.
func NewEncoder() (*Encoder, error) {
	h := C.tjInitCompress()
	if h == nil {
		return nil, fmt.Errorf("turbojpeg: tjInitCompress: %s", C.GoString(C.tjGetErrorStr2(nil)))
	}
	e := &Encoder{h: h}
	runtime.SetFinalizer(e, (*Encoder).Close)
	return e, nil
}

// Close frees the handle.
func (e *Encoder) Close() {
	if e.h != nil {
		C.tjDestroy(e.h)
		e.h = nil
	}
}

// Sampling of an encoded JPEG's chroma.
const (
	Sub444  = C.TJSAMP_444
	Sub420  = C.TJSAMP_420
	SubGray = C.TJSAMP_GRAY
)

// Encode compresses a w×h image at quality 1…100 with chroma sampling
// sub and appends the JPEG to out. Pixels are packed RGB (3 bytes a
// pixel), or one byte a pixel with SubGray, or CMYK (4 bytes, Adobe's
// inverted convention, written as YCCK) when cmyk is set.
func (e *Encoder) Encode(out, pix []byte, w, h, quality, sub int, cmyk bool) ([]byte, error) {
	pf := C.ss_tj_pixel_rgb()
	switch {
	case cmyk:
		pf = C.ss_tj_pixel_cmyk()
	case sub == SubGray:
		pf = C.ss_tj_pixel_gray()
	}
	var buf *C.uchar
	var size C.ulong
	p := C.CBytes(pix) // the encoder may read pix after cgo's pointer check; a C copy is simplest
	defer C.free(p)
	if C.tjCompress2(e.h, (*C.uchar)(p), C.int(w), 0, C.int(h), pf, &buf, &size, C.int(sub), C.int(quality), 0) != 0 {
		return out, fmt.Errorf("turbojpeg: encode: %s", C.GoString(C.tjGetErrorStr2(e.h)))
	}
	defer C.tjFree(buf)
	return append(out, unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(size))...), nil
}
