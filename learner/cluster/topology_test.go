package cluster

import (
	"errors"
	"fmt"
	"testing"

	"github.com/softsync/softsync/ps/param"
)

// TestTopologies: each way of starting a job gives each process its
// roles: in one process every role; apart, the head, then one process
// per shard server and per learner; under a launcher, ranks 0 … S−1 the
// shard servers, rank 0 also the head, the others the learners. Every
// topology runs the job it was made for (check), and no other.
func TestTopologies(t *testing.T) {
	r := func(rank int, head bool, servers, learners []int) Roles {
		return Roles{Rank: rank, Coordinator: head, Evaluator: head, Servers: servers, Learners: learners}
	}
	ranks := func(size, shards int) Topology {
		tp, err := Ranks(size, shards)
		if err != nil {
			t.Fatal(err)
		}
		return tp
	}
	for _, c := range []struct {
		name             string
		t                Topology
		learners, shards int
		servers          [][]int
		procs            []Roles
		expect           []Process
	}{
		{"in process", InProcess(3, 2), 3, 2, [][]int{{0, 1}}, []Roles{r(-1, true, []int{0}, []int{0, 1, 2})}, nil},
		{"apart", Apart(2, 2), 2, 2, [][]int{{0}, {1}},
			[]Roles{r(-1, true, nil, nil), r(-1, false, []int{0}, nil), r(-1, false, []int{1}, nil), r(-1, false, nil, []int{0}), r(-1, false, nil, []int{1})}, nil},
		{"ranks", ranks(4, 2), 2, 2, [][]int{{0}, {1}},
			[]Roles{r(0, true, []int{0}, nil), r(1, false, []int{1}, nil), r(2, false, nil, []int{0}), r(3, false, nil, []int{1})},
			[]Process{{Rank: 0, Role: RoleServer, ID: 0}, {Rank: 1, Role: RoleServer, ID: 1}, {Rank: 2, Role: RoleLearner, ID: 0}, {Rank: 3, Role: RoleLearner, ID: 1}}},
		{"ranks, one shard", ranks(2, 1), 1, 1, [][]int{{0}}, []Roles{r(0, true, []int{0}, nil), r(1, false, nil, []int{0})},
			[]Process{{Rank: 0, Role: RoleServer, ID: 0}, {Rank: 1, Role: RoleLearner, ID: 0}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if fmt.Sprint(c.t.Servers) != fmt.Sprint(c.servers) || fmt.Sprint(c.t.Processes) != fmt.Sprint(c.procs) {
				t.Errorf("servers %v, processes %+v; want %v, %+v", c.t.Servers, c.t.Processes, c.servers, c.procs)
			}
			if got := c.t.expect(); fmt.Sprint(got) != fmt.Sprint(c.expect) {
				t.Errorf("expect %+v, want %+v", got, c.expect)
			}
			if err := c.t.check(c.learners, c.shards); err != nil || c.t.Learners() != c.learners {
				t.Errorf("check: %v; %d learners", err, c.t.Learners())
			}
			for _, other := range [][2]int{{c.learners + 1, c.shards}, {c.learners, c.shards + 1}} {
				if err := c.t.check(other[0], other[1]); !errors.Is(err, ErrTopology) {
					t.Errorf("check of a job of %d learners and %d shards: %v, want ErrTopology", other[0], other[1], err)
				}
			}
		})
	}
	for _, c := range [][2]int{{2, 2}, {1, 1}, {5, 0}} {
		if _, err := Ranks(c[0], c[1]); !errors.Is(err, ErrTopology) {
			t.Errorf("Ranks(%d, %d): %v, want ErrTopology", c[0], c[1], err)
		}
	}
	bad := InProcess(2, 1)
	bad.Processes = append(bad.Processes, Roles{Rank: -1, Coordinator: true})
	if err := bad.check(2, 1); !errors.Is(err, ErrTopology) {
		t.Errorf("two coordinators: %v, want ErrTopology", err)
	}
}

// TestByHand: a role started by hand is its process of the topology
// Apart; an id outside the job is an error naming ID.
func TestByHand(t *testing.T) {
	for _, c := range []struct {
		role  Role
		id    int
		index int
	}{{RoleEvaluator, 0, 0}, {RoleServer, 0, 1}, {RoleServer, 2, 3}, {RoleLearner, 0, 4}, {RoleLearner, 1, 5},
		{RoleServer, 3, -1}, {RoleServer, -1, -1}, {RoleLearner, 2, -1}, {RoleEvaluator, 1, -1}} {
		tp, i, err := ByHand(2, 3, c.role, c.id)
		var fe *param.FieldError
		switch {
		case c.index < 0 && (!errors.As(err, &fe) || fe.Field != "ID"):
			t.Errorf("%s %d: %v, want an error naming ID", c.role, c.id, err)
		case c.index >= 0 && (err != nil || i != c.index || fmt.Sprint(tp) != fmt.Sprint(Apart(2, 3))):
			t.Errorf("%s %d: process %d (%v), want %d of Apart(2, 3)", c.role, c.id, i, err, c.index)
		}
	}
}
