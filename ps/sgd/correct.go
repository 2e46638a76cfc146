package sgd

import "math"

// The constants of the corrections' running statistics (see the package
// doc).
const (
	// DCAdaptiveDecay is m of DC-ASGD-a's mean square of the gradients,
	// MS = m·MS + (1−m)·g⊙g (Zheng et al.'s experiments).
	DCAdaptiveDecay = 0.95
	// DCAdaptiveEpsilon is ε of DC-ASGD-a's λ/√(MS + ε).
	DCAdaptiveEpsilon = 1e-7
	// GapDecay is γ of Gap-Aware's running mean of the squared steps.
	GapDecay = 0.999
	// GapEpsilon is ε of Gap-Aware's typical step C = √(mean step²) + ε.
	GapEpsilon = 1e-8
)

// The correction passes run in plain Go loops on every platform. Each
// reads a gradient g, the current weights w and the pulled weights p,
// and adds a·g' to acc (g' the corrected gradient), in one pass. The
// compensation term of DC is formed in float64 and rounded to float32
// once; the square roots and divisions run in float32 (at twice the
// speed of float64 ones), on operands kept inside the float32 range.

// dcInto adds a·(g + λ·g⊙g⊙(w − p)) to acc and returns the largest
// magnitude of the corrected gradient.
func dcInto(acc, g, w, p []float32, a float32, lambda float64) float32 {
	g, w, p = g[:len(acc)], w[:len(acc)], p[:len(acc)]
	var m uint32
	for k := range acc {
		x := float64(g[k])
		c := float32(x + lambda*x*x*(float64(w[k])-float64(p[k])))
		acc[k] += a * c
		m = max(m, absBits(c))
	}
	return math.Float32frombits(m)
}

// dcAdaptiveInto updates the mean square ms with g, MS = m·MS + (1−m)·g²
// (stored as float32, at most the largest float32), then adds
// a·(g + λ/√(MS+ε)·g⊙g⊙(w − p)) to acc; it returns the largest magnitude
// of the corrected gradient.
func dcAdaptiveInto(acc, ms, g, w, p []float32, a, lambda float32) float32 {
	ms, g, w, p = ms[:len(acc)], g[:len(acc)], w[:len(acc)], p[:len(acc)]
	var m uint32
	for k := range acc {
		x := float64(g[k])
		s := DCAdaptiveDecay*float64(ms[k]) + (1-DCAdaptiveDecay)*x*x
		if s > math.MaxFloat32 {
			s = math.MaxFloat32
		}
		ms[k] = float32(s)
		l := lambda / float32(math.Sqrt(float64(ms[k]+DCAdaptiveEpsilon)))
		c := float32(x + float64(l)*x*x*(float64(w[k])-float64(p[k])))
		acc[k] += a * c
		m = max(m, absBits(c))
	}
	return math.Float32frombits(m)
}

// gapInto adds a·g/G to acc, with the gap G = 1 + |w − p|/C and the
// typical step C = √sq·r + ε, r = √(1/(1−γ^t)) the bias correction of
// the running mean sq, computed as g·(C/(C + |w − p|)): a factor in
// (0, 1], exactly 1 where w = p, so that |g/G| ≤ |g| and g's bound still
// holds.
func gapInto(acc, sq, g, w, p []float32, a, r float32) {
	sq, g, w, p = sq[:len(acc)], g[:len(acc)], w[:len(acc)], p[:len(acc)]
	for k := range acc {
		c := float32(math.Sqrt(float64(sq[k])))*r + GapEpsilon
		d := float32(math.Abs(float64(w[k] - p[k])))
		acc[k] += a * (g[k] * (c / (c + d)))
	}
}

// observeSteps folds the steps v of an applied update (θ −= v) into the
// running mean of the squared steps: sq = γ·sq + (1−γ)·v², in float32,
// at most the largest float32.
func observeSteps(sq, v []float32) {
	v = v[:len(sq)]
	for k := range sq {
		x := GapDecay*sq[k] + (1-GapDecay)*v[k]*v[k]
		if x > math.MaxFloat32 {
			x = math.MaxFloat32
		}
		sq[k] = x
	}
}

// gapCorrection returns √(1/(1−γ^t)), the bias correction of the root of
// the running mean of the squared steps after t updates (0 for t = 0: no
// step yet).
func gapCorrection(t uint64) float32 {
	if t == 0 {
		return 0
	}
	return float32(math.Sqrt(1 / (1 - math.Pow(GapDecay, float64(t)))))
}
