// Package synth makes seeded, gradient-like float32 data for the
// transport's tests and benchmarks.
package synth
