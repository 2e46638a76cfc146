package rdma

import (
	"runtime"
	"sync"
	"unsafe"
)

const (
	// copyParMin is the bytes from which copyPar spreads a copy (4 Mi
	// floats): below it, goroutines cost more than they gain.
	copyParMin = 16 << 20
	// copyParMax is the most goroutines one copy spreads over: a copy is
	// bound by memory bandwidth, which a few cores saturate.
	copyParMax = 4
	// copyParAlign is the bytes every part but the last is a multiple of
	// (a cache line), so that no two goroutines write one line.
	copyParAlign = 64
)

// copyPar is copy for the transport's big copies of a payload (a lent
// payload kept beyond Send, a payload received into placed memory, one
// read out of a peer's shm lend segment): it copies min(len(dst),
// len(src)) elements and returns their number. A copy of at least
// copyParMin bytes is cut into contiguous parts, one per goroutine
// (at most copyParMax and GOMAXPROCS; the calling goroutine copies the
// first), each but the last a multiple of copyParAlign bytes; it returns
// once every part is copied. The elements are moved, not computed, so
// dst ends with the bits copy would give it. dst and src must not
// overlap.
func copyPar[T float32 | byte](dst, src []T) int {
	n := min(len(dst), len(src))
	var zero T
	size := int(unsafe.Sizeof(zero))
	k := min(copyParMax, runtime.GOMAXPROCS(0))
	if n*size < copyParMin || k <= 1 {
		return copy(dst, src)
	}
	align := copyParAlign / size
	part := (n/k + align - 1) / align * align
	var wg sync.WaitGroup
	for lo := part; lo < n; lo += part {
		hi := min(lo+part, n)
		wg.Go(func() { copy(dst[lo:hi], src[lo:hi]) })
	}
	copy(dst[:part], src[:part])
	wg.Wait()
	return n
}
