package plots

import "testing"

func TestClipTail(t *testing.T) {
	for _, c := range []struct {
		h      []uint64
		n      int
		hidden uint64
	}{
		{nil, 1, 0},
		{[]uint64{5}, 1, 0},
		{[]uint64{500, 400, 99, 0, 1}, 3, 1},
		{[]uint64{500, 400, 98, 0, 2}, 5, 0},
	} {
		got, hidden := clipTail(c.h, 0.999)
		if len(got) != c.n || hidden != c.hidden {
			t.Errorf("clipTail(%v) = %v, %d hidden; want %d buckets, %d hidden", c.h, got, hidden, c.n, c.hidden)
		}
	}
}
