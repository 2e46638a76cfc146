//go:build !linux

package verbs

func capIPCLock() bool { return false }
