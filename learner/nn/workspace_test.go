package nn

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/kernels/isa"
)

// TestWorkspacePlan: the plan's workspace is what the Workspaces of a
// Net's parts grow to in a training step and an evaluation, on each
// engine: a strided first layer over 3 channels (space to depth on the
// native engine), LRN, a 3×3 convolution of 64 channels (Winograd) and a
// grouped one, with one worker, two, two cut into parts, and with batch
// norm over two workers (whose backward pass takes its input's worth).
func TestWorkspacePlan(t *testing.T) {
	convs := "input channels=3 height=32 width=32\n" +
		"conv c1 out=64 kernel=4 stride=2 pad=1\nrelu r1\n" +
		"lrn n1 size=5 alpha=0.0001 beta=0.75 region=across_channels\n" +
		"conv c2 out=64 kernel=3 pad=1\nrelu r2\n" +
		"conv c3 out=32 kernel=3 pad=1 group=2\nrelu r3\n" +
		"pool p3 mode=max kernel=2 stride=2\nfc f out=10\nsoftmax\n"
	bn := "input channels=3 height=16 width=16\n" +
		"conv c1 out=64 kernel=3 pad=1\nbatchnorm b1\nrelu r1\n" +
		"conv c2 out=64 kernel=3 pad=1\nbatchnorm b2\nrelu r2\n" +
		"pool p2 mode=avg kernel=2 stride=2\nfc f out=10\nsoftmax\n"
	engines := []kernels.Engine{kernels.Reference()}
	for _, l := range []isa.Level{isa.Auto, isa.AVX2} {
		e, info, err := kernels.New(kernels.Config{Threads: 3, ISA: l})
		if errors.Is(err, kernels.ErrISA) || err == nil && info.Fallback {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		engines = append(engines, e)
	}
	for _, c := range []struct {
		name, src string
		cfgs      []Config
	}{
		{"convs", convs, []Config{{Batch: 4}, {Batch: 6, Workers: 2}, {Batch: 8, Workers: 2, Part: 2}, {Batch: 4, Inference: true}}},
		{"bn", bn, []Config{{Batch: 4}, {Batch: 8, Workers: 2}}},
	} {
		spec := mustParse(t, c.src)
		for _, e := range engines {
			for _, cfg := range c.cfgs {
				plan, err := spec.Memory(cfg, e)
				if err != nil {
					t.Fatal(err)
				}
				n, err := New(spec, e, cfg)
				if err != nil {
					t.Fatal(err)
				}
				n.Init(1)
				rng := rand.New(rand.NewPCG(1, 2))
				x := make([]float32, cfg.Batch*spec.Input.Len())
				for i := range x {
					x[i] = rng.Float32()
				}
				labels := make([]int32, cfg.Batch)
				if !cfg.Inference {
					n.Gradient(x, labels)
				}
				n.Evaluate(x, labels)
				var got int64
				for _, r := range n.reps {
					got += 4 * int64(r.ws.Size())
				}
				if got != plan.Workspace {
					t.Errorf("%s on %s (%v), %+v: the workspaces grew to %s, the plan says %s",
						c.name, e.Name(), kernels.ISAOf(e), cfg, formatBytes(got), formatBytes(plan.Workspace))
				}
				n.Close()
			}
		}
	}
}
