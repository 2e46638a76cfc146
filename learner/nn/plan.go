package nn

import (
	"slices"

	"github.com/softsync/softsync/kernels"
)

// A plan is how a replica of n images runs a spec: its operations in
// order (the spec's layers, with layout changes inserted), the tensors
// they pass, the buffers (values) that hold those tensors and their
// gradients, and the backward program. It holds sizes only: New
// allocates what it describes and Spec.Memory sums it.
//
// Layouts: the input is NCHW; a convolution takes and writes CNHW, a
// fully connected layer and the loss take NCHW; every other layer writes
// the layout it reads (an add whose inputs differ converts the NCHW one).
// A tensor's layout is a property of the spec, not of n, so that
// dropout's masks, drawn per element in that layout, do not depend on how
// a batch is split. A layout change of a tensor with one image or one
// channel copies nothing: both layouts are the same memory.
//
// Buffers: every tensor lives in a value, and values are assigned to
// slots by lifetime (values alive at the same time never share a slot).
// A layer runs in place, its output sharing its input's value, where it
// may (relu, dropout, add) and nothing else reads that value afterwards,
// in the forward pass or (training) the backward pass. Gradients are
// values too: the first layer to contribute to a tensor's gradient
// writes it, later ones add to it (Add), and a gradient passed on
// unchanged (add, a layout change that copies nothing) or computed in
// place (relu, dropout) shares its value with the gradient it came from.
type plan struct {
	spec    *Spec
	n       int
	head    int // the layers planned: all, or those before a split fc tail (fcTail), whose last output then takes the logits' place
	train   bool
	ops     []op
	tensors []tensor
	values  []value
	slots   []int // slot sizes in floats
	logits  int   // the logits tensor
	bwd     []bstep
	masks   []int // per op: the length of its max-pooling mask (0 for none)
	// sharedMask: at test only (no backward pass), the ops' masks share
	// one buffer, of the largest length.
	sharedMask bool
}

// op is one operation of a plan.
type op struct {
	layer int   // index in spec.Layers; −1 for a layout change
	kind  Kind  // spec.Layers[layer].Kind; 0 for a layout change
	in    []int // input tensors
	out   int   // output tensor
	over  int   // the input whose value the output overwrites in place; −1 for none
	alias bool  // the output is its input's value and nothing is computed (a layout change that copies nothing; dropout in a plan for testing only)
	back  bool  // runs backward (training): the gradient of its output is needed
	scale int   // LRN: the value of its scale; −1 otherwise
	// trim, trimGrad: pooling with floor rounding where the kernel's
	// ceil rounding gives a row or column more: the values of the
	// kernel's output and of its gradient; −1 otherwise.
	trim, trimGrad int
	fwdTime        int
}

// tensor is one activation a plan passes between operations.
type tensor struct {
	shape     Shape
	cnhw      bool
	len       int   // floats for the replica's n images
	producer  int   // op index; −1 for the input
	consumers []int // op indices
	value     int   // the value holding it
	grad      int   // the value of its gradient (training), −1 without
	needGrad  bool
}

// value is one buffer of a plan: pinned (the caller's images, the logits,
// the loss's gradient) or held in a slot.
type value struct {
	len        int
	start, end int // the times it is first and last used
	slot       int // −1 for a pinned value
}

// The pinned values.
const (
	valInput   = iota // the caller's images, read only
	valLogits         // the Net's logits rows of this replica
	valDlogits        // the Net's loss gradient rows, read only (Backward may run again)
	numPinned
)

// bstep is one step of the backward program: op's backward pass (unless
// it passes its gradient on unchanged), then the accumulations.
type bstep struct {
	op    int
	dy    int     // value of the output's gradient
	dx    []int   // per input: the value its gradient is written to, −1 for none
	accum []accum // y = a + b, after the op
}

type accum struct{ a, b, y int }

// readsInput and readsOutput report whether a layer kind's backward pass
// reads its forward input or output.
func readsInput(k Kind) bool  { return k == Conv || k == FC || k == LRN || k == BatchNorm }
func readsOutput(k Kind) bool { return k == ReLU || k == LRN }

// inPlaceCapable reports whether a layer kind may write its output over
// its input (its kernel allows it and its backward reads neither).
func inPlaceCapable(k Kind) bool { return k == ReLU || k == Dropout || k == Add }

