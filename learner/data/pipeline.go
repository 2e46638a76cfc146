package data

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/softsync/softsync/kernels"
)

// Augment is how an ImageSet's images become network inputs, following
// torchvision's Resize + RandomCrop/CenterCrop + RandomHorizontalFlip and
// Caffe's transform_param: the image is resized (PIL's antialiased
// bilinear filter) so that its shorter side is Resize pixels (the longer
// side scaled alike, rounded down, as torchvision does), an H×W window is
// cut from it — at a random position (Random) or the centre (rounded to
// nearest) — and mirrored left to right with probability ½ (Mirror; as
// Caffe's mirror, also of centre crops); each value becomes Scale·pixel − Mean[value] (Mean
// nil: no subtraction), planes in R, G, B order (C×H×W).
//
// The random choices of image i in epoch e are drawn from (Seed, e, i)
// alone, so a job with a fixed seed sees the same crops whichever thread
// or learner decodes the image.
type Augment struct {
	H, W   int // the network's input
	Resize int // shorter side after resizing, ≥ max(H, W)
	Random bool
	Mirror bool
	Scale  float32
	Mean   []float32 // 3·H·W values or nil
	Seed   uint64
}

// DefaultResize is the shorter side a network of input side s is trained
// from: s·256/224, rounded (256 for 224, 259 for 227).
func DefaultResize(s int) int { return int(math.Round(float64(s) * 256 / 224)) }

// Validate returns an error wrapping ErrConfig that names the first bad
// field.
func (a *Augment) Validate() error {
	switch {
	case a.H < 1 || a.W < 1:
		return fmt.Errorf("%w: input %d×%d", ErrConfig, a.H, a.W)
	case a.Resize < max(a.H, a.W):
		return fmt.Errorf("%w: Resize %d is shorter than the crop %d×%d", ErrConfig, a.Resize, a.H, a.W)
	case a.Mean != nil && len(a.Mean) != 3*a.H*a.W:
		return fmt.Errorf("%w: mean has %d values, the input %d", ErrConfig, len(a.Mean), 3*a.H*a.W)
	}
	return nil
}

// ImageLen is the number of values of one input, 3·H·W.
func (a *Augment) ImageLen() int { return 3 * a.H * a.W }

// resized returns the size a w×h image is resized to.
func (a *Augment) resized(w, h int) (int, int) {
	if w <= h {
		return a.Resize, max(int(float64(h)*float64(a.Resize)/float64(w)), a.Resize)
	}
	return max(int(float64(w)*float64(a.Resize)/float64(h)), a.Resize), a.Resize
}

// mix is splitmix64's finaliser.
func mix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// place returns the crop's corner and mirror for image i of epoch e in a
// rw×rh resized image.
func (a *Augment) place(rw, rh, epoch, i int) (x0, y0 int, mirror bool) {
	r := mix(mix(a.Seed^0x5eed) ^ uint64(uint32(epoch))<<32 ^ uint64(uint32(i)))
	mirror = a.Mirror && r>>32&1 == 1
	if !a.Random {
		return int(math.Round(float64(rw-a.W) / 2)), int(math.Round(float64(rh-a.H) / 2)), mirror
	}
	x0 = int((r & 0xffff) * uint64(rw-a.W+1) >> 16)
	y0 = int((r >> 16 & 0xffff) * uint64(rh-a.H+1) >> 16)
	return x0, y0, mirror
}

// maxSubstitutes bounds the images tried in place of a bad one.
const maxSubstitutes = 16

// ErrNoImages: an image and every substitute tried for it failed to
// decode.
var ErrNoImages = errors.New("no decodable image")

// transformer turns an ImageSet's image into network input; one per
// pipeline thread.
type transformer struct {
	dec    *decoder
	img    kernels.Images
	buf    []byte // file bytes
	tmp    []byte // kernel scratch
	ax, ay kernels.ResizeAxis

	// the image being transformed, for rect
	a        *Augment
	i, epoch int
	mirror   bool
}

// load writes image i of set (epoch e) into x and returns its label.
// An image that fails to decode is recorded in set and replaced by the
// next image of the set that decodes (i+1, i+2, …, at most
// maxSubstitutes), whose label is returned.
func (t *transformer) load(set *ImageSet, a *Augment, i, epoch int, x []float32) (int32, error) {
	n := set.Len()
	for k := range maxSubstitutes {
		j := (i + k) % n
		err := t.transform(set, a, j, epoch, x)
		if err == nil {
			return set.List.Labels[j], nil
		}
		set.skip(j, fmt.Errorf("%s: %w", set.List.File(j), err))
	}
	return 0, fmt.Errorf("%s: %w: image %d and the %d after it", set.Source(), ErrNoImages, i, maxSubstitutes-1)
}

