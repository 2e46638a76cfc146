package sgd

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/softsync/softsync/kernels/isa"
	"github.com/softsync/softsync/ps/param"
)

// bigLayout has spans long enough to be spread, of lengths that are
// multiples of neither a piece nor a kernel block, starting at offsets
// that are not either (the solvers below start at bigLo), and a state
// segment between them.
var bigLayout = []param.Segment{
	{Name: "conv.weight", Offset: 0, Len: parMin + 3*parPiece + 13, LRMult: 1, DecayMult: 1},
	{Name: "conv.bias", Offset: parMin + 3*parPiece + 13, Len: 5, LRMult: 2, DecayMult: 0},
	{Name: "bn.mean", Offset: parMin + 3*parPiece + 18, Len: 7, Kind: param.State},
	{Name: "fc.weight", Offset: parMin + 3*parPiece + 25, Len: parMin + 1, LRMult: 2, DecayMult: 0},
}

const (
	bigTotal = 2*parMin + 3*parPiece + 26
	bigLo    = 3
	bigN     = bigTotal - bigLo
)

// reversed runs each piece on its own, last first, on the calling
// goroutine: a runner whose ranges and order differ from any serial pass.
func reversed(n int, body func(lo, hi int)) {
	for k := n - 1; k >= 0; k-- {
		body(k, k+1)
	}
}

// runners are the parallel runners the tests compare with the serial
// solver.
var runners = []struct {
	name string
	p    Parallel
}{{"spread3", Spread(3)}, {"reversed", reversed}}

// TestSpreadCovers checks Spread's ranges: non-empty, contiguous, each
// element once, for short and long n.
func TestSpreadCovers(t *testing.T) {
	if Spread(1) != nil || Spread(0) != nil {
		t.Fatal("Spread of one thread or none is not nil")
	}
	for threads := 2; threads <= 5; threads++ {
		for _, n := range []int{1, 2, 3, 7, 64, 1001} {
			seen := make([]int32, n)
			ranges := make(chan [2]int, n)
			Spread(threads)(n, func(lo, hi int) {
				ranges <- [2]int{lo, hi}
				for k := lo; k < hi; k++ {
					seen[k]++
				}
			})
			close(ranges)
			count := 0
			for r := range ranges {
				if r[0] >= r[1] {
					t.Fatalf("threads=%d n=%d: empty range %v", threads, n, r)
				}
				count++
			}
			if count > threads || slices.ContainsFunc(seen, func(c int32) bool { return c != 1 }) {
				t.Fatalf("threads=%d n=%d: %d ranges, elements run %v times", threads, n, count, seen)
			}
		}
	}
}

// TestParallelMaxAbs compares Parallel.MaxAbs with MaxAbs, bit for bit,
// on every kernel path, for lengths around piece boundaries, with the
// largest magnitude, an infinity or a NaN in the last (short) piece or
// in the first.
func TestParallelMaxAbs(t *testing.T) { forImpls(t, testParallelMaxAbs) }

func testParallelMaxAbs(t *testing.T) {
	raceSkipAsm(t)
	r := rand.New(rand.NewPCG(21, 22))
	x := randVec(r, parMin+5*parPiece+3)
	for _, n := range []int{parMin - 1, parMin, parMin + 1, parMin + 5*parPiece - 1, parMin + 5*parPiece, len(x)} {
		for _, at := range thin([]int{n - 1, -1, 0, n - 2, n - parPiece/2}) {
			for _, v := range []float32{-1e30, float32(math.Inf(-1)), math.Float32frombits(0xffc00001)} {
				y := clone(x[:n])
				if at >= 0 {
					y[at] = v
				}
				want := math.Float32bits(MaxAbs(y))
				for _, rn := range runners {
					if got := math.Float32bits(rn.p.MaxAbs(y)); got != want {
						t.Fatalf("%s: n=%d, %g at %d: MaxAbs bits %#x, serial %#x", rn.name, n, v, at, got, want)
					}
				}
			}
		}
	}
}

// TestParallelSameBits runs the same gradients through a serial solver
// and through solvers with parallel runners, under rules with and without
// corrections, in updates of 1 to 3 gradients (accumulated, then folded
// into the fused pass), the first of each rule on the checked path
// (bounds unknown: +Inf): the weights and the whole state agree bit for
// bit after every update.
func TestParallelSameBits(t *testing.T) { forImpls(t, testParallelSameBits) }

