package learner

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/ps/checkpoint"
	"github.com/softsync/softsync/ps/sgd"
)

// Errors of LoadWeights, wrapped with the file name; test with errors.Is.
var (
	// ErrWeightsFormat: not a weights file, an unknown version, or a file
	// whose length does not match its header.
	ErrWeightsFormat = errors.New("not a softsync weights file")
	// ErrWeightsChecksum: the CRC32C trailer does not match the contents.
	ErrWeightsChecksum = errors.New("weights file checksum mismatch (corrupt file)")
	// ErrWeightsMismatch: the file holds weights of another network.
	ErrWeightsMismatch = errors.New("weights are for another network")
	// ErrWeightsNonFinite: a parameter, the input scale or a mean value
	// is NaN or infinite.
	ErrWeightsNonFinite = errors.New("weights file holds a NaN or infinite value")
)

// Weights file layout (docs/weights.md), all integers little-endian:
//
//	offset     size  field
//	0          8     magic "SSWEIGHT"
//	8          4     version, 1
//	12         4     L, length of the network name
//	16         L     network name (UTF-8), Spec.Name
//	16+L       32    SHA-256 of the network's architecture (SpecHash)
//	48+L       8     n, length of the parameter vector (Spec.VectorLen)
//	56+L       4n    parameters, float32, in the network's flat layout
//	P=56+L+4n  4     input scale, float32 (Normalizer.Scale)
//	P+4        4     m, number of mean values: 0 or C·H·W of the input
//	P+8        4m    mean image, float32, NCHW order (Normalizer.Mean)
//	P+8+4m     4     CRC32C (Castagnoli) of every byte before it
const (
	weightsMagic   = "SSWEIGHT"
	weightsVersion = 1
	maxNameLen     = 4096
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// SpecHash identifies a network's architecture: the SHA-256 of its spec in
// canonical form (nn.Spec.Format) without the initialisation fillers and
// the learning-rate and decay multipliers, which do not change what the
// parameters mean (bias=none, which removes a segment, stays).
func SpecHash(spec *nn.Spec) [32]byte {
	var b bytes.Buffer
	for line := range strings.Lines(string(spec.Format())) {
		for i, f := range strings.Fields(line) {
			key, v, _ := strings.Cut(f, "=")
			switch {
			case key == "bias" && v == "none": // no bias segment: the architecture
			case key == "weight", key == "bias", key == "lr_mult", key == "decay_mult", key == "bias_lr_mult", key == "bias_decay_mult":
				continue
			}
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(f)
		}
		b.WriteByte('\n')
	}
	return sha256.Sum256(b.Bytes())
}

// Weights are what a weights file holds: a network's flat parameter
// vector and the input normalisation it was trained with (the per-pixel
// mean of its training set), without which the parameters are of little
// use.
type Weights struct {
	Params     []float32
	Normalizer data.Normalizer
}

// SaveWeights writes w, for spec's network, to path in the weights
// format. It writes a temporary file in the same folder and renames it,
// so a crash never leaves a half-written file under path.
func SaveWeights(path string, spec *nn.Spec, w Weights) error {
	params, mean := w.Params, w.Normalizer.Mean
	if len(params) != spec.VectorLen() {
		return fmt.Errorf("%s: %d values, %s has %d parameters: %w", path, len(params), spec.Name, spec.VectorLen(), ErrWeightsMismatch)
	}
	if mean != nil && len(mean) != spec.Input.Len() {
		return fmt.Errorf("%s: mean image of %d values, %s takes %d: %w", path, len(mean), spec.Name, spec.Input.Len(), ErrWeightsMismatch)
	}
	b := make([]byte, 0, 72+len(spec.Name)+4*len(params)+4*len(mean))
	b = append(b, weightsMagic...)
	b = binary.LittleEndian.AppendUint32(b, weightsVersion)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(spec.Name)))
	b = append(b, spec.Name...)
	h := SpecHash(spec)
	b = append(b, h[:]...)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(params)))
	b = appendFloats(b, params)
	b = binary.LittleEndian.AppendUint32(b, math.Float32bits(w.Normalizer.Scale))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(mean)))
	b = appendFloats(b, mean)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	_, err := checkpoint.WriteAtomic(filepath.Dir(path), filepath.Base(path), func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
	return err
}

func appendFloats(b []byte, v []float32) []byte {
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

func readFloats(b []byte, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// LoadWeights reads a weights file written by SaveWeights for spec's
// network. Errors name the file and wrap ErrWeightsFormat,
// ErrWeightsChecksum, ErrWeightsMismatch or ErrWeightsNonFinite (or the
// file system's error).
func LoadWeights(path string, spec *nn.Spec) (*Weights, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err // *fs.PathError names the file
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s: %w: %s", path, ErrWeightsFormat, fmt.Sprintf(format, args...))
	}
	if len(b) < 16 || string(b[:8]) != weightsMagic {
		return nil, bad("no %q magic at the start", weightsMagic)
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != weightsVersion {
		return nil, bad("version %d, this softsync reads version %d", v, weightsVersion)
	}
	l := binary.LittleEndian.Uint32(b[12:])
	if l > maxNameLen || uint64(len(b)) < 16+uint64(l)+32+8+12 {
		return nil, bad("truncated header (name length %d, file %d bytes)", l, len(b))
	}
	name := string(b[16 : 16+l])
	off := 16 + int(l)
	var hash [32]byte
	copy(hash[:], b[off:])
	n := binary.LittleEndian.Uint64(b[off+32:])
	off += 40
	if n > math.MaxInt32 || uint64(len(b)) < uint64(off)+4*n+12 {
		return nil, bad("%d parameters need more than the %d bytes of the file", n, len(b))
	}
	p := off + 4*int(n)
	m := binary.LittleEndian.Uint32(b[p+4:])
	if want := uint64(p) + 8 + 4*uint64(m) + 4; uint64(len(b)) != want {
		return nil, bad("%d parameters and %d mean values need %d bytes, the file has %d", n, m, want, len(b))
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, fmt.Errorf("%s: %w: stored CRC32C %08x, contents give %08x", path, ErrWeightsChecksum, sum, got)
	}
	if hash != SpecHash(spec) || int(n) != spec.VectorLen() {
		return nil, fmt.Errorf("%s: %w: the file holds %q (%d parameters), the network is %q (%d parameters)%s",
			path, ErrWeightsMismatch, name, n, spec.Name, spec.VectorLen(), sameName(name, spec.Name))
	}
	if m != 0 && int(m) != spec.Input.Len() {
		return nil, bad("mean image of %d values, the network's input has %d", m, spec.Input.Len())
	}
	w := &Weights{Params: readFloats(b[off:], int(n))}
	w.Normalizer.Scale = math.Float32frombits(binary.LittleEndian.Uint32(b[p:]))
	if m > 0 {
		w.Normalizer.Mean = readFloats(b[p+8:], int(m))
	}
	for _, a := range []struct {
		name string
		v    []float32
	}{{"parameter", w.Params}, {"input scale", []float32{w.Normalizer.Scale}}, {"mean value", w.Normalizer.Mean}} {
		if k := sgd.FirstNonFinite(a.v); k >= 0 {
			return nil, fmt.Errorf("%s: %w: %s %d is %g", path, ErrWeightsNonFinite, a.name, k, a.v[k])
		}
	}
	return w, nil
}

func sameName(a, b string) string {
	if a == b {
		return " with a different architecture"
	}
	return ""
}
