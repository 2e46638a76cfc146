package kernels_test

import (
	"errors"
	"testing"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/kerneltest"
)

// TestEngines runs the conformance suite on every engine of this build.
func TestEngines(t *testing.T) {
	kerneltest.ForEachEngine(t, kerneltest.Run)
}

func TestNewReference(t *testing.T) {
	e, info, err := kernels.New(kernels.Config{Reference: true})
	if err != nil || e.Name() != "reference" || info.Engine != "reference" || info.Fallback {
		t.Fatalf("New(Reference) = %v, %+v, %v", e.Name(), info, err)
	}
	for _, cfg := range []kernels.Config{{Threads: -1}, {ThreadTimeout: 3}, {ThreadTimeout: 31}} {
		if _, _, err := kernels.New(cfg); !errors.Is(err, kernels.ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", cfg, err)
		}
	}
}
