//go:build !(turbojpeg && cgo)

package turbo

// Built reports whether this build has the binding to libjpeg-turbo.
const Built = false

// Decoder stands in for the libjpeg decompressor of cgo builds.
type Decoder struct{ FastDCT bool }

// NewDecoder returns ErrNotBuilt.
func NewDecoder() (*Decoder, error) { return nil, ErrNotBuilt }

// Close does nothing.
func (*Decoder) Close() {}

// Header returns ErrNotBuilt.
func (*Decoder) Header([]byte) (Header, error) { return Header{}, ErrNotBuilt }

// Decode returns ErrNotBuilt.
func (*Decoder) Decode([]byte, Header, int, int, []byte) error { return ErrNotBuilt }

// DecodeRect returns ErrNotBuilt.
func (*Decoder) DecodeRect([]byte, Header, int, int, int, int, int, int, []byte) (int, int, error) {
	return 0, 0, ErrNotBuilt
}

// Encoder stands in for the TurboJPEG compressor of cgo builds.
type Encoder struct{}

// NewEncoder returns ErrNotBuilt.
func NewEncoder() (*Encoder, error) { return nil, ErrNotBuilt }

// Close does nothing.
func (*Encoder) Close() {}

// Sampling of an encoded JPEG's chroma (TurboJPEG's TJSAMP values).
const (
	Sub444  = 0
	Sub420  = 2
	SubGray = 3
)

// Encode returns ErrNotBuilt.
func (*Encoder) Encode(out, _ []byte, _, _, _, _ int, _ bool) ([]byte, error) {
	return out, ErrNotBuilt
}
