package sgd

import (
	"errors"
	"strings"
	"testing"

	"github.com/softsync/softsync/ps/param"
)

// TestNSchedule parses schedules into n and c₀ per epoch and back, and
// checks that a bad one is an error naming N and the entry.
func TestNSchedule(t *testing.T) {
	ns, err := ParseNSchedule("30@0,4@6,1@9", 30)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ epoch, n, c0 int }{{0, 30, 1}, {5, 30, 1}, {6, 4, 7}, {8, 4, 7}, {9, 1, 30}, {500, 1, 30}} {
		if n, c0 := ns.N(tc.epoch), ns.Quorum(tc.epoch, 30); n != tc.n || c0 != tc.c0 {
			t.Errorf("epoch %d: n %d, c₀ %d; want %d, %d", tc.epoch, n, c0, tc.n, tc.c0)
		}
	}
	if s := ns.String(); s != "30@0,4@6,1@9" {
		t.Errorf("String %q", s)
	}
	one, err := ParseNSchedule("8", 8)
	if err != nil || len(one) != 1 || one[0] != (NStep{0, 8}) || one.String() != "8" || one.Quorum(3, 8) != 1 {
		t.Errorf(`"8": %v %v`, one, err)
	}
	if two, err := ParseNSchedule("3,1@2", 6); err != nil || two.String() != "3@0,1@2" || two.Quorum(2, 6) != 6 {
		t.Errorf(`"3,1@2": %v %v`, two, err)
	}
	for _, tc := range []struct {
		in       string
		learners int
		says     string
	}{
		{"", 4, "must be an integer"},
		{"4@", 4, "epoch after @"},
		{"x@0", 4, "must be an integer"},
		{"4@1", 4, "from epoch 0"},
		{"4@0,2@3,1@3", 4, "epochs must increase"},
		{"4@0,2@3,1@2", 4, "epochs must increase"},
		{"5@0", 4, "[1, λ = 4]"},
		{"4@0,0@2", 4, "[1, λ = 4]"},
		{"4@0,,1@2", 4, "entry 2"},
	} {
		_, err := ParseNSchedule(tc.in, tc.learners)
		var fe *param.FieldError
		if !errors.As(err, &fe) || fe.Field != "N" || !errors.Is(err, param.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%q: error %v, want one naming N that says %q", tc.in, err, tc.says)
		}
	}
	if err := (NSchedule{}).Validate(4); err == nil {
		t.Error("an empty schedule is valid")
	}
}
