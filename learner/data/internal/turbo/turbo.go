package turbo

import "errors"

// Errors of the binding.
var (
	// ErrNotBuilt: this build has no binding to libjpeg-turbo (it needs
	// cgo and the turbojpeg build tag).
	ErrNotBuilt = errors.New("turbojpeg: not built in (needs cgo and the turbojpeg build tag)")
	// ErrDecode: the data is not a JPEG libjpeg-turbo can decode, or it
	// ends before its last scan (a truncated file).
	ErrDecode = errors.New("turbojpeg: cannot decode")
)

// Colour spaces of a JPEG (TurboJPEG's TJCS values).
const (
	CSRGB = iota
	CSYCbCr
	CSGray
	CSCMYK
	CSYCCK
)

// Header is what a JPEG's header tells.
type Header struct {
	W, H       int
	ColorSpace int // CSRGB … CSYCCK
}

// scale is a scaling factor num/den that libjpeg-turbo's decoder supports.
type scale struct{ num, den int }

// scales are the decoding factors used, smallest first: those of
// TurboJPEG's (tjGetScalingFactors: 1/8 … 16/8) whose reduced inverse DCT
// libjpeg-turbo runs in SIMD on x86-64 (1/8, 1/4, 1/2) and the full size.
// The others (3/8, 5/8, 3/4, 7/8) run plain C and cost more than a full
// decode (measured: 3/4 of a 500×375 JPEG takes 1.2× the CPU time of the
// whole), so scaling pays only when the target is at most half the image.
var scales = []scale{{1, 8}, {1, 4}, {1, 2}, {1, 1}}

// scaled is TurboJPEG's TJSCALED: ⌈dim·num/den⌉.
func scaled(dim int, s scale) int { return (dim*s.num + s.den - 1) / s.den }

// ScaledSize returns the size a w×h JPEG decodes to at the smallest
// factor (1/8, 1/4, 1/2) whose shorter side is still ≥ minShort (full size when
// minShort ≤ 0 or no factor below 1 is long enough).
func ScaledSize(w, h, minShort int) (sw, sh int) {
	if minShort > 0 {
		for _, s := range scales {
			if min(scaled(w, s), scaled(h, s)) >= minShort {
				return scaled(w, s), scaled(h, s)
			}
		}
	}
	return w, h
}

// hasEOI reports whether jpeg ends with an EOI marker (FF D9), allowing a
// little padding after it as some writers leave.
func hasEOI(jpeg []byte) bool {
	tail := jpeg[max(len(jpeg)-64, 0):]
	for i := len(tail) - 2; i >= 0; i-- {
		if tail[i] == 0xff && tail[i+1] == 0xd9 {
			return true
		}
	}
	return false
}
