//go:build !amd64

package isa

// buildMax is the highest level this build contains: the vector kernels
// exist for amd64 only.
const buildMax = Generic

const buildReason = "no vector kernels for this architecture"
