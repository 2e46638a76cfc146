package cluster

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps/param"
)

// ImageOptions are how a job reads image data: an ImageNet-style folder
// (DIR/train/CLASS/…, DIR/val/CLASS/…) or a list file of Caffe's
// ImageData (docs/data.md). Every process of a job must have the same
// (Settings: "data-root", "val-list", "resize", "crop", "mirror" and the
// "classes" the data has); Strict is this process's.
type ImageOptions struct {
	// Root is the folder a list file's relative paths start from ("":
	// the list file's folder); ValList, if set, is the list file of the
	// validation images (same root).
	Root, ValList string
	// Resize is the shorter side images are resized to before the crop
	// (0: data.DefaultResize of the network's input, 256 for 224).
	Resize int
	// CenterCrop trains on the centre crop of each image rather than a
	// random one; Mirror mirrors training images at random. Evaluation
	// takes the centre crop, unmirrored.
	CenterCrop, Mirror bool
	// Strict decodes every image before the job starts, and refuses to
	// start, naming every bad file, if any fails; otherwise a bad image
	// is skipped and counted (Result.Skipped).
	Strict bool
	// Classes are the data's class names (FitImages reads them): the
	// sorted folder names of train/, or "0" … the largest label of a list.
	Classes []string
}

// MeanImages is how many training images of an image set the input mean
// is taken from (data.Images.Mean): spread evenly through the set, which
// is in class order, so that every class of up to MeanImages has a say.
const MeanImages = 1000

// PrefetchBatches is how many mini-batches the pipeline decodes ahead of
// each learner of image data (data.NewImageLoader's depth).
const PrefetchBatches = 2

// DecodeNice is how much a job's image pipeline lowers the scheduling
// priority of its threads (data.PipelineConfig.Nice) by default: they
// decode in the time the computation leaves idle — a worker done with its
// share of the batch waiting for the others, the push, the update, the
// pull — rather than preempting a worker, whose share then ends late and
// holds up the step. Within the process's scheduling group a thread of
// nice 10 still gets about a tenth of a core that a computing thread
// wants, and every core the computation leaves (docs/data.md).
const DecodeNice = 10

// IsImageData reports whether the data set name (Config.Data) is image
// data: a pack (data.IsPack), a folder with a train sub-folder, or a file
// (a list file).
func IsImageData(name string) bool {
	if data.IsPack(name) {
		return true
	}
	if fi, err := os.Stat(filepath.Join(name, "train")); err == nil && fi.IsDir() {
		return true
	}
	fi, err := os.Stat(name)
	return err == nil && fi.Mode().IsRegular()
}

// classesFromData are the built-in networks whose classes are the data's
// (1000, ImageNet's, unless the data says otherwise): their last fully
// connected layer takes the data's number of classes (nn.Spec.WithClasses).
var classesFromData = []string{"alexnet", "resnet18"}

// FitImages reads the classes of the image data Data names into
// Images.Classes (the folder names of train/, each checked to hold an
// image, or the labels of the list file: cheap, no image is read) and
// fits the network to them: a network
// whose classes come from the data (alexnet, resnet18) gets as many
// outputs; any other must have as many already. Spec must be set. An
// error names the data and, for a network that disagrees, both numbers.
func (c *Config) FitImages() error {
	var classes []string
	if data.IsPack(c.Data) {
		m, err := data.ReadPackManifest(c.Data)
		if err != nil {
			return err
		}
		classes = m.Classes
	} else if fi, err := os.Stat(c.Data); err == nil && fi.IsDir() {
		if classes, err = data.FolderClasses(filepath.Join(c.Data, "train")); err != nil {
			return err
		}
	} else {
		l, err := data.ReadListFile(c.Data, c.listRoot())
		if err != nil {
			return err
		}
		classes = l.Classes
	}
	c.Images.Classes = classes
	n := len(classes)
	if c.Spec.Input.C != 3 {
		return fmt.Errorf("%s: %w: images have 3 channels (RGB), %s takes %d", c.Data, data.ErrShape, c.Spec.Name, c.Spec.Input.C)
	}
	if slices.Contains(classesFromData, c.Model) {
		spec, err := c.Spec.WithClasses(n)
		if err != nil {
			return err
		}
		c.Spec = spec
		return nil
	}
	if k := c.Spec.Classes(); k != n {
		return fmt.Errorf("%s: %w: the data has %d classes, %s has %d outputs", c.Data, data.ErrShape, n, c.Spec.Name, k)
	}
	return nil
}

