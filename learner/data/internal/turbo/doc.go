// Package turbo binds libjpeg-turbo through cgo: its libjpeg API
// (jpeglib.h) to decode, its TurboJPEG API (turbojpeg.h, tjCompress2) to
// encode. It is compiled in under the turbojpeg build tag (which the
// Makefile sets when pkg-config finds libturbojpeg and libjpeg, Debian's
// libturbojpeg0-dev and libjpeg62-turbo-dev) with cgo; otherwise Built is
// false and every call returns ErrNotBuilt, and package data decodes with
// Go's image packages.
//
// Pixels are packed 8-bit RGB, row-major, 3 bytes a pixel, no row padding
// (stride 3·width). A JPEG stored as CMYK or YCCK (Adobe's convention, as
// Photoshop writes it: each ink inverted, 255 meaning none) is decoded to
// CMYK by libjpeg-turbo and turned into RGB as R = C·K/255 (likewise G,
// B), the conversion Go's image/jpeg and color.CMYKToRGB make; every
// other colour space (YCbCr, greyscale, RGB) is converted by libjpeg-turbo.
//
// Rectangles: DecodeRect decodes only the rows and (whole iMCU) columns a
// crop needs: the inverse DCT, upsampling and colour conversion of the
// rest are skipped (the entropy-coded data above the rectangle is still
// read, that below it is not). TurboJPEG 2.x, the version Debian 12
// ships, has no such call (tj3SetCroppingRegion came with 3.0), hence the
// libjpeg API.
//
// Scaling: libjpeg-turbo can decode a JPEG at M/8 of its size (M = 1…16)
// by computing a smaller inverse DCT; at 1/2, 1/4 and 1/8 (SIMD) that
// costs a fraction of a full decode. ScaledSize picks the smallest of
// those that keeps the shorter side at least as long as a target.
//
// Chroma is upsampled by replication (TurboJPEG's TJFLAG_FASTUPSAMPLE, as
// Go's image/jpeg does), which also keeps every pixel of a rectangle
// equal to the same pixel of the whole image. The inverse DCT is the
// accurate one unless Decoder.FastDCT is set.
//
// A Decoder is used by one goroutine at a time; make one per decoding
// thread. Buffers passed in are not kept.
package turbo
