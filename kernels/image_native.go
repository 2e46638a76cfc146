//go:build cgo && !noblas

package kernels

/*
#cgo noescape ss_img_resize_u8_flat
#cgo nocallback ss_img_resize_u8_flat
#cgo noescape ss_img_resize_f32_flat
#cgo nocallback ss_img_resize_f32_flat
#include "softsync.h"

static void ss_img_resize_u8_flat(int isa, const unsigned char *src, int sw, int sh,
	int xn, int xtaps, int xbits, const int *xstart, const int16_t *xcoef,
	int yn, int ytaps, int ybits, const int *ystart, const int16_t *ycoef,
	unsigned char *dst, void *tmp)
{
	ss_img_axis x = {xn, xtaps, xbits, xstart, xcoef}, y = {yn, ytaps, ybits, ystart, ycoef};
	ss_img_resize_u8(isa, src, sw, sh, &x, &y, dst, tmp);
}

static void ss_img_resize_f32_flat(int isa, const unsigned char *src, int sw, int sh,
	int xn, int xtaps, int xbits, const int *xstart, const int16_t *xcoef,
	int yn, int ytaps, int ybits, const int *ystart, const int16_t *ycoef,
	int mirror, float scale, const float *mean, float *dst, void *tmp)
{
	ss_img_axis x = {xn, xtaps, xbits, xstart, xcoef}, y = {yn, ytaps, ybits, ystart, ycoef};
	ss_img_resize_f32(isa, src, sw, sh, &x, &y, mirror, scale, mean, dst, tmp);
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/softsync/softsync/kernels/isa"
)

// NativeImages returns the C image kernels (csrc/image.c) at the best
// instruction-set level of this CPU and build.
func NativeImages() (Images, error) { return nativeImages{cISA(cBest())}, nil }

// NativeImagesAt returns the C image kernels at level l (isa.Auto: the
// best), or an error wrapping ErrISA when l does not run here. Every
// level computes the same results.
func NativeImagesAt(l isa.Level) (Images, error) {
	if l == isa.Auto {
		return NativeImages()
	}
	if l > cBest() {
		return nil, fmt.Errorf("%w: image kernels at %v (this CPU and build run up to %v)", ErrISA, l, cBest())
	}
	return nativeImages{cISA(l)}, nil
}

type nativeImages struct{ isa C.int }

func axisArgs(a *ResizeAxis) (C.int, C.int, C.int, *C.int, *C.int16_t) {
	return C.int(a.N), C.int(a.Taps), C.int(a.Bits), (*C.int)(unsafe.Pointer(&a.Start[0])), (*C.int16_t)(unsafe.Pointer(&a.Coef[0]))
}

func (im nativeImages) Resize(src []byte, sw, sh int, x, y *ResizeAxis, dst, tmp []byte) {
	checkImage(src, sw, sh, x, y, len(dst), nil, tmp)
	xn, xt, xb, xs, xc := axisArgs(x)
	yn, yt, yb, ys, yc := axisArgs(y)
	C.ss_img_resize_u8_flat(im.isa, (*C.uchar)(&src[0]), C.int(sw), C.int(sh), xn, xt, xb, xs, xc, yn, yt, yb, ys, yc,
		(*C.uchar)(&dst[0]), unsafe.Pointer(&tmp[0]))
}

func (im nativeImages) ResizeCHW(src []byte, sw, sh int, x, y *ResizeAxis, mirror bool, scale float32, mean, dst []float32, tmp []byte) {
	checkImage(src, sw, sh, x, y, len(dst), mean, tmp)
	var mp *C.float
	if mean != nil {
		mp = (*C.float)(&mean[0])
	}
	xn, xt, xb, xs, xc := axisArgs(x)
	yn, yt, yb, ys, yc := axisArgs(y)
	C.ss_img_resize_f32_flat(im.isa, (*C.uchar)(&src[0]), C.int(sw), C.int(sh), xn, xt, xb, xs, xc, yn, yt, yb, ys, yc,
		cbool(mirror), C.float(scale), mp, (*C.float)(&dst[0]), unsafe.Pointer(&tmp[0]))
}
