package synth

import "math/rand/v2"

// RowLen and ZeroRows shape Gradient's output like a fully connected
// layer's weight gradient: rows of RowLen values (one per output unit),
// of which about one in ZeroRows is exactly zero, as for units that no
// sample of the mini-batch activated. With these values the lossless codecs
// land near the ratios measured on a real LeNet gradient (zstd ≈ 0.8,
// s2 ≈ 0.84, byte-shuffled zstd ≈ 0.72).
const (
	RowLen   = 500
	ZeroRows = 6
)

// Gradient fills dst with gradient-like values from a PCG stream seeded
// with seed (the same seed gives the same values): Gaussian with standard
// deviation sigma, in rows of RowLen of which one in ZeroRows on average
// is all zeros. It returns dst.
func Gradient(dst []float32, sigma float64, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	for start := 0; start < len(dst); start += RowLen {
		row := dst[start:min(start+RowLen, len(dst))]
		if r.IntN(ZeroRows) == 0 {
			clear(row)
			continue
		}
		for i := range row {
			row[i] = float32(r.NormFloat64() * sigma)
		}
	}
	return dst
}
