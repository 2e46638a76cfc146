package repro

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/softsync/softsync/learner"
	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/ps/sim"
	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/errcode"
)

func TestParseRules(t *testing.T) {
	rules, err := ParseRules("constant, hinge:4,10,poly:0.5,dc-adaptive:2+staleness,gap+momentum-comp")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"constant", "hinge:4,10", "poly:0.5", "dc-adaptive:2+staleness", "gap+momentum-comp"}
	if !slices.Equal(rules, want) {
		t.Fatalf("rules %q, want %q", rules, want)
	}
	solvers := make([]sgd.Config, len(rules))
	for i, r := range rules {
		if solvers[i], err = parseRule(r); err != nil {
			t.Fatal(err)
		}
	}
	if s := solvers[1]; s.LRMode != sgd.LRHinge || s.HingeB != 4 || s.HingeA != 10 || s.MomentumComp {
		t.Errorf("hinge:4,10: %+v", s)
	}
	if s := solvers[4]; s.Correction != sgd.CorrGap || !s.MomentumComp {
		t.Errorf("gap+momentum-comp: %+v", s)
	}
	for _, bad := range []string{"fast", "hinge:4", "poly:-1", "constant,,staleness", "momentum-comp", "10"} {
		if _, err := ParseRules(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestReproTimingHeterogeneous checks the heterogeneous timing model on a
// few thousand draws: speeds uniform in [1, 3] (mean 2, each third of the
// range about a third of them), the same for the same seed, compute times
// log-normal with σ = 0.5 around μ·simImageSeconds.
func TestReproTimingHeterogeneous(t *testing.T) {
	const k = 4000
	d, speeds := timingHeterogeneous.model(k, 4, 7)
	if d.Kind != sim.LogNormal || d.Spread != 0.5 || d.Mean != 4*simImageSeconds {
		t.Errorf("compute %+v", d)
	}
	_, again := timingHeterogeneous.model(k, 4, 7)
	_, other := timingHeterogeneous.model(k, 4, 8)
	if !slices.Equal(speeds, again) || slices.Equal(speeds, other) {
		t.Error("speeds are not a function of the seed")
	}
	var sum float64
	var thirds [3]int
	for _, s := range speeds {
		if s < 1 || s > 3 {
			t.Fatalf("speed %v outside [1, 3]", s)
		}
		sum += s
		thirds[min(int((s-1)*1.5), 2)]++
	}
	if m := sum / k; m < 1.9 || m > 2.1 {
		t.Errorf("mean speed %v, want ≈ 2", m)
	}
	for i, c := range thirds {
		if c < k/4 || c > k*5/12 {
			t.Errorf("third %d of [1, 3] holds %d of %d speeds", i, c, k)
		}
	}
	if d, s := timingHomogeneous.model(30, 4, 7); s != nil || d.Spread != simComputeSpread {
		t.Errorf("homogeneous: %+v, %v", d, s)
	}
}

// TestDiverged: a job's failure is a divergence by the identity of its
// cause, as it reaches the coordinator from another process (its text
// and codes, package errcode), never by its text alone.
func TestDiverged(t *testing.T) {
	remote := func(err error) error { // as the coordinator fails a job with a learner's failure
		return fmt.Errorf("%w: learner 1 on h, pid 7: %w", cluster.ErrJobFailed, errcode.Encode(err).Err())
	}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{remote(fmt.Errorf("learner 1 step 2: %w: ps shard 0: %w: element 7 is +Inf", ps.ErrRejected, ps.ErrNonFinite)), true},
		{remote(fmt.Errorf("learner 1 step 9: %w: %w", learner.ErrDiverged, ps.ErrDiverged)), true},
		{remote(fmt.Errorf("learner 0 step 4: loss NaN: %w", learner.ErrDiverged)), true},
		{fmt.Errorf("learner 0 step 4: loss NaN: %w", learner.ErrDiverged), true},
		// The same words without the identity: an error about a file, say.
		{remote(errors.New("ps shard 0: " + ps.ErrNonFinite.Error())), false},
		{remote(fmt.Errorf("read %s: %w", ps.ErrDiverged.Error(), io.ErrUnexpectedEOF)), false},
		{remote(fmt.Errorf("learner 0: %w", rdma.ErrClosed)), false},
	} {
		if got := diverged(tc.err); got != tc.want {
			t.Errorf("diverged(%q) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
