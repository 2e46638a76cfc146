package data

import (
	"fmt"
	"math/rand/v2"
)

// Synthetic returns a learnable data set of n images of c×h×w bytes in
// the given number of classes, drawn from seed. Every class has a random
// prototype image that is constant over the cells of a 4×4 grid (so the
// class shows in coarse structure that survives pooling, as in natural
// images), with values in 40…215 per channel and cell; each image is its
// class's prototype plus independent uniform noise in −40…40 per pixel.
// Labels are drawn uniformly. Scale is 1, Source names the parameters. It
// stands in for real data in tests and benchmarks.
func Synthetic(n, c, h, w, classes int, seed uint64) *Dataset {
	rng := rand.New(rand.NewPCG(seed, 0x5717))
	const grid = 4
	il := c * h * w
	cells := make([]int, classes*c*grid*grid)
	for i := range cells {
		cells[i] = 40 + rng.IntN(176)
	}
	proto := make([]uint8, classes*il)
	for k := 0; k < classes; k++ {
		for ch := 0; ch < c; ch++ {
			for y := 0; y < h; y++ {
				for x := 0; x < w; x++ {
					cell := ((k*c+ch)*grid+y*grid/h)*grid + x*grid/w
					proto[((k*c+ch)*h+y)*w+x] = uint8(cells[cell])
				}
			}
		}
	}
	d := &Dataset{
		Source: fmt.Sprintf("synthetic(%d×%d×%d×%d, %d classes, seed %d)", n, c, h, w, classes, seed),
		N:      n, C: c, H: h, W: w, Classes: classes, Scale: 1,
		Pixels: make([]uint8, n*il), Labels: make([]int32, n),
	}
	for i := 0; i < n; i++ {
		k := rng.IntN(classes)
		d.Labels[i] = int32(k)
		img, p := d.Pixels[i*il:(i+1)*il], proto[k*il:(k+1)*il]
		for j := range img {
			img[j] = uint8(int(p[j]) + rng.IntN(81) - 40)
		}
	}
	return d
}
