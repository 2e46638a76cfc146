package peak_test

import (
	"errors"
	"testing"
	"time"

	"github.com/softsync/softsync/kernels/isa"
	"github.com/softsync/softsync/kernels/peak"
)

// TestRates runs every measurement briefly: each rate must be positive
// and finite (no timing assertion: the machine is shared).
func TestRates(t *testing.T) {
	cfg := peak.Config{Cores: 2, MinTime: time.Millisecond, Rounds: 1}
	for _, l := range isa.All {
		if !isa.Supported(l) {
			t.Logf("%v: not run here (%s)", l, isa.Reason())
			continue
		}
		r, err := peak.FMA(cfg, l)
		if err != nil || !(r.One > 0 && r.All > 0) || r.Cores != 2 {
			t.Errorf("FMA(%v) = %+v, %v", l, r, err)
		}
	}
	r, err := peak.Copy(cfg, 1<<16)
	if err != nil || !(r.One > 0 && r.All > 0) {
		t.Errorf("Copy = %+v, %v", r, err)
	}
}

func TestConfig(t *testing.T) {
	for _, c := range []peak.Config{{Cores: -1}, {MinTime: -1}, {Rounds: -1}} {
		if _, err := peak.FMA(c, isa.Generic); !errors.Is(err, peak.ErrConfig) {
			t.Errorf("FMA(%+v) = %v, want ErrConfig", c, err)
		}
	}
	if _, err := peak.Copy(peak.Config{}, 8); !errors.Is(err, peak.ErrConfig) {
		t.Errorf("Copy of 8 bytes: %v, want ErrConfig", err)
	}
}
