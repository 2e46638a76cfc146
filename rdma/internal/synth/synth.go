package synth

import "math/rand/v2"

// Gradient fills dst with Gaussian values of standard deviation sigma from
// a PCG stream seeded with seed: the same seed gives the same values.
// Real gradients of small CNNs have this magnitude (σ ≈ 1e-3) and, like
// these, leave little for lossless compressors besides the exponent bits.
func Gradient(dst []float32, sigma float64, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	for i := range dst {
		dst[i] = float32(r.NormFloat64() * sigma)
	}
	return dst
}