// listRoot is the folder a list file's relative paths start from.
func (c *Config) listRoot() string {
	if c.Images.Root != "" {
		return c.Images.Root
	}
	return filepath.Dir(c.Data)
}

// resize is the shorter side images are resized to.
func (c *Config) resize() int {
	if c.Images.Resize > 0 || c.Spec == nil {
		return c.Images.Resize
	}
	return data.DefaultResize(max(c.Spec.Input.H, c.Spec.Input.W))
}

// imageSettings adds the settings of image data to s.
func (c *Config) imageSettings(s Settings) {
	o := &c.Images
	s["classes"] = ""
	if len(o.Classes) == 0 {
		return
	}
	crop := "random"
	if o.CenterCrop {
		crop = "center"
	}
	h := sha256.Sum256([]byte(strings.Join(o.Classes, "\n")))
	s["data-root"], s["val-list"], s["resize"], s["crop"], s["mirror"] = o.Root, o.ValList, strconv.Itoa(c.resize()), crop, strconv.FormatBool(o.Mirror)
	s["classes"] = fmt.Sprintf("%d (sha256 %x)", len(o.Classes), h[:8])
}

// LookupImages reads the image data Data names (FitImages first): the
// folder's train/ and val/ splits, or the list file and ValList, as
// data.Images decoded on p's threads, cropped to the network's input
// after resizing to Images.Resize. With Images.Strict it decodes every
// image first (on threads decoders) and returns an error naming every
// file that fails. Errors name the folder or the list file and line.
func (c *Config) LookupImages(p *data.Pipeline, threads int) (DataSet, error) {
	o := &c.Images
	if data.IsPack(c.Data) {
		return c.lookupPack(p, threads)
	}
	var train, val *data.ImageList
	var err error
	if fi, serr := os.Stat(c.Data); serr == nil && fi.IsDir() {
		train, val, err = data.ReadImageFolder(c.Data)
	} else {
		train, err = data.ReadListFile(c.Data, c.listRoot())
		if err == nil && o.ValList != "" {
			val, err = data.ReadListFile(o.ValList, c.listRoot())
		}
		if err == nil && val != nil && len(val.Classes) > len(train.Classes) {
			err = fmt.Errorf("%s: %w: label %d, the training list %s has classes 0 … %d", o.ValList, data.ErrLabel,
				len(val.Classes)-1, c.Data, len(train.Classes)-1)
		}
		if val != nil {
			val.Classes = train.Classes
		}
	}
	if err != nil {
		return DataSet{}, err
	}
	if !slices.Equal(train.Classes, o.Classes) {
		return DataSet{}, fmt.Errorf("%s: %w: its classes changed since they were read (%d, then %d)", c.Data, data.ErrFormat, len(o.Classes), len(train.Classes))
	}
	sets := []*data.ImageSet{data.NewFolderSet(train)}
	if val != nil {
		sets = append(sets, data.NewFolderSet(val))
	}
	return c.imageSets(p, threads, sets)
}

// lookupPack is LookupImages for a pack (data.OpenPack): its train and
// val splits, whose classes must be those FitImages read.
func (c *Config) lookupPack(p *data.Pipeline, threads int) (DataSet, error) {
	pk, err := data.OpenPack(c.Data)
	if err != nil {
		return DataSet{}, err
	}
	m := pk.Manifest
	switch {
	case !slices.Equal(m.Classes, c.Images.Classes):
		err = fmt.Errorf("%s: %w: its classes changed since they were read (%d, then %d)", c.Data, data.ErrFormat, len(c.Images.Classes), len(m.Classes))
	case c.resize() > m.Resize:
		err = param.Fieldf("Images.Resize", "%d is larger than the %d the pack %s was resized to: pack the images again with --resize %d", c.resize(), m.Resize, c.Data, c.resize())
	}
	if err != nil {
		pk.Close()
		return DataSet{}, err
	}
	sets := []*data.ImageSet{pk.Train}
	if pk.Val != nil {
		sets = append(sets, pk.Val)
	}
	ds, err := c.imageSets(p, threads, sets)
	if err != nil {
		pk.Close()
	}
	return ds, err
}

