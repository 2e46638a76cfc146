package rdma

import (
	"math/bits"

	"github.com/klauspost/compress/s2"
)

// The memory a network takes, in bytes, for planning a job's memory
// before anything is allocated (the defaults of Options and
// VerbsOptions). A network of kind "auto" is planned as tcp, whose
// allocator rounds up the most, unless it is known to be shm.

// MsgBytes returns the memory a message of n float32 values takes from
// the allocator of a network of kind (Network.NewMsg): for tcp and inmem
// the process-wide pool's power of two of the values (a message of 30.5 M
// values takes 2²⁵ = 33.6 M); for shm the lend segment's 64 KiB grain
// from 64 KiB up (a smaller payload: the pool's); for verbs registered
// memory, a power of two up to a quarter region (8 MiB), whole MiB beyond.
// A received message that is not placed (Placer) takes the pool's.
func MsgBytes(kind string, n int) int64 {
	b := 4 * int64(n)
	switch kind {
	case "shm":
		if b >= shmLendMin {
			return (b + shmLendGrain - 1) &^ (shmLendGrain - 1)
		}
	case "verbs":
		return verbsClass(b)
	}
	return poolBytes(n)
}

// poolBytes is the memory of a message of n values from the pool.
func poolBytes(n int) int64 {
	if n <= 1 {
		return 4
	}
	return 4 << bits.Len(uint(n-1))
}

// verbsClass is regPool.classSize with the default region size.
func verbsClass(b int64) int64 {
	const region = 32 << 20
	if b > region/4 {
		return (b + dedicatedUnit - 1) / dedicatedUnit * dedicatedUnit
	}
	if b <= minBlock {
		return minBlock
	}
	return minBlock << bits.Len64(uint64((b+minBlock-1)>>minBlockShift-1))
}

// ConnBytes returns the memory one end of a connection of a network of
// kind keeps beside its messages: shm the segment of its two rings (2 MiB
// each, mapped by both ends), tcp its read and write buffers (64 KiB each;
// the kernel's socket buffers are not the process's), verbs its slots for
// small frames (32 of 8 KiB each way) and one region of registered memory
// per process (32 MiB, counted here once per connection as a bound),
// inmem nothing.
func ConnBytes(kind string) int64 {
	switch kind {
	case "shm":
		return 2 * shmRingSize
	case "verbs":
		return 2 * 32 * 8 << 10
	case "inmem":
		return 0
	}
	return 128 << 10
}

// RecvBytes returns the memory the receiving end of a connection of a
// network of kind holds for messages of up to n values that the
// application does not place: verbs keeps Window (2) registered buffers of
// the largest size class advertised to the sender, the others receive
// each message into a message of the pool, one at a time.
func RecvBytes(kind string, n int) int64 {
	if kind == "verbs" {
		return 2 * verbsClass(4*int64(n))
	}
	return poolBytes(n)
}

// Buffers returns the memory a connection keeps to encode (or decode) a
// payload of n values in codec c: the encoded payload, at its bound, and
// the byte planes of the shuffling codecs; 0 for none, which sends and
// receives a payload where it lies.
func (c Codec) Buffers(n int) int64 {
	raw := 4 * int64(n)
	switch c.ID {
	case CodecNone:
		return 0
	case CodecFP16, CodecBF16:
		return 2 * int64(n)
	case CodecTopK:
		return 8 * int64(c.topK(n))
	case CodecS2:
		return int64(s2.MaxEncodedLen(int(raw)))
	case CodecShuffleS2:
		return int64(s2.MaxEncodedLen(int(raw))) + raw
	case CodecShuffleZstd:
		return raw + raw>>8 + 64 + raw
	}
	return raw + raw>>8 + 64
}