func testParallelSameBits(t *testing.T) {
	raceSkipAsm(t)
	inf := float32(math.Inf(1))
	for _, rule := range thin([]string{"staleness", "average", "dc:0.5", "dc-adaptive:2", "gap+staleness"}) {
		cfg := testConfig(LRConstant)
		if err := cfg.ParseRule(rule); err != nil {
			t.Fatal(err)
		}
		ss := bigSolvers(t, cfg)
		r := rand.New(rand.NewPCG(23, 24))
		w0 := randVec(r, bigN)
		ws := make([][]float32, len(ss))
		for i := range ws {
			ws[i] = clone(w0)
		}
		for u := range 4 {
			c := 1 + u%3
			grads := make([][]float32, c)
			for k := range grads {
				grads[k] = randVec(r, bigN)
			}
			for i, s := range ss {
				grad := func(g []float32, tau int) Grad {
					gm := MaxAbs(g)
					if u == 0 {
						gm = inf
					}
					return Grad{G: g, Max: gm, Tau: tau, Pulled: w0} // computed on the initial weights
				}
				for _, g := range grads[:c-1] {
					s.AddGrad(ws[i], grad(g, u%2))
				}
				if info := s.UpdateGrad(ws[i], grad(grads[c-1], 1), u); info.Refused {
					t.Fatalf("%s: update %d refused: %+v", rule, u, info)
				}
			}
			sameAsSerial(t, fmt.Sprintf("%s: update %d of %d gradients", rule, u, c), ss, ws)
		}
	}
}

// TestParallelRefused mirrors TestUpdateRefused with parallel runners:
// weights near the float32 maximum in a late piece of a spread span put
// the updates on the checked path (measured, then run on copies), and a
// gradient that would make one −Inf is refused by every solver alike;
// weights and state agree with the serial solver's bit for bit throughout.
func TestParallelRefused(t *testing.T) { forImpls(t, testParallelRefused) }

func testParallelRefused(t *testing.T) {
	raceSkipAsm(t)
	big := bigLayout[3].Offset - bigLo + parMin - 3 // in fc.weight's last piece: lr_mult 2, no decay
	for _, rule := range thin([]string{"staleness", "dc:0.5", "gap"}) {
		cfg := Config{LR: 0.5, Momentum: 0.5, WeightDecay: 0.004}
		if err := cfg.ParseRule(rule); err != nil {
			t.Fatal(err)
		}
		ss := bigSolvers(t, cfg)
		r := rand.New(rand.NewPCG(25, 26))
		w0 := randVec(r, bigN)
		w0[big] = -3e38
		ws := make([][]float32, len(ss))
		for i := range ws {
			ws[i] = clone(w0)
		}
		for u := range 5 {
			g, last := randVec(r, bigN), randVec(r, bigN)
			if u == 3 {
				last[big] = 3e38 // a step of lr·lr_mult·3e38 = 3e38 further down: −Inf
			}
			for i, s := range ss {
				push(s, ws[i], g, 1)
				info := pushUpdate(s, ws[i], last, 0, 0)
				if info.Refused != (u == 3) || info.Gradients != 2 {
					t.Fatalf("%s: update %d: %+v, want refused: %t", rule, u, info, u == 3)
				}
			}
			sameAsSerial(t, fmt.Sprintf("%s: update %d", rule, u), ss, ws)
		}
		if ws[0][big] > -3e38 || ws[0][big] < -math.MaxFloat32 {
			t.Fatalf("%s: w[%d] = %g after small steps from -3e38", rule, big, ws[0][big])
		}
	}
}

// thin returns the rules a parallel test runs: under the race detector,
// the first only.
func thin[T any](v []T) []T {
	if raceEnabled {
		return v[:1]
	}
	return v
}

// raceSkipAsm skips a parallel test on the assembly's paths under the
// race detector, which sees only the Go loops' accesses.
func raceSkipAsm(t *testing.T) {
	if raceEnabled && ISA() != isa.Generic {
		t.Skip("the race detector does not see the assembly's accesses: the Go loops' path runs")
	}
}

// bigSolvers returns a serial solver of bigLayout's [bigLo, bigTotal) and
// one for each of runners.
func bigSolvers(t *testing.T, cfg Config) []*Solver {
	ss := make([]*Solver, 1+len(runners))
	for i := range ss {
		var err error
		if ss[i], err = NewSolver(cfg, bigLayout, bigLo, bigTotal); err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			ss[i].SetParallel(runners[i-1].p)
		}
	}
	return ss
}

// sameAsSerial fails unless every solver of ss and its weights ws hold
// the bits of the first, the serial one.
func sameAsSerial(t *testing.T, what string, ss []*Solver, ws [][]float32) {
	t.Helper()
	st := ss[0].State()
	for i := 1; i < len(ss); i++ {
		if !sameBits(ws[0], ws[i]) || !sameState(st, ss[i].State()) {
			t.Fatalf("%s: %s differs from the serial solver", what, runners[i-1].name)
		}
	}
}
