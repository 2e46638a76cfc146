// Package turbo binds libjpeg-turbo's TurboJPEG API (turbojpeg.h, the
// 2.x functions tjDecompressHeader3, tjDecompress2, tjCompress2) through
// cgo. It is compiled in under the turbojpeg build tag (which the Makefile
// sets when pkg-config finds libturbojpeg, Debian's libturbojpeg0-dev) with
// cgo; otherwise Built is false and every call returns ErrNotBuilt, and
// package data decodes with Go's image packages.
//
// Pixels are packed 8-bit RGB, row-major, 3 bytes a pixel, no row padding
// (stride 3·width). A JPEG stored as CMYK or YCCK (Adobe's convention, as
// Photoshop writes it: each ink inverted, 255 meaning none) is decoded to
// CMYK by libjpeg-turbo and turned into RGB here as R = C·K/255 (likewise
// G, B), the conversion Go's image/jpeg and color.CMYKToRGB make; every
// other colour space (YCbCr, greyscale, RGB) is converted by libjpeg-turbo.
//
// Scaling: libjpeg-turbo can decode a JPEG at M/8 of its size (M = 1…16)
// by computing a smaller inverse DCT; at 1/2, 1/4 and 1/8 (SIMD) that
// costs a fraction of a full decode. ScaledSize picks the smallest of
// those that keeps the shorter side at least as long as a target.
//
// Decoding uses TJFLAG_FASTUPSAMPLE (chroma replicated, not
// interpolated, as Go's image/jpeg does; an eighth less CPU time on
// ImageNet-sized JPEGs) and the accurate inverse DCT: TJFLAG_FASTDCT
// would save as much again but puts photos stored at high quality
// several levels off.
//
// A Decoder (one TurboJPEG handle) is used by one goroutine at a time;
// make one per decoding thread. Buffers passed in are not kept.
package turbo
