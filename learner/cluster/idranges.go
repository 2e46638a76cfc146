package cluster

import "sort"

// idRanges is a set of mini-batch ids (data.Plan.ID) as sorted,
// disjoint, non-adjacent intervals [lo, hi).
type idRanges [][2]uint64

// contains reports whether id is in r.
func (r idRanges) contains(id uint64) bool {
	i := sort.Search(len(r), func(i int) bool { return r[i][1] > id })
	return i < len(r) && r[i][0] <= id
}

// end returns the id after the largest in r (0 for none).
func (r idRanges) end() uint64 {
	if len(r) == 0 {
		return 0
	}
	return r[len(r)-1][1]
}

// intersect returns the ids in both a and b.
func intersect(a, b idRanges) idRanges {
	var out idRanges
	for i, j := 0, 0; i < len(a) && j < len(b); {
		lo, hi := max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
		if lo < hi {
			out = append(out, [2]uint64{lo, hi})
		}
		if a[i][1] < b[j][1] {
			i++
		} else {
			j++
		}
	}
	return out
}

// valid reports whether r is sorted, disjoint and made of non-empty
// intervals.
func (r idRanges) valid() bool {
	for i, iv := range r {
		if iv[0] >= iv[1] || i > 0 && r[i-1][1] >= iv[0] {
			return false
		}
	}
	return true
}
