package turbo

// CMYKToRGB converts packed CMYK in Adobe's inverted convention (255: no
// ink) to packed RGB: R = C·K/255, G = M·K/255, B = Y·K/255, rounded to
// nearest. dst holds 3 bytes for each 4 of src.
func CMYKToRGB(src, dst []byte) {
	n := len(src) / 4
	dst = dst[:3*n]
	for i := range n {
		s, d := src[4*i:4*i+4:4*i+4], dst[3*i:3*i+3:3*i+3]
		k := uint32(s[3])
		d[0] = mul(uint32(s[0]), k)
		d[1] = mul(uint32(s[1]), k)
		d[2] = mul(uint32(s[2]), k)
	}
}

// mul is color.CMYKToRGB's product of two inverted inks a, k (its
// (0xffff−c·0x101)·(0xffff−k·0x101)/0xffff >> 8).
func mul(a, k uint32) byte { return byte(a * 0x101 * (k * 0x101) / 0xffff >> 8) }
