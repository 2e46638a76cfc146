//go:build cgo && !noblas

package kernels

// The native engine runs these operations with the reference engine's
// loops until their C kernels land.

func (native) DropoutForward(d Dropout, x, y []float32) { reference{}.DropoutForward(d, x, y) }

func (native) DropoutBackward(d Dropout, dy, dx []float32) { reference{}.DropoutBackward(d, dy, dx) }

func (native) BNForwardTrain(s BNShape, x, gamma, beta, y, mean, variance []float32) {
	reference{}.BNForwardTrain(s, x, gamma, beta, y, mean, variance)
}

func (native) BNForwardInfer(s BNShape, x, gamma, beta, mean, variance, y []float32) {
	reference{}.BNForwardInfer(s, x, gamma, beta, mean, variance, y)
}

func (native) BNBackward(s BNShape, x, gamma, mean, variance, dy, dx, dgamma, dbeta []float32) {
	reference{}.BNBackward(s, x, gamma, mean, variance, dy, dx, dgamma, dbeta)
}

func (native) Add(a, b, y []float32) { reference{}.Add(a, b, y) }