// gradInPlace reports whether a layer kind's backward may write its input
// gradient over its output gradient.
func gradInPlace(k Kind) bool { return k == ReLU || k == Dropout }

// differ reports whether NCHW and CNHW differ in memory for n images of c
// channels.
func differ(n, c int) bool { return n > 1 && c > 1 }

// newPlan plans the first head layers of spec (all but the loss, or
// those before the fc tail a Net splits, see fcTail) for n images; train
// adds the backward pass. With a tail, the last of them writes, NCHW, the
// value of the logits (the tail's input) and its gradient comes in the
// value of the loss's gradient.
func newPlan(s *Spec, n int, train bool, head int) *plan {
	p := &plan{spec: s, n: n, train: train, head: head}
	p.values = make([]value, numPinned)
	for i := range p.values {
		p.values[i].slot, p.values[i].start, p.values[i].end = -1, -1, -1
	}
	p.graph()
	p.forwardValues()
	if train {
		p.backward()
	}
	p.assignSlots()
	return p
}

// graph builds the operations and tensors.
func (p *plan) graph() {
	s := p.spec
	p.tensors = append(p.tensors, tensor{shape: s.Input, len: p.n * s.Input.Len(), producer: -1, value: valInput, grad: -1})
	tensorOf := make([]int, len(s.Layers)) // layer → its output tensor
	conv := map[[2]int]int{}               // (tensor, want CNHW) → converted tensor
	convert := func(t int, cnhw bool) int {
		if p.tensors[t].cnhw == cnhw {
			return t
		}
		key := [2]int{t, btoi(cnhw)}
		if c, ok := conv[key]; ok {
			return c
		}
		c := p.addOp(op{layer: -1, in: []int{t}, alias: !differ(p.n, p.tensors[t].shape.C)}, p.tensors[t].shape, cnhw)
		conv[key] = c
		return c
	}
	for i := range s.Layers[:p.head] {
		l := &s.Layers[i]
		ins := make([]int, len(s.inputs[i]))
		for k, j := range s.inputs[i] {
			if j >= 0 {
				ins[k] = tensorOf[j]
			}
		}
		switch l.Kind {
		case Conv:
			ins[0] = convert(ins[0], true)
		case FC, Softmax:
			ins[0] = convert(ins[0], false)
		case Add:
			if p.tensors[ins[0]].cnhw != p.tensors[ins[1]].cnhw {
				ins[0], ins[1] = convert(ins[0], true), convert(ins[1], true)
			}
		}
		if l.Kind == Softmax {
			p.logits = ins[0]
			break
		}
		cnhw := p.tensors[ins[0]].cnhw
		switch l.Kind {
		case Conv:
			cnhw = true
		case FC:
			cnhw = false
		}
		tensorOf[i] = p.addOp(op{layer: i, kind: l.Kind, in: ins, alias: l.Kind == Dropout && !p.train}, s.outs[i], cnhw)
	}
	if p.head < len(s.Layers) {
		p.logits = convert(tensorOf[p.head-1], false)
	}
	need := s.needsGrad()
	for o := range p.ops {
		op := &p.ops[o]
		if op.layer >= 0 {
			op.back = p.train && need[op.layer]
		} else {
			op.back = p.train && p.tensors[op.in[0]].needGrad
		}
		p.tensors[op.out].needGrad = op.back
	}
}

// addOp appends o, whose output has shape sh in layout cnhw, and returns
// its output tensor.
func (p *plan) addOp(o op, sh Shape, cnhw bool) int {
	o.out, o.over, o.scale, o.trim, o.trimGrad, o.fwdTime = len(p.tensors), -1, -1, -1, -1, len(p.ops)
	p.tensors = append(p.tensors, tensor{shape: sh, cnhw: cnhw, len: p.n * sh.Len(), producer: len(p.ops), value: -1, grad: -1})
	for _, t := range o.in {
		p.tensors[t].consumers = append(p.tensors[t].consumers, len(p.ops))
	}
	p.ops = append(p.ops, o)
	return o.out
}

// bwdTime is the time of op o's backward pass: after every forward
// operation and the loss, in reverse order.
func (p *plan) bwdTime(o int) int { return 2*len(p.ops) - o }

