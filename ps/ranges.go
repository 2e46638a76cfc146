package ps

import (
	"math/bits"

	"github.com/softsync/softsync/ps/param"
)

// RangeOf returns the range of shard k in Ranges(total, shards) without
// building the others, so that a reader of an untrusted shard count (a
// checkpoint file) needs no memory in proportion to it. Errors are
// *param.FieldError values wrapping ErrInvalidConfig.
func RangeOf(total, shards, k int) (Range, error) {
	if err := checkShards(total, shards); err != nil {
		return Range{}, err
	}
	if k < 0 || k >= shards {
		return Range{}, param.Fieldf("index", "shard %d outside [0, %d)", k, shards)
	}
	return Range{boundary(total, shards, k), boundary(total, shards, k+1)}, nil
}

func checkShards(total, shards int) error {
	if shards < 1 || shards > total {
		return param.Fieldf("Shards", "need 1 ≤ shards ≤ vector length %d, got %d", total, shards)
	}
	return nil
}

// boundary returns b_k of Ranges: ⌊k·total/shards⌋ rounded down to a
// multiple of 16 when total ≥ 16·shards, and total for k = shards. The
// product is taken in 128 bits, so that no count overflows
// (1 ≤ shards ≤ total, 0 ≤ k ≤ shards).
func boundary(total, shards, k int) int {
	if k == shards {
		return total
	}
	hi, lo := bits.Mul64(uint64(k), uint64(total))
	q, _ := bits.Div64(hi, lo, uint64(shards)) // hi < shards since k < shards
	b := int(q)
	if total/16 >= shards {
		b = b / 16 * 16
	}
	return b
}