// imageSets makes the job's data of an image set's train split (sets[0])
// and val split (sets[1], if any): augmented for the network's input,
// decoded on p, every image scanned first with Images.Strict.
func (c *Config) imageSets(p *data.Pipeline, threads int, sets []*data.ImageSet) (DataSet, error) {
	o := &c.Images
	in := c.Spec.Input
	a := data.Augment{H: in.H, W: in.W, Resize: c.resize(), Random: !o.CenterCrop, Mirror: o.Mirror}
	if a.Resize < max(a.H, a.W) {
		return DataSet{}, param.Fieldf("Images.Resize", "%d is shorter than the network's input %d×%d", a.Resize, a.H, a.W)
	}
	if o.Strict {
		var bad []error
		for _, s := range sets {
			bad = append(bad, s.Scan(threads)...)
		}
		if len(bad) > 0 {
			return DataSet{}, fmt.Errorf("%s: %d image(s) cannot be decoded:\n%w", c.Data, len(bad), errors.Join(bad...))
		}
	}
	ds := DataSet{Name: c.Data, Train: &data.Images{Set: sets[0], Augment: a, Pipeline: p, Depth: PrefetchBatches}}
	if len(sets) > 1 {
		ds.Test = &data.Images{Set: sets[1], Augment: a, Pipeline: p, Depth: PrefetchBatches}
	}
	return ds, nil
}

// inputNorm is a data.Normalizer in a control message or a checkpoint:
// the scale and the mean image, as one value per channel when the mean
// is constant over each channel (an image set's, data.Images.Mean).
type inputNorm struct {
	Scale float32   `json:"scale"`
	Mean  []float32 `json:"mean,omitempty"`
	// Channels: Mean holds one value per channel.
	Channels bool `json:"per_channel,omitempty"`
}

// packNorm returns z for a network of input in.
func packNorm(z data.Normalizer, in nn.Shape) *inputNorm {
	n := &inputNorm{Scale: z.Scale, Mean: z.Mean}
	plane := in.H * in.W
	if len(z.Mean) != in.Len() || plane == 0 {
		return n
	}
	per := make([]float32, in.C)
	for ch := range in.C {
		p := z.Mean[ch*plane : (ch+1)*plane]
		for _, v := range p {
			if v != p[0] {
				return n
			}
		}
		per[ch] = p[0]
	}
	n.Mean, n.Channels = per, true
	return n
}

// normalizer returns the data.Normalizer n packs, for a network of input
// in.
func (n *inputNorm) normalizer(in nn.Shape) (data.Normalizer, error) {
	z := data.Normalizer{Scale: n.Scale, Mean: n.Mean}
	if n.Channels {
		if len(n.Mean) != in.C {
			return z, fmt.Errorf("%w: the input mean has %d channels, the network's input %s", ErrProtocol, len(n.Mean), in)
		}
		z.Mean = make([]float32, in.Len())
		for ch, v := range n.Mean {
			for i := range in.H * in.W {
				z.Mean[ch*in.H*in.W+i] = v
			}
		}
	}
	if z.Mean != nil && len(z.Mean) != in.Len() {
		return z, fmt.Errorf("%w: an input mean of %d values, the network's input %s has %d", ErrProtocol, len(z.Mean), in, in.Len())
	}
	return z, nil
}

// welcomeNorm returns the input normalisation a learner or the evaluator
// was welcomed with.
func welcomeNorm(w welcome, spec *nn.Spec) (data.Normalizer, error) {
	if w.Norm == nil {
		return data.Normalizer{}, fmt.Errorf("%w: the coordinator sent no input normalisation", ErrProtocol)
	}
	return w.Norm.normalizer(spec.Input)
}
