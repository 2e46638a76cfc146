//go:build turbojpeg && cgo

package turbo

/*
#cgo pkg-config: libturbojpeg
#cgo noescape tjDecompressHeader3
#cgo nocallback tjDecompressHeader3
#cgo noescape tjDecompress2
#cgo nocallback tjDecompress2
#include <stdlib.h>
#include <turbojpeg.h>

static int ss_tj_pixel_rgb(void) { return TJPF_RGB; }
static int ss_tj_pixel_cmyk(void) { return TJPF_CMYK; }
static int ss_tj_pixel_gray(void) { return TJPF_GRAY; }
static int ss_tj_warning(tjhandle h) { return tjGetErrorCode(h) == TJERR_WARNING; }
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Built reports whether this build has the binding to libjpeg-turbo.
const Built = true

// Decoder is a TurboJPEG decompressor handle.
type Decoder struct {
	h    C.tjhandle
	cmyk []byte // CMYK scratch, reused
}

// NewDecoder returns a decoder; its handle is freed by Close (or, failing
// that, when it is collected).
func NewDecoder() (*Decoder, error) {
	h := C.tjInitDecompress()
	if h == nil {
		return nil, fmt.Errorf("turbojpeg: tjInitDecompress: %s", C.GoString(C.tjGetErrorStr2(nil)))
	}
	d := &Decoder{h: h}
	runtime.SetFinalizer(d, (*Decoder).Close)
	return d, nil
}

// Close frees the handle. The decoder must not be used afterwards.
func (d *Decoder) Close() {
	if d.h != nil {
		C.tjDestroy(d.h)
		d.h = nil
	}
}

// err returns the error of the last call and replaces the handle: one
// that failed mid-stream may not decode the next image right.
func (d *Decoder) err(what string) error {
	err := fmt.Errorf("%w: %s: %s", ErrDecode, what, C.GoString(C.tjGetErrorStr2(d.h)))
	if h := C.tjInitDecompress(); h != nil {
		C.tjDestroy(d.h)
		d.h = h
	}
	return err
}

// Header reads jpeg's size and colour space.
func (d *Decoder) Header(jpeg []byte) (Header, error) {
	if len(jpeg) == 0 {
		return Header{}, fmt.Errorf("%w: empty", ErrDecode)
	}
	var w, h, sub, cs C.int
	if C.tjDecompressHeader3(d.h, (*C.uchar)(&jpeg[0]), C.ulong(len(jpeg)), &w, &h, &sub, &cs) != 0 {
		return Header{}, d.err("header")
	}
	return Header{W: int(w), H: int(h), ColorSpace: int(cs)}, nil
}

// Decode decodes jpeg, whose header is hd, at size sw×sh (hd's size or
// one ScaledSize returned) into dst as packed RGB (3·sw·sh bytes). A
// decoding warning is an error only when the data ends before its EOI
// marker (a truncated file); libjpeg-turbo's other warnings (extraneous
// bytes before a marker, say) leave a complete image.
func (d *Decoder) Decode(jpeg []byte, hd Header, sw, sh int, dst []byte) error {
	return d.decodeFlags(jpeg, hd, sw, sh, dst, C.TJFLAG_FASTUPSAMPLE)
}

func (d *Decoder) decodeFlags(jpeg []byte, hd Header, sw, sh int, dst []byte, flags int) error {
	if len(dst) < 3*sw*sh {
		panic(fmt.Sprintf("turbo.Decode: dst has %d bytes, need %d", len(dst), 3*sw*sh))
	}
	src, n := (*C.uchar)(&jpeg[0]), C.ulong(len(jpeg))
	switch hd.ColorSpace {
	case CSCMYK, CSYCCK:
		if cap(d.cmyk) < 4*sw*sh {
			d.cmyk = make([]byte, 4*sw*sh)
		}
		k := d.cmyk[:4*sw*sh]
		if C.tjDecompress2(d.h, src, n, (*C.uchar)(&k[0]), C.int(sw), 0, C.int(sh), C.ss_tj_pixel_cmyk(), C.int(flags)) != 0 && !d.complete(jpeg) {
			return d.err("decode")
		}
		CMYKToRGB(k, dst[:3*sw*sh])
		return nil
	}
	if C.tjDecompress2(d.h, src, n, (*C.uchar)(unsafe.Pointer(&dst[0])), C.int(sw), 0, C.int(sh), C.ss_tj_pixel_rgb(), C.int(flags)) != 0 && !d.complete(jpeg) {
		return d.err("decode")
	}
	return nil
}

// complete reports whether the last call's failure was only a warning on
// data that holds a whole image (the handle is fresh after a warning, as
// after an error).
func (d *Decoder) complete(jpeg []byte) bool {
	if C.ss_tj_warning(d.h) != 0 && hasEOI(jpeg) {
		if h := C.tjInitDecompress(); h != nil {
			C.tjDestroy(d.h)
			d.h = h
		}
		return true
	}
	return false
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
