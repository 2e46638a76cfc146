//go:build !(verbs && cgo)

package verbs

// Built reports whether this build has the cgo binding to libibverbs.
const Built = false

// Host fails with ErrNotBuilt: this build has no binding to libibverbs
// (it needs cgo and the verbs build tag).
func Host() (Provider, error) { return nil, ErrNotBuilt }
