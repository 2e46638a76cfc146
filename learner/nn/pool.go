package nn

import "sync"

// phase is one parallel part of a step.
type phase int

const (
	phaseForward  phase = iota // every replica runs forward on its images
	phaseBackward              // every replica computes its gradients
	phaseReduce                // replica i adds the others' gradients into range i of reps[0].grads
)

// pool runs the replicas of a Net with several workers: reps[0] on the
// caller's goroutine, each other one on its own goroutine, started once
// and woken by a channel per phase, so that a step allocates nothing. The
// goroutines hold no reference to the Net, so an unreachable Net can be
// collected and its pool stopped.
type pool struct {
	reps   []*replica
	cmd    []chan phase // cmd[i] wakes the goroutine of reps[i], i ≥ 1
	done   chan struct{}
	x      []float32 // the batch of the current Forward
	labels []int32
	once   sync.Once
}

func startPool(reps []*replica) *pool {
	p := &pool{reps: reps, cmd: make([]chan phase, len(reps)), done: make(chan struct{}, len(reps))}
	for i := 1; i < len(reps); i++ {
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

// run performs phase ph on every replica and returns when all are done.
func (p *pool) run(ph phase) {
	for i := 1; i < len(p.reps); i++ {
		p.cmd[i] <- ph
	}
	p.do(0, ph)
	for i := 1; i < len(p.reps); i++ {
		<-p.done
	}
}

func (p *pool) do(i int, ph phase) {
	r := p.reps[i]
	switch ph {
	case phaseForward:
		r.forward(p.x, p.labels)
	case phaseBackward:
		r.backward()
	case phaseReduce:
		dst := p.reps[0].grads
		lo, hi := i*len(dst)/len(p.reps), (i+1)*len(dst)/len(p.reps)
		dst = dst[lo:hi]
		for _, o := range p.reps[1:] {
			src := o.grads[lo:hi]
			for j := range dst {
				dst[j] += src[j]
			}
		}
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
