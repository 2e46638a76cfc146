package ps

import (
	"errors"
	"math"
	"testing"
)

// TestRangeOf checks that RangeOf agrees with Ranges shard by shard, and
// that counts near the limits of int neither overflow nor panic.
func TestRangeOf(t *testing.T) {
	for total := 1; total <= 200; total += 7 {
		for shards := 1; shards <= min(total, 20); shards++ {
			rs, err := Ranges(total, shards)
			if err != nil {
				t.Fatal(err)
			}
			for k, want := range rs {
				if got, err := RangeOf(total, shards, k); err != nil || got != want {
					t.Fatalf("RangeOf(%d, %d, %d) = %v, %v; Ranges says %v", total, shards, k, got, err, want)
				}
			}
		}
	}
	big := math.MaxInt64 / 3
	r, err := RangeOf(big, big/5, big/5-1)
	if err != nil || r.Lo < 0 || r.Hi != big || r.Len() < 1 {
		t.Fatalf("RangeOf near the int limit: %v, %v", r, err)
	}
	for _, bad := range [][3]int{{10, 0, 0}, {10, 11, 0}, {10, 2, 2}, {10, 2, -1}} {
		if _, err := RangeOf(bad[0], bad[1], bad[2]); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("RangeOf%v: %v", bad, err)
		}
	}
}
