package learner

import (
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
)

// Evaluate copies w into net's parameters and returns its top-1 and
// top-5 errors on set (normalised by z): the fractions of the set whose
// label is not the class of the largest logit, and not among the five
// largest (see TopK). It walks the set once in order (Set.Eval) in
// batches of net.Batch() images; a failure of the walk (an image set's
// image whose substitutes failed too) is returned.
func Evaluate(net *nn.Net, w []float32, set data.Set, z data.Normalizer) (top1, top5 float64, err error) {
	copy(net.Params(), w)
	info := set.Info()
	x, labels := make([]float32, net.Batch()*info.ImageLen()), make([]int32, net.Batch())
	c1, c5 := 0, 0
	for n := range set.Eval(z, x, labels, &err) {
		net.Evaluate(x, labels)
		c1 += TopK(net.Logits(), net.Classes(), labels[:n], 1)
		c5 += TopK(net.Logits(), net.Classes(), labels[:n], 5)
	}
	if err != nil {
		return 0, 0, err
	}
	return 1 - float64(c1)/float64(info.Len), 1 - float64(c5)/float64(info.Len), nil
}

// TopK returns how many of the rows i < len(labels) of logits (rows of
// classes values) rank their label among their k largest: fewer than k
// classes come before it, a class coming before the label when its logit
// is larger, or equal with a smaller index (ties go to the first class,
// as nn.Net.Score's top-1 does). With k ≥ classes every row counts.
func TopK(logits []float32, classes int, labels []int32, k int) int {
	correct := 0
	for i, l := range labels {
		row := logits[i*classes : (i+1)*classes]
		v, before := row[l], 0
		for j, u := range row {
			if u > v || (u == v && int32(j) < l) {
				before++
			}
		}
		if before < k {
			correct++
		}
	}
	return correct
}
