package learner

import (
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
)

// Evaluate copies w into net's parameters and returns the fraction of ds
// that net misclassifies (ds normalised by z), walking ds once in order
// in batches of net.Batch() images.
func Evaluate(net *nn.Net, w []float32, ds *data.Dataset, z data.Normalizer) float64 {
	top1, _ := EvaluateTop(net, w, ds, z)
	return top1
}

// EvaluateTop is Evaluate returning the top-1 and the top-5 error: the
// fractions of ds whose label is not the class of the largest logit, and
// not among the five largest (see TopK).
func EvaluateTop(net *nn.Net, w []float32, ds *data.Dataset, z data.Normalizer) (top1, top5 float64) {
	copy(net.Params(), w)
	x, labels := make([]float32, net.Batch()*ds.ImageLen()), make([]int32, net.Batch())
	c1, c5 := 0, 0
	for n := range data.Batches(ds, z, x, labels) {
		net.Forward(x, labels)
		c1 += TopK(net.Logits(), net.Classes(), labels[:n], 1)
		c5 += TopK(net.Logits(), net.Classes(), labels[:n], 5)
	}
	return 1 - float64(c1)/float64(ds.N), 1 - float64(c5)/float64(ds.N)
}

// EvaluateImages is EvaluateTop over an image set, its inputs made by a
// (the centre crop) on p's threads. A failure of the pipeline (every
// substitute of an image undecodable) is returned.
func EvaluateImages(net *nn.Net, w []float32, p *data.Pipeline, set *data.ImageSet, a *data.Augment) (top1, top5 float64, err error) {
	copy(net.Params(), w)
	x, labels := make([]float32, net.Batch()*a.ImageLen()), make([]int32, net.Batch())
	c1, c5 := 0, 0
	for n := range data.ImageBatches(p, set, a, x, labels, &err) {
		net.Forward(x, labels)
		c1 += TopK(net.Logits(), net.Classes(), labels[:n], 1)
		c5 += TopK(net.Logits(), net.Classes(), labels[:n], 5)
	}
	if err != nil {
		return 0, 0, err
	}
	return 1 - float64(c1)/float64(set.Len()), 1 - float64(c5)/float64(set.Len()), nil
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
