package kernels

// The dropout mask of Dropout's doc comment, shared by the engines' Go
// code; csrc/dropout.c computes the same bits.

// fmix64 is SplitMix64's output function: a bijection of 64-bit words
// whose every output bit depends on every input bit.
func fmix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// triple32 is Chris Wellons's 32-bit integer hash of three
// multiply-xorshift rounds (an avalanche bias indistinguishable from a
// random permutation's).
func triple32(x uint32) uint32 {
	x ^= x >> 17
	x *= 0xed5ad4bb
	x ^= x >> 11
	x *= 0xac4c1b51
	x ^= x >> 15
	x *= 0x31848bab
	x ^= x >> 14
	return x
}

// dropoutKey returns the key of the 2^32 stream positions whose upper
// word is hi.
func dropoutKey(seed uint64, hi uint32) uint32 { return uint32(fmix64(fmix64(seed) + uint64(hi))) }

// dropoutMask calls f(i, kept) for i in [0, n), in order, with the mask
// of d.
func (d Dropout) mask(n int, f func(i int, kept bool)) {
	thr := d.threshold()
	for i := 0; i < n; {
		c := d.Offset + uint64(i)
		key := dropoutKey(d.Seed, uint32(c>>32))
		// Positions up to the end of this upper word share the key.
		run := min(uint64(n-i), 1<<32-uint64(uint32(c)))
		for k := uint64(0); k < run; k++ {
			f(i, triple32(uint32(c+k)^key) >= thr)
			i++
		}
	}
}
