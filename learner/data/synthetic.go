package data

import (
	"fmt"
	"math/rand/v2"
)

// Synthetic returns a learnable data set of n images of c×h×w bytes in
// the given number of classes, drawn from seed: every class has a random
// prototype image with pixels in 64…191, and each image is its class's
// prototype plus independent uniform noise in −48…48. Labels are drawn
// uniformly. Scale is 1, Source names the parameters. It stands in for
// real data in tests and benchmarks.
func Synthetic(n, c, h, w, classes int, seed uint64) *Dataset {
	rng := rand.New(rand.NewPCG(seed, 0x5717))
	il := c * h * w
	proto := make([]uint8, classes*il)
	for i := range proto {
		proto[i] = uint8(64 + rng.IntN(128))
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
			img[j] = uint8(int(p[j]) + rng.IntN(97) - 48)
		}
	}
	return d
}
