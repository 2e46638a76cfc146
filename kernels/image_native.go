//go:build cgo && !noblas

package kernels

/*
#cgo noescape ss_img_resize_u8_flat
#cgo nocallback ss_img_resize_u8_flat
#cgo noescape ss_img_resize_f32_flat
#cgo nocallback ss_img_resize_f32_flat
#include "softsync.h"

static void ss_img_resize_u8_flat(const unsigned char *src, int sw,
	int xn, int xtaps, const int *xstart, const int *xlen, const int *xcoef,
	int yn, int ytaps, const int *ystart, const int *ylen, const int *ycoef,
	unsigned char *dst, void *tmp)
{
	ss_img_axis x = {xn, xtaps, xstart, xlen, xcoef}, y = {yn, ytaps, ystart, ylen, ycoef};
	ss_img_resize_u8(src, sw, &x, &y, dst, tmp);
}

static void ss_img_resize_f32_flat(const unsigned char *src, int sw,
	int xn, int xtaps, const int *xstart, const int *xlen, const int *xcoef,
	int yn, int ytaps, const int *ystart, const int *ylen, const int *ycoef,
	int mirror, float scale, const float *mean, float *dst, void *tmp)
{
	ss_img_axis x = {xn, xtaps, xstart, xlen, xcoef}, y = {yn, ytaps, ystart, ylen, ycoef};
	ss_img_resize_f32(src, sw, &x, &y, mirror, scale, mean, dst, tmp);
}
*/
import "C"

import "unsafe"

// NativeImages returns the C image kernels (csrc/image.c).
func NativeImages() (Images, error) { return nativeImages{}, nil }

type nativeImages struct{}

func (nativeImages) Resize(src []byte, sw, sh int, x, y *ResizeAxis, dst, tmp []byte) {
	checkImage(src, sw, sh, x, y, len(dst), nil, tmp)
	C.ss_img_resize_u8_flat((*C.uchar)(&src[0]), C.int(sw),
		C.int(x.N), C.int(x.Taps), (*C.int)(unsafe.Pointer(&x.Start[0])), (*C.int)(unsafe.Pointer(&x.Len[0])), (*C.int)(unsafe.Pointer(&x.Coef[0])),
		C.int(y.N), C.int(y.Taps), (*C.int)(unsafe.Pointer(&y.Start[0])), (*C.int)(unsafe.Pointer(&y.Len[0])), (*C.int)(unsafe.Pointer(&y.Coef[0])),
		(*C.uchar)(&dst[0]), unsafe.Pointer(&tmp[0]))
}

func (nativeImages) ResizeCHW(src []byte, sw, sh int, x, y *ResizeAxis, mirror bool, scale float32, mean, dst []float32, tmp []byte) {
	checkImage(src, sw, sh, x, y, len(dst), mean, tmp)
	var mp *C.float
	if mean != nil {
		mp = (*C.float)(&mean[0])
	}
	mi := 0
	if mirror {
		mi = 1
	}
	C.ss_img_resize_f32_flat((*C.uchar)(&src[0]), C.int(sw),
		C.int(x.N), C.int(x.Taps), (*C.int)(unsafe.Pointer(&x.Start[0])), (*C.int)(unsafe.Pointer(&x.Len[0])), (*C.int)(unsafe.Pointer(&x.Coef[0])),
		C.int(y.N), C.int(y.Taps), (*C.int)(unsafe.Pointer(&y.Start[0])), (*C.int)(unsafe.Pointer(&y.Len[0])), (*C.int)(unsafe.Pointer(&y.Coef[0])),
		C.int(mi), C.float(scale), mp, (*C.float)(&dst[0]), unsafe.Pointer(&tmp[0]))
}
