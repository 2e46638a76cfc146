// Package peak measures the yardsticks of softsync's benchmarks: the
// machine's floating-point peak per instruction-set level and its copy
// bandwidth.
//
// The peak of a level is the rate of a loop of independent
// multiply-adds on registers only (16 accumulators of fused
// multiply-adds on 512-bit vectors at level isa.AVX512, 12 on 256-bit
// vectors at isa.AVX2, 8 multiplies and 8 adds on 128-bit SSE vectors at
// isa.Generic on amd64, scalar Go elsewhere): no memory traffic, so it
// is what the core's vector units can do, the ceiling of every
// compute-bound kernel at that level. It runs on one core and on Cores
// cores at once (one goroutine locked to an OS thread each), so that a
// shared clock that drops when all cores are busy shows.
//
// Copy bandwidth is the rate of Go's copy between two buffers per
// goroutine, counting bytes read plus bytes written, for a buffer size
// the caller picks (in cache or far beyond it): the ceiling of a
// memory-bound kernel that streams as much.
//
// Each figure is the best of Config.Rounds timed runs of at least
// Config.MinTime: on a shared machine the best run is the one least
// disturbed. The package reads no environment and prints nothing.
package peak
