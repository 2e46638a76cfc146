package nn

import "sync"

// phase is one parallel part of a step.
type phase int

const (
	phaseForward  phase = iota // every worker runs its parts forward
	phaseBackward              // every worker runs its parts backward
	phaseGradient              // every worker runs each part forward, then backward
	phaseReduce                // worker i adds the others' gradients into range i of the Net's (those of the layers before a split tail)
	phaseTest                  // every worker runs its parts forward at test (Net.Evaluate)
)

// runGroup runs phase ph (not phaseReduce) on one worker's parts, in order:
// the first part writes the worker's gradients, the others add to them.
func runGroup(group []*replica, ph phase, x []float32, labels []int32) {
	for _, r := range group {
		if ph != phaseBackward {
			r.forward(x, labels, ph == phaseTest)
			if r.tail != nil {
				r.loss = r.tail.forward(r.worker, ph == phaseTest, labels, r.off, r.off+r.n)
			}
		}
		if ph == phaseBackward || ph == phaseGradient {
			if r.tail != nil {
				r.tail.backward(r.worker)
			}
			r.backward()
		}
	}
}

// pool runs the workers of a Net with several: worker 0 on the caller's
// goroutine, each other one on its own goroutine, started once and woken
// by a channel per phase, so that a step allocates nothing. The
// goroutines hold no reference to the Net, so an unreachable Net can be
// collected and its pool stopped.
type pool struct {
	groups [][]*replica
	cmd    []chan phase // cmd[i] wakes the goroutine of groups[i], i ≥ 1
	done   chan struct{}
	x      []float32 // the batch of the current Forward
	labels []int32
	once   sync.Once
	// With a gradient hook (Net.SetGradHook): the last part of worker
	// g ≥ 1 sends on layerDone[g] after each layer with parameters, and
	// worker 0's calls onLayer, set by the Net for the run only.
	layerDone []chan struct{}
	onLayer   func(lo int)
}

// hook makes the workers' last parts report each of their layers with
// parameters (layers of them per pass).
func (p *pool) hook(layers int) {
	if p.layerDone == nil {
		p.layerDone = make([]chan struct{}, len(p.groups))
		for g := 1; g < len(p.groups); g++ {
			p.layerDone[g] = make(chan struct{}, layers)
		}
	}
	for g, group := range p.groups {
		last := group[len(group)-1]
		if g == 0 {
			last.ready = func(lo int) { p.onLayer(lo) }
		} else {
			done := p.layerDone[g]
			last.ready = func(int) { done <- struct{}{} }
		}
	}
}

func startPool(groups [][]*replica) *pool {
	p := &pool{groups: groups, cmd: make([]chan phase, len(groups)), done: make(chan struct{}, len(groups))}
	for i := 1; i < len(groups); i++ {
		p.cmd[i] = make(chan phase)
		go func() {
			for ph := range p.cmd[i] {
				p.do(i, ph)
				p.done <- struct{}{}
			}
		}()
	}
	return p
}

// run performs phase ph on every worker and returns when all are done.
func (p *pool) run(ph phase) {
	for i := 1; i < len(p.groups); i++ {
		p.cmd[i] <- ph
	}
	p.do(0, ph)
	for i := 1; i < len(p.groups); i++ {
		<-p.done
	}
}

func (p *pool) do(i int, ph phase) {
	if ph != phaseReduce {
		runGroup(p.groups[i], ph, p.x, p.labels)
		return
	}
	r := p.groups[i][0]
	dst := p.groups[0][0].grads
	m := len(p.groups[1][0].grads) // all of them, or those before a split tail's
	lo, hi := i*m/len(p.groups), (i+1)*m/len(p.groups)
	for _, g := range p.groups[1:] {
		r.e.Add(dst[lo:hi], g[0].grads[lo:hi], dst[lo:hi])
	}
}

// stop ends the goroutines; idempotent.
func (p *pool) stop() {
	p.once.Do(func() {
		for _, c := range p.cmd[1:] {
			close(c)
		}
	})
}
