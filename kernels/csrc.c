//go:build cgo && !noblas

/*
 * The C kernels of the native engine: the sources of csrc/ compiled as one
 * translation unit into this package, so that a plain `go build` needs no
 * prior CMake step. CMake builds the same files into libsoftsync.a for the
 * C tests. The go command does not notice edits to files outside this
 * directory; csrc_hash.go records a hash of csrc/ that a test checks
 * (regenerate it with `make csrc-hash`), so that every change to csrc/
 * also changes this package and invalidates the build cache.
 */
#define _GNU_SOURCE /* dladdr, in blas.c */

#include "../csrc/batchnorm.c"
#include "../csrc/blas.c"
#include "../csrc/conv.c"
#include "../csrc/direct.c"
#include "../csrc/direct512.c"
#include "../csrc/dropout.c"
#include "../csrc/isa.c"
#include "../csrc/im2col.c"
#include "../csrc/image.c"
#include "../csrc/layers.c"
#include "../csrc/parallel.c"
#include "../csrc/pool.c"
#include "../csrc/s2d.c"
#include "../csrc/smallgemm.c"
#include "../csrc/wgrad.c"
#include "../csrc/winograd.c"