func (t *transformer) transform(set *ImageSet, a *Augment, i, epoch int, x []float32) error {
	b, err := set.rec.read(i, t.buf)
	if err != nil {
		return err
	}
	t.buf = b
	t.a, t.i, t.epoch = a, i, epoch
	m, err := t.dec.decodeRect(b, a.Resize, t)
	if err != nil {
		return err
	}
	if m.FullW != m.W || m.FullH != m.H {
		t.ax.Window(m.X, m.W)
		t.ay.Window(m.Y, m.H)
	}
	t.tmp = grow(t.tmp, kernels.ImageTmpLen(&t.ax, &t.ay))
	t.img.ResizeCHW(m.Pix, m.W, m.H, &t.ax, &t.ay, t.mirror, a.Scale, a.Mean, x[:a.ImageLen()], t.tmp)
	return nil
}

// rect places the crop of the image being transformed once its size is
// known and returns the source rectangle its resize reads. The resized
// size comes from the encoded size, the same for every decoder.
func (t *transformer) rect(w, h, srcW, srcH int) (x0, y0, x1, y1 int) {
	a := t.a
	rw, rh := a.resized(srcW, srcH)
	cx, cy, mirror := a.place(rw, rh, t.epoch, t.i)
	t.mirror = mirror
	t.ax.Set(w, rw, cx, a.W)
	t.ay.Set(h, rh, cy, a.H)
	x0, x1 = t.ax.Needs()
	y0, y1 = t.ay.Needs()
	return x0, y0, x1, y1
}

// PipelineConfig configures a Pipeline.
type PipelineConfig struct {
	// Threads decode and transform images, each with a decoder of its
	// own (≥ 1).
	Threads int
	// Nice, when positive, lowers the threads' scheduling priority by
	// that much (Linux: setpriority of each thread), so that they take
	// the cores the computation leaves idle rather than preempting it.
	Nice int
	// PureGo decodes JPEGs with Go's image/jpeg even when libjpeg-turbo
	// is built in (for comparisons).
	PureGo bool
}

// Pipeline decodes, resizes, crops, mirrors and normalises images on
// threads of its own. Fill hands it one batch at a time; several
// goroutines may call Fill, their jobs share the threads. Memory: each
// thread holds the largest file read so far, the largest decoded image
// (3 bytes a pixel, at the DCT-scaled size) and the resize scratch; the
// batches are the caller's.
type Pipeline struct {
	jobs chan job
	wg   sync.WaitGroup
	once sync.Once
}

type job struct {
	set   *ImageSet
	aug   *Augment
	i, e  int
	x     []float32
	label *int32
	err   *error
	done  *sync.WaitGroup
}

// NewPipeline starts the pipeline's threads; Close stops them.
func NewPipeline(cfg PipelineConfig) (*Pipeline, error) {
	if cfg.Threads < 1 {
		return nil, fmt.Errorf("%w: pipeline Threads must be ≥ 1, got %d", ErrConfig, cfg.Threads)
	}
	p := &Pipeline{jobs: make(chan job, 4*cfg.Threads)}
	img := kernels.NewImages()
	for range cfg.Threads {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			if cfg.Nice > 0 {
				lowerPriority(cfg.Nice)
			}
			t := &transformer{dec: newDecoder(cfg.PureGo), img: img}
			defer t.dec.close()
			for j := range p.jobs {
				l, err := t.load(j.set, j.aug, j.i, j.e, j.x)
				*j.label, *j.err = l, err
				j.done.Done()
			}
		}()
	}
	return p, nil
}

// Close stops the threads once the jobs handed to them are done. Fill
// must not be called afterwards. Close is idempotent.
func (p *Pipeline) Close() {
	p.once.Do(func() { close(p.jobs) })
	p.wg.Wait()
}

// Fill writes images idx of set (epoch e's augmentation) into x (len(idx)
// inputs of a.ImageLen() values) and their labels into labels, in
// parallel, and returns when all are written: the first error (an image
// whose substitutes failed too, ErrNoImages) or nil.
func (p *Pipeline) Fill(set *ImageSet, a *Augment, idx []int, epoch int, x []float32, labels []int32) error {
	il := a.ImageLen()
	errs := make([]error, len(idx))
	var done sync.WaitGroup
	done.Add(len(idx))
	for k, i := range idx {
		p.jobs <- job{set: set, aug: a, i: i, e: epoch, x: x[k*il : (k+1)*il], label: &labels[k], err: &errs[k], done: &done}
	}
	done.Wait()
	return errors.Join(errs...)
}