// readTimes returns the times at which tensor t is read other than by op
// skip's forward pass: its consumers' forward passes, their backward
// passes where they read their input, its producer's backward pass where
// it reads its output (except, for a dropout over a relu's output, the
// relu's, which gives the same result: where dropout zeroes an output,
// the relu's output gradient is zero too).
func (p *plan) readTimes(t, skip int) []int {
	var times []int
	tn := &p.tensors[t]
	for _, c := range tn.consumers {
		if c == skip {
			continue
		}
		times = append(times, c)
		if p.ops[c].back && readsInput(p.ops[c].kind) {
			times = append(times, p.bwdTime(c))
		}
	}
	if pr := tn.producer; pr >= 0 && p.ops[pr].back && readsOutput(p.ops[pr].kind) &&
		!(p.ops[skip].kind == Dropout && p.ops[pr].kind == ReLU) {
		times = append(times, p.bwdTime(pr))
	}
	if t == p.logits {
		times = append(times, len(p.ops)) // the loss
	}
	return times
}

// newValue adds a value of n floats and returns its id.
func (p *plan) newValue(n int) int {
	p.values = append(p.values, value{len: n, start: -1, end: -1, slot: -1})
	return len(p.values) - 1
}

// touch extends value v's lifetime to time t.
func (p *plan) touch(v, t int) {
	val := &p.values[v]
	if val.start < 0 || t < val.start {
		val.start = t
	}
	val.end = max(val.end, t)
}

// forwardValues assigns every tensor a value, in place where allowed, and
// records when each value is used in the forward pass and read back in
// the backward pass.
func (p *plan) forwardValues() {
	p.masks = make([]int, len(p.ops))
	p.sharedMask = !p.train
	holders := map[int][]int{} // value → the tensors it holds
	holders[valInput] = []int{0}
	for o := range p.ops {
		op := &p.ops[o]
		out := &p.tensors[op.out]
		switch {
		case op.alias && op.out != p.logits:
			out.value = p.tensors[op.in[0]].value
		case op.out == p.logits:
			out.value, op.alias = valLogits, false
		default:
			if k := p.inPlace(o, holders); k >= 0 {
				op.over, out.value = k, p.tensors[op.in[k]].value
			} else {
				out.value = p.newValue(out.len)
			}
		}
		holders[out.value] = append(holders[out.value], op.out)
		for _, t := range op.in {
			p.touch(p.tensors[t].value, o)
		}
		p.touch(out.value, o)
		if op.kind == LRN {
			op.scale = p.newValue(out.len)
			p.touch(op.scale, o)
			if op.back {
				p.touch(op.scale, p.bwdTime(o))
			}
		}
		if op.kind == Pool {
			l := &p.spec.Layers[op.layer]
			ks := poolShape(l, p.tensors[op.in[0]].shape, p.n)
			if ks.OutH() != out.shape.H || ks.OutW() != out.shape.W {
				op.trim = p.newValue(ks.OutputLen())
				p.touch(op.trim, o)
				if op.back {
					op.trimGrad = p.newValue(ks.OutputLen())
					p.touch(op.trimGrad, p.bwdTime(o))
				}
			}
			if l.Mode == kernels.MaxPool {
				p.masks[o] = ks.OutputLen()
			}
		}
	}
	if !p.train {
		return
	}
	// Backward reads of the forward values.
	for o := range p.ops {
		op := &p.ops[o]
		if !op.back {
			continue
		}
		if readsInput(op.kind) {
			p.touch(p.tensors[op.in[0]].value, p.bwdTime(o))
		}
		if readsOutput(op.kind) {
			p.touch(p.tensors[op.out].value, p.bwdTime(o))
		}
	}
}

// inPlace returns which input op o may overwrite with its output, or −1:
// a kind that can run in place, an input whose value is not pinned and
// that nothing other than o reads at or after o's forward pass, under
// any of the tensors the value holds.
func (p *plan) inPlace(o int, holders map[int][]int) int {
	op := &p.ops[o]
	if op.layer < 0 || !inPlaceCapable(op.kind) || op.alias {
		return -1
	}
	for k, t := range op.in {
		v := p.tensors[t].value
		if v < numPinned {
			continue
		}
		if k == 1 && op.in[0] == t {
			continue
		}
		free := true
		for _, h := range holders[v] {
			for _, rt := range p.readTimes(h, o) {
				if rt >= o {
					free = false
				}
			}
		}
		if free {
			return k
		}
	}
	return -1
}

