package sgd

// Segment is one contiguous range of the flat parameter vector that shares
// its solver multipliers, typically one layer's weights or one layer's
// biases. A network publishes its layout as an ordered []Segment covering
// [0, total) without gaps or overlap, so that a parameter server can shard
// the vector by range and still apply per-layer multipliers.
type Segment struct {
	Name      string  // e.g. "conv1.weight", "conv1.bias"
	Offset    int     // first element in the flat vector
	Len       int     // number of elements
	LRMult    float32 // learning-rate multiplier (Caffe's lr_mult)
	DecayMult float32 // weight-decay multiplier (Caffe's decay_mult)
}
