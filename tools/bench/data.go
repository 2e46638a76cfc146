package bench

import (
	"fmt"
	"sync"
	"time"

	"github.com/softsync/softsync/learner/data"
)

// DataResult is the output of softsync bench data --json.
type DataResult struct {
	Data    string `json:"data"`    // the folder
	Images  int    `json:"images"`  // its training images
	Threads int    `json:"threads"` // pipeline threads
	// Decoder is "libjpeg-turbo" or "image/jpeg" (Go's: a binary built
	// without the turbojpeg tag).
	Decoder string `json:"decoder"`
	H       int    `json:"height"` // the crop: the network's input
	W       int    `json:"width"`
	Resize  int    `json:"resize"` // the shorter side before the crop
	// Decoded is the images the timed passes transformed, Seconds their
	// wall time; ImagesPerSec is Decoded / Seconds and PerThread that
	// over Threads.
	Decoded      int     `json:"decoded"`
	Seconds      float64 `json:"seconds"`
	ImagesPerSec float64 `json:"images_per_sec"`
	PerThread    float64 `json:"images_per_sec_per_thread"`
	// CPUSeconds is the process's CPU time over the timed passes: on a
	// shared machine, CPUSeconds / Seconds below Threads says that other
	// work took some of the cores.
	CPUSeconds float64 `json:"cpu_seconds"`
}

// DataConfig is a run of bench data: the training split of the image
// folder Dir, each image read, decoded, resized so that its shorter side
// is Resize, cropped at random to H×W, mirrored at random and written
// into the network's input tensor (data.Pipeline with Threads threads),
// in passes over every image until MinTime has passed.
type DataConfig struct {
	Dir       string
	Threads   int
	H, W      int
	Resize    int // 0: data.DefaultResize
	MinTime   time.Duration
	PureGo    bool // decode JPEGs with Go's image/jpeg
	batchSize int  // 0: 32
}

// Data measures the training-time transformation of every image of
// cfg.Dir's train split: a warm-up of one batch, then whole passes (each
// epoch's random crops and mirrors) until cfg.MinTime has passed, the
// batches filled by two goroutines so that the threads never wait for
// the next batch. It returns images/s over the timed passes.
func Data(cfg DataConfig) (*DataResult, error) {
	if cfg.Threads < 1 || cfg.H < 1 || cfg.W < 1 {
		return nil, fmt.Errorf("%w: bench data: %d threads, %d×%d input", data.ErrConfig, cfg.Threads, cfg.H, cfg.W)
	}
	train, _, err := data.ReadImageFolder(cfg.Dir)
	if err != nil {
		return nil, err
	}
	set := data.NewFolderSet(train)
	a := data.Augment{H: cfg.H, W: cfg.W, Resize: cfg.Resize, Random: true, Mirror: true, Scale: 1, Seed: 1}
	if a.Resize == 0 {
		a.Resize = data.DefaultResize(max(cfg.H, cfg.W))
	}
	if err := a.Validate(); err != nil {
		return nil, err
	}
	p, err := data.NewPipeline(data.PipelineConfig{Threads: cfg.Threads, PureGo: cfg.PureGo})
	if err != nil {
		return nil, err
	}
	defer p.Close()
	mu := cfg.batchSize
	if mu == 0 {
		mu = 32
	}
	n := set.Len()
	pass := func(epoch, count int) error {
		next := make(chan int)
		errs := make(chan error, 2)
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				x, labels := make([]float32, mu*a.ImageLen()), make([]int32, mu)
				for start := range next {
					idx := make([]int, 0, mu)
					for i := start; i < min(start+mu, count); i++ {
						idx = append(idx, i%n)
					}
					if err := p.Fill(set, &a, idx, epoch, x, labels); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		for start := 0; start < count; start += mu {
			next <- start
		}
		close(next)
		wg.Wait()
		close(errs)
		return <-errs
	}
	if err := pass(0, min(mu, n)); err != nil {
		return nil, err
	}
	res := &DataResult{Data: cfg.Dir, Images: n, Threads: cfg.Threads, Decoder: "image/jpeg", H: a.H, W: a.W, Resize: a.Resize}
	if data.TurboJPEG() && !cfg.PureGo {
		res.Decoder = "libjpeg-turbo"
	}
	c0, start := cpuSeconds(), time.Now()
	for e := 1; e == 1 || time.Since(start) < cfg.MinTime; e++ {
		if err := pass(e, n); err != nil {
			return nil, err
		}
		res.Decoded += n
	}
	res.Seconds, res.CPUSeconds = time.Since(start).Seconds(), cpuSeconds()-c0
	res.ImagesPerSec = float64(res.Decoded) / res.Seconds
	res.PerThread = res.ImagesPerSec / float64(cfg.Threads)
	if bad, first := set.Skipped(); bad > 0 {
		return res, fmt.Errorf("%s: %d image(s) cannot be decoded, e.g. %s", cfg.Dir, bad, first[0])
	}
	return res, nil
}
