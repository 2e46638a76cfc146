package learner

import "testing"

// TestTopK counts top-1 and top-5 hits on rows worked out by hand.
func TestTopK(t *testing.T) {
	const classes = 7
	logits := []float32{
		// label 3 ranks 1st: a hit for k = 1 and 5
		0, 1, 2, 9, 3, 4, 5,
		// label 0 ranks 6th (five classes larger): a miss for both
		1, 2, 3, 4, 5, 6, 0.5,
		// label 6 ranks 5th: a top-5 hit only
		9, 8, 7, 6, 0, 0, 5,
		// ties: label 2 equals class 1 (smaller index, so before it): 2nd
		0, 4, 4, 1, 1, 1, 1,
		// ties: label 1 equals class 2 (larger index, after it): 1st
		0, 4, 4, 1, 1, 1, 1,
	}
	labels := []int32{3, 0, 6, 2, 1}
	if got := TopK(logits, classes, labels, 1); got != 2 {
		t.Errorf("top-1: %d hits, want 2 (rows 0 and 4)", got)
	}
	if got := TopK(logits, classes, labels, 5); got != 4 {
		t.Errorf("top-5: %d hits, want 4 (all but row 1)", got)
	}
	if got := TopK(logits, classes, labels[:2], 5); got != 1 {
		t.Errorf("top-5 of the first two rows: %d, want 1", got)
	}
	if got := TopK(logits, classes, labels, classes); got != 5 {
		t.Errorf("top-%d: %d, want every row", classes, got)
	}
}