// backward plans the backward pass: for each operation that runs
// backward, in reverse order, where its input gradients go.
func (p *plan) backward() {
	refs := map[int]int{} // value → live gradient names in it
	lg := &p.tensors[p.logits]
	lg.grad = valDlogits
	refs[valDlogits] = 1
	exclusive := func(v int) bool { return v >= numPinned && refs[v] == 1 }
	for o := len(p.ops) - 1; o >= 0; o-- {
		op := &p.ops[o]
		if !op.back {
			continue
		}
		tb := p.bwdTime(o)
		dy := p.tensors[op.out].grad
		p.touch(dy, tb)
		st := bstep{op: o, dy: dy, dx: make([]int, len(op.in))}
		// accumulate adds src into tensor t's gradient, into a new value
		// if t's is shared with another live gradient or pinned.
		accumulate := func(t, src int) {
			cur, dest := p.tensors[t].grad, p.tensors[t].grad
			if !exclusive(cur) {
				dest = p.newValue(p.tensors[t].len)
				refs[cur]--
				refs[dest] = 1
				p.tensors[t].grad = dest
			}
			st.accum = append(st.accum, accum{cur, src, dest})
			p.touch(cur, tb)
			p.touch(src, tb)
			p.touch(dest, tb)
		}
		identity := op.kind == Add || op.alias
		for k, t := range op.in {
			st.dx[k] = -1
			tn := &p.tensors[t]
			if !tn.needGrad {
				continue
			}
			if identity {
				if tn.grad < 0 {
					tn.grad = dy
					refs[dy]++
				} else {
					accumulate(t, dy)
				}
				continue
			}
			overDy := gradInPlace(op.kind) && exclusive(dy)
			if tn.grad < 0 {
				if overDy {
					tn.grad = dy
					refs[dy]++
				} else {
					tn.grad = p.newValue(tn.len)
					refs[tn.grad] = 1
				}
				st.dx[k] = tn.grad
				p.touch(tn.grad, tb)
				continue
			}
			tmp := dy
			if !overDy {
				tmp = p.newValue(tn.len)
			}
			st.dx[k] = tmp
			p.touch(tmp, tb)
			accumulate(t, tmp)
		}
		refs[dy]--
		p.bwd = append(p.bwd, st)
	}
}

// assignSlots gives every unpinned value a slot no value alive at the
// same time holds: values in order of their first use, each into the
// free slot that fits it best (the smallest large enough, else the
// largest, grown), or a new one.
func (p *plan) assignSlots() {
	order := make([]int, 0, len(p.values))
	for v := numPinned; v < len(p.values); v++ {
		order = append(order, v)
	}
	slices.SortStableFunc(order, func(a, b int) int { return p.values[a].start - p.values[b].start })
	busyUntil := []int{} // per slot: the end of its current value
	for _, v := range order {
		val := &p.values[v]
		best := -1
		for s, until := range busyUntil {
			if until >= val.start {
				continue
			}
			fits, bestFits := p.slots[s] >= val.len, best >= 0 && p.slots[best] >= val.len
			switch {
			case best < 0,
				fits && (!bestFits || p.slots[s] < p.slots[best]),
				!fits && !bestFits && p.slots[s] > p.slots[best]:
				best = s
			}
		}
		if best < 0 {
			best = len(p.slots)
			p.slots = append(p.slots, 0)
			busyUntil = append(busyUntil, 0)
		}
		p.slots[best] = max(p.slots[best], val.len)
		busyUntil[best] = val.end
		val.slot = best
	}
}

// slotFloats is the floats of every slot together.
func (p *plan) slotFloats() int {
	n := 0
	for _, s := range p.slots {
		n += s
	}
	return n
}

// maskInts is the int32 entries of the max-pooling masks.
func (p *plan) maskInts() int {
	n := 0
	for _, m := range p.masks {
		if p.sharedMask {
			n = max(n, m)
		} else {
			n += m
		}
	}
	return n
}
