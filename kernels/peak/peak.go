package peak

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/softsync/softsync/kernels/isa"
)

// ErrConfig is wrapped by every invalid Config.
var ErrConfig = errors.New("peak: invalid config")

// Config sets how the measurements run. The zero value asks for the
// defaults.
type Config struct {
	// Cores is the number of goroutines of the all-cores runs, each
	// locked to its own OS thread; 0 means runtime.NumCPU().
	Cores int
	// MinTime is the least duration of one timed run; 0 means 50 ms.
	MinTime time.Duration
	// Rounds is the number of timed runs per figure, the best kept; 0
	// means 5.
	Rounds int
}

// Validate reports the first invalid field, wrapping ErrConfig.
func (c Config) Validate() error {
	switch {
	case c.Cores < 0:
		return fmt.Errorf("%w: Cores = %d, must be ≥ 0", ErrConfig, c.Cores)
	case c.MinTime < 0:
		return fmt.Errorf("%w: MinTime = %v, must be ≥ 0", ErrConfig, c.MinTime)
	case c.Rounds < 0:
		return fmt.Errorf("%w: Rounds = %d, must be ≥ 0", ErrConfig, c.Rounds)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Cores == 0 {
		c.Cores = runtime.NumCPU()
	}
	if c.MinTime == 0 {
		c.MinTime = 50 * time.Millisecond
	}
	if c.Rounds == 0 {
		c.Rounds = 5
	}
	return c
}

// Rate is a measured rate on one core and on all the cores of a Config.
type Rate struct {
	One   float64 // one goroutine
	All   float64 // Cores goroutines at once, summed
	Cores int
}

// FMA returns the peak of level l in GFLOP/s (a fused multiply-add
// counts two): l must run here (isa.Supported); isa.Auto measures
// isa.Best().
func FMA(cfg Config, l isa.Level) (Rate, error) {
	if err := cfg.Validate(); err != nil {
		return Rate{}, err
	}
	l, err := isa.Resolve(l)
	if err != nil {
		return Rate{}, err
	}
	cfg = cfg.withDefaults()
	loop, flop := fmaLoop(l)
	work := func(n int) float64 {
		loop(n)
		return float64(n) * flop
	}
	return measure(cfg, work, 1e9), nil
}

// Copy returns the copy bandwidth in GB/s (bytes read plus bytes written
// per second) with buffers of size bytes per goroutine (two of them:
// source and destination).
func Copy(cfg Config, size int) (Rate, error) {
	if err := cfg.Validate(); err != nil {
		return Rate{}, err
	}
	if size < 64 {
		return Rate{}, fmt.Errorf("%w: copy size %d, must be ≥ 64 bytes", ErrConfig, size)
	}
	cfg = cfg.withDefaults()
	bufs := make([][2][]byte, cfg.Cores)
	for i := range bufs {
		bufs[i] = [2][]byte{make([]byte, size), make([]byte, size)}
		for j := range bufs[i][0] {
			bufs[i][0][j] = byte(j)
		}
	}
	var mu sync.Mutex
	next := 0
	work := func(n int) float64 {
		mu.Lock()
		b := bufs[next%len(bufs)]
		next++
		mu.Unlock()
		for range n {
			copy(b[1], b[0])
		}
		return float64(n) * 2 * float64(size)
	}
	return measure(cfg, work, 1e9), nil
}

// measure returns the best rates over the rounds of work, one goroutine
// and then cfg.Cores at once: work(n) runs n units and returns their
// amount, rates are amounts per second divided by scale.
func measure(cfg Config, work func(n int) float64, scale float64) Rate {
	// Calibrate: units that take about MinTime on one core.
	n := 1
	for {
		t0 := time.Now()
		work(n)
		if d := time.Since(t0); d >= cfg.MinTime/8 || n >= 1<<40 {
			n = int(float64(n) * float64(cfg.MinTime) / float64(max(d, time.Microsecond)))
			n = max(n, 1)
			break
		}
		n *= 4
	}
	r := Rate{Cores: cfg.Cores}
	for range cfg.Rounds {
		r.One = max(r.One, run(1, n, work)/scale)
		r.All = max(r.All, run(cfg.Cores, n, work)/scale)
	}
	return r
}

// run starts k goroutines, each locked to an OS thread, that run work(n)
// together, and returns the amount they did per second of wall time from
// the start to the last one's end.
func run(k, n int, work func(n int) float64) float64 {
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	amounts := make([]float64, k)
	ready.Add(k)
	done.Add(k)
	for i := range k {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			defer done.Done()
			ready.Done()
			<-start
			amounts[i] = work(n)
		}()
	}
	ready.Wait()
	t0 := time.Now()
	close(start)
	done.Wait()
	d := time.Since(t0).Seconds()
	total := 0.0
	for _, a := range amounts {
		total += a
	}
	return total / d
}
