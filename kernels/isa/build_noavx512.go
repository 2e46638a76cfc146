//go:build amd64 && noavx512

package isa

// buildMax is the highest level this build contains: the noavx512 tag
// leaves out the AVX-512 kernels.
const buildMax = AVX2

const buildReason = "built with the noavx512 tag"
