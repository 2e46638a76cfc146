package learner

import (
	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
)

// Evaluate copies w into net's parameters and returns the fraction of ds
// that net misclassifies (ds normalised by z), walking ds once in order
// in batches of net.Batch() images.
func Evaluate(net *nn.Net, w []float32, ds *data.Dataset, z data.Normalizer) float64 {
	copy(net.Params(), w)
	x, labels := make([]float32, net.Batch()*ds.ImageLen()), make([]int32, net.Batch())
	correct := 0
	for n := range data.Batches(ds, z, x, labels) {
		net.Forward(x, labels)
		c, _ := net.Score(labels[:n])
		correct += c
	}
	return 1 - float64(correct)/float64(ds.N)
}
