package sgd

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/softsync/softsync/ps/param"
)

// NStep is one entry of an n schedule: softsync's n from epoch From on.
type NStep struct {
	From int // the first epoch of the entry, ≥ 0
	N    int // n, 1 ≤ N ≤ λ
}

// NSchedule is softsync's n as a function of the epoch, for jobs that
// start asynchronous and end synchronous (Dutta et al., AISTATS 2018):
// entries in increasing order of From, the first from epoch 0; entry k
// holds from its From to the next entry's. The epoch is the one the step
// schedule uses (complete passes over the data before the update), and
// the full update's size follows it: c₀ = ⌊λ/n⌋ (Quorum; Solver.SetQuorum
// sets it in the solver).
type NSchedule []NStep

// ParseNSchedule parses an n schedule for λ = learners: entries "N@E"
// (n = N from epoch E on) separated by commas, in increasing order of E
// from 0, e.g. "30@0,4@6,1@9"; an entry without "@E" is from epoch 0, so
// "8" is n = 8 for the whole job. Errors are *param.FieldError values
// naming N and the entry.
func ParseNSchedule(s string, learners int) (NSchedule, error) {
	var ns NSchedule
	for k, e := range strings.Split(s, ",") {
		n, from, hasFrom := strings.Cut(e, "@")
		st := NStep{}
		var err error
		if st.N, err = strconv.Atoi(n); err != nil {
			return nil, param.Fieldf("N", "entry %d %q: n must be an integer, as in 30@0,4@6,1@9 (n = 30 from epoch 0, 4 from epoch 6, 1 from epoch 9)", k+1, e)
		}
		if hasFrom {
			if st.From, err = strconv.Atoi(from); err != nil {
				return nil, param.Fieldf("N", "entry %d %q: the epoch after @ must be an integer", k+1, e)
			}
		}
		ns = append(ns, st)
	}
	if err := ns.Validate(learners); err != nil {
		return nil, err
	}
	return ns, nil
}

// Validate returns a *param.FieldError naming N unless the schedule has
// at least one entry, the first from epoch 0, epochs strictly increasing
// and every n in [1, learners].
func (ns NSchedule) Validate(learners int) error {
	if len(ns) == 0 {
		return param.Fieldf("N", "the schedule is empty: want n, or entries n@epoch from epoch 0")
	}
	for k, st := range ns {
		switch {
		case st.N < 1 || st.N > learners:
			return param.Fieldf("N", "entry %d %v: n must be in [1, λ = %d]", k+1, st, learners)
		case k == 0 && st.From != 0:
			return param.Fieldf("N", "entry 1 %v: the first entry must be from epoch 0", st)
		case k > 0 && st.From <= ns[k-1].From:
			return param.Fieldf("N", "entry %d %v: epochs must increase, entry %d is from epoch %d", k+1, st, k, ns[k-1].From)
		}
	}
	return nil
}

// N returns n in epoch: the N of the last entry from epoch or earlier.
func (ns NSchedule) N(epoch int) int {
	n := ns[0].N
	for _, st := range ns[1:] {
		if st.From > epoch {
			break
		}
		n = st.N
	}
	return n
}

// Quorum returns c₀ = ⌊λ/n⌋ in epoch, λ = learners.
func (ns NSchedule) Quorum(epoch, learners int) int { return learners / ns.N(epoch) }

// String returns the entry as ParseNSchedule reads it: "N@E".
func (st NStep) String() string { return fmt.Sprintf("%d@%d", st.N, st.From) }

// String returns the spelling ParseNSchedule reads back: "N" for a
// single entry, else "N@E" entries separated by commas.
func (ns NSchedule) String() string {
	if len(ns) == 1 && ns[0].From == 0 {
		return strconv.Itoa(ns[0].N)
	}
	parts := make([]string, len(ns))
	for k, st := range ns {
		parts[k] = st.String()
	}
	return strings.Join(parts, ",")
}
