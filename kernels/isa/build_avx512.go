//go:build amd64 && !noavx512

package isa

// buildMax is the highest level this build contains.
const buildMax = AVX512

const buildReason = ""
