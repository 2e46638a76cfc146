package ps

// pulledCopy is one copy of the weights a shard served a learner, for the
// rules that compare a gradient's weights with the current ones
// (sgd.Config.NeedsPulled).
type pulledCopy struct {
	stamp uint64    // the clock the weights were served at
	used  bool      // a gradient stamped with them was accepted since
	w     []float32 // the shard's range; nil until first needed
}

// pulled holds the weights a shard last served one learner: one copy, or
// two for a learner that pulls again before it pushes the gradient of its
// previous pull (a prefetch). Within a life the weights at a clock never
// change, so a gradient stamped j was computed on the copy stamped j.
type pulled [2]pulledCopy

// keep copies w, served at clock stamp, into a slot: a used copy first,
// then an unallocated slot, then the older copy. It returns the floats it
// allocated.
func (p *pulled) keep(w []float32, stamp uint64) (allocated int) {
	slot := -1
	for i := range p {
		if p[i].w != nil && p[i].used {
			slot = i
			break
		}
	}
	if slot < 0 {
		for i := range p {
			if p[i].w == nil {
				slot = i
				p[i].w = make([]float32, len(w))
				allocated = len(w)
				break
			}
		}
	}
	if slot < 0 {
		slot = 0
		if p[1].stamp < p[0].stamp {
			slot = 1
		}
	}
	c := &p[slot]
	c.stamp, c.used = stamp, false
	copy(c.w, w)
	return allocated
}

// take returns the copy served at stamp, marked used, or nil if the
// shard holds none.
func (p *pulled) take(stamp uint64) []float32 {
	for i := range p {
		if c := &p[i]; c.w != nil && c.stamp == stamp {
			c.used = true
			return c.w
		}
	}
	return nil
}
