//go:build verbs && cgo

/*
 * The verbs C layer (csrc/verbs/), compiled into this package through cgo
 * under the verbs build tag; CMake builds the same file for its C test.
 * The go command does not notice edits to files outside this directory:
 * csrc_hash.go records a hash of csrc/verbs/ that a test checks
 * (regenerate it with `make csrc-hash`), so that every change there also
 * changes this package and invalidates the build cache.
 */
#include "../../../csrc/verbs/ssverbs.c"
