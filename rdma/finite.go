package rdma

import "math"

// FirstNonFinite returns the index of the first NaN or ±Inf in x, or -1 if
// every value is finite. It reads the bits (exponent all ones) eight values
// at a time, so checking a received gradient costs little next to
// receiving it.
func FirstNonFinite(x []float32) int {
	const exp = 0x7f800000
	i := 0
	for ; i+8 <= len(x); i += 8 {
		b := x[i : i+8 : i+8]
		// bits&exp + 1<<23 reaches bit 31 only when the exponent is all ones.
		f := (math.Float32bits(b[0])&exp + 1<<23) | (math.Float32bits(b[1])&exp + 1<<23) |
			(math.Float32bits(b[2])&exp + 1<<23) | (math.Float32bits(b[3])&exp + 1<<23) |
			(math.Float32bits(b[4])&exp + 1<<23) | (math.Float32bits(b[5])&exp + 1<<23) |
			(math.Float32bits(b[6])&exp + 1<<23) | (math.Float32bits(b[7])&exp + 1<<23)
		if f>>31 != 0 {
			break
		}
	}
	for ; i < len(x); i++ {
		if math.Float32bits(x[i])&exp == exp {
			return i
		}
	}
	return -1
}
