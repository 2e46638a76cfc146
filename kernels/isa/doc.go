// Package isa names the instruction-set levels of softsync's hand-written
// kernels and decides, from the CPU's features, which one runs.
//
// Three levels exist on x86-64, each a superset of the one below:
//
//   - Generic: portable code, compiled for the baseline of the build
//     target (SSE2 on x86-64); the only level on other architectures.
//   - AVX2: 256-bit vectors with FMA and F16C (the x86-64-v3 set that the
//     kernels use: AVX, AVX2, FMA, F16C).
//   - AVX512: 512-bit vectors (the x86-64-v4 set: AVX-512 F, CD, BW, DQ
//     and VL) on top of AVX2.
//
// Every package with variants of its kernels (the C kernels behind
// package kernels, the solver passes of ps/sgd, the codecs of rdma) runs
// the highest level that the CPU, the operating system (which must save
// the wider registers) and the build support, unless told to stay lower.
// Best gives that level and Reason says why; a binary built with the
// noavx512 tag never goes above AVX2, one built for another architecture
// stays Generic. (The purego tag, which leaves out the Go assembly of
// ps/sgd and rdma, is those packages' own business: it does not change
// Best.)
//
// This package reads the CPU's features and nothing else: no environment
// variables (the softsync command reads SOFTSYNC_ISA and passes the level
// on).
package isa
