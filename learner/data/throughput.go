package data

import (
	"fmt"
	"time"
)

// Throughput is what MeasurePipeline measured.
type Throughput struct {
	Threads int           // pipeline threads
	Images  int           // images transformed
	Wall    time.Duration // elapsed time
	// CPU is the CPU time (user and system) the process spent meanwhile,
	// on every thread: images per CPU-second is a per-core figure that
	// other processes on a busy machine do not distort. Zero where the
	// system does not report it.
	CPU time.Duration
}

// ImagesPerSec is the wall-clock rate.
func (t Throughput) ImagesPerSec() float64 { return float64(t.Images) / t.Wall.Seconds() }

// ImagesPerCPUSec is the rate per second of CPU time (0 when CPU is).
func (t Throughput) ImagesPerCPUSec() float64 {
	if t.CPU <= 0 {
		return 0
	}
	return float64(t.Images) / t.CPU.Seconds()
}

// MeasureBatch is the batch size MeasurePipeline fills.
const MeasureBatch = 32

// MeasurePipeline measures the training-time work of a job on set — read,
// decode, resize, crop, mirror and normalise into the input tensor (a, as
// a training loader runs it) — on a pipeline of cfg's threads: every image
// of set, passes times (epochs 0, 1, …), in batches of MeasureBatch in the
// set's order. It is the measurement of `go test -bench ImagePipeline`
// and of the command that compares the pipeline with torchvision's.
func MeasurePipeline(set *ImageSet, a Augment, cfg PipelineConfig, passes int) (Throughput, error) {
	if err := a.Validate(); err != nil {
		return Throughput{}, fmt.Errorf("%s: %w", set.Source(), err)
	}
	if passes < 1 {
		return Throughput{}, fmt.Errorf("%w: passes must be ≥ 1, got %d", ErrConfig, passes)
	}
	p, err := NewPipeline(cfg)
	if err != nil {
		return Throughput{}, err
	}
	defer p.Close()
	x, labels, idx := make([]float32, MeasureBatch*a.ImageLen()), make([]int32, MeasureBatch), make([]int, 0, MeasureBatch)
	n := 0
	t0, c0 := time.Now(), processCPU()
	for e := range passes {
		for i := 0; i < set.Len(); i += MeasureBatch {
			idx = idx[:0]
			for j := i; j < min(i+MeasureBatch, set.Len()); j++ {
				idx = append(idx, j)
			}
			if err := p.Fill(set, &a, idx, e, x, labels); err != nil {
				return Throughput{}, err
			}
			n += len(idx)
		}
	}
	return Throughput{Threads: cfg.Threads, Images: n, Wall: time.Since(t0), CPU: processCPU() - c0}, nil
}
