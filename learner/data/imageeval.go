package data

import (
	"fmt"
	"iter"
)

// ImageBatches walks set once in order for evaluation, as Batches does
// for a Dataset: each step fills x with up to len(labels) inputs (a's
// crop, normally the centre) and labels with their classes, and yields
// how many are valid; the rest of a last, partial batch is zeros with
// label 0. An image that cannot be decoded is replaced as in training
// (see ImageSet.Skipped). A failure of every substitute ends the walk
// and is stored in *err.
func ImageBatches(p *Pipeline, set *ImageSet, a *Augment, x []float32, labels []int32, err *error) iter.Seq[int] {
	return func(yield func(int) bool) {
		il, mu := a.ImageLen(), len(labels)
		if mu == 0 || len(x) < mu*il {
			panic(fmt.Sprintf("data.ImageBatches: x has %d values, need %d×%d", len(x), mu, il))
		}
		idx := make([]int, mu)
		for start := 0; start < set.Len(); start += mu {
			n := min(mu, set.Len()-start)
			for i := range n {
				idx[i] = start + i
			}
			if e := p.Fill(set, a, idx[:n], 0, x, labels); e != nil {
				*err = e
				return
			}
			clear(x[n*il : mu*il])
			clear(labels[n:])
			if !yield(n) {
				return
			}
		}
	}
}

// ChannelMean returns the mean of each channel (R, G, B) over up to
// sample images of set spread evenly through it (all when sample ≤ 0 or
// ≥ its size), each resized and centre-cropped as a prescribes (a's
// Random, Mean and Scale are ignored: raw pixel values).
func ChannelMean(p *Pipeline, set *ImageSet, a Augment, sample int) ([3]float32, error) {
	a.Random, a.Mirror, a.Mean, a.Scale = false, false, nil, 1
	n := set.Len()
	if sample <= 0 || sample > n {
		sample = n
	}
	const batch = 32
	il, plane := a.ImageLen(), a.H*a.W
	x, labels := make([]float32, batch*il), make([]int32, batch)
	var sum [3]float64
	idx := make([]int, 0, batch)
	flush := func() error {
		if err := p.Fill(set, &a, idx, 0, x, labels); err != nil {
			return err
		}
		for k := range idx {
			for c := range 3 {
				var s float64
				for _, v := range x[k*il+c*plane : k*il+(c+1)*plane] {
					s += float64(v)
				}
				sum[c] += s
			}
		}
		idx = idx[:0]
		return nil
	}
	for i := range sample {
		idx = append(idx, int(int64(i)*int64(n)/int64(sample)))
		if len(idx) == batch || i == sample-1 {
			if err := flush(); err != nil {
				return [3]float32{}, err
			}
		}
	}
	var m [3]float32
	for c := range 3 {
		m[c] = float32(sum[c] / float64(sample*plane))
	}
	return m, nil
}

// ChannelMeanImage spreads a per-channel mean over an input of h×w
// pixels: 3·h·w values, C×H×W (the form Augment.Mean and Normalizer.Mean
// take, and weights files keep).
func ChannelMeanImage(m [3]float32, h, w int) []float32 {
	out := make([]float32, 3*h*w)
	for c := range 3 {
		for i := range h * w {
			out[c*h*w+i] = m[c]
		}
	}
	return out
}
