//go:build noblas || !cgo

package kernels

// NativeBuilt reports whether this binary contains the native engine.
func NativeBuilt() bool { return false }

func newNative(Config) (Engine, Info, error) { return nil, Info{}, ErrNotBuilt }
