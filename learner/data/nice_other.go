//go:build !linux

package data

// lowerPriority does nothing on this system.
func lowerPriority(int) {}
