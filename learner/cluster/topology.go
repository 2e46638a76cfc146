package cluster

import (
	"errors"
	"fmt"
	"slices"

	"github.com/softsync/softsync/ps/param"
)

// ErrTopology is wrapped by the errors of a topology that cannot run the
// job: too few processes, roles missing or twice, a process that is not
// in it.
var ErrTopology = errors.New("cluster: the topology does not fit the job")

// Topology says which process of a job runs which roles and shards. One
// function builds it for each way a job is started: InProcess (every role
// in one process), Apart (a process per role: softsync launch, and the
// roles started by hand, ByHand) and Ranks (the processes of a launcher,
// by rank). StartProcess runs one process's part of it.
type Topology struct {
	// Servers lists the shards each shard server runs, by server index
	// (CoordinatorConfig.Servers).
	Servers [][]int
	// Processes lists what each process runs, by process index.
	Processes []Roles
}

// Roles are the roles one process of a job runs.
type Roles struct {
	Rank        int  // the launcher's rank of the process, -1 without a launcher
	Coordinator bool // the job's coordinator
	Evaluator   bool // the job's evaluator
	Servers     []int
	Learners    []int // learner ids
}

// InProcess is the topology of a job in one process: the coordinator, the
// evaluator, one shard server of every shard and every learner.
func InProcess(learners, shards int) Topology {
	return Topology{Servers: [][]int{upTo(shards)},
		Processes: []Roles{{Rank: -1, Coordinator: true, Evaluator: true, Servers: []int{0}, Learners: upTo(learners)}}}
}

// Apart is the topology of a job of a process per role: process 0 the
// head (coordinator and evaluator), processes 1 … S the shard servers 0 …
// S−1 (shard k on server k), then the learners 0 … λ−1.
func Apart(learners, shards int) Topology {
	t := Topology{Servers: oneShardEach(shards), Processes: []Roles{{Rank: -1, Coordinator: true, Evaluator: true}}}
	for k := range shards {
		t.Processes = append(t.Processes, Roles{Rank: -1, Servers: []int{k}})
	}
	for r := range learners {
		t.Processes = append(t.Processes, Roles{Rank: -1, Learners: []int{r}})
	}
	return t
}

// ByHand returns the topology of a job whose processes were started one
// role each (Apart), and the index of the process that runs role id:
// shard server id, learner id, or the evaluator (and with it the
// coordinator; id 0). An id outside the job is a *param.FieldError
// naming ID.
func ByHand(learners, shards int, role Role, id int) (Topology, int, error) {
	t := Apart(learners, shards)
	i := t.index(role, id)
	if i < 0 {
		switch role {
		case RoleServer:
			return t, -1, param.Fieldf("ID", "shard servers are 0…%d (%d shards), got %d", shards-1, shards, id)
		case RoleLearner:
			return t, -1, param.Fieldf("ID", "learners are 0…%d (%d learners), got %d", learners-1, learners, id)
		}
		return t, -1, param.Fieldf("ID", "no %s %d in the job", role, id)
	}
	return t, i, nil
}

// Ranks is the topology of a job of size processes started by a
// launcher, with shards shard servers: ranks 0 … S−1 are the shard
// servers (one shard each), rank 0 also the coordinator and the
// evaluator; the other ranks are the learners (learner r−S). The job
// needs at least one learner.
func Ranks(size, shards int) (Topology, error) {
	if shards < 1 || size <= shards {
		return Topology{}, fmt.Errorf("%w: %d processes, but it needs its %d shard servers and at least one learner", ErrTopology, size, shards)
	}
	t := Topology{Servers: oneShardEach(shards)}
	for r := range size {
		p := Roles{Rank: r}
		if r < shards {
			p.Servers = []int{r}
		} else {
			p.Learners = []int{r - shards}
		}
		p.Coordinator, p.Evaluator = r == 0, r == 0
		t.Processes = append(t.Processes, p)
	}
	return t, nil
}

// Learners returns the number of learners of the topology.
func (t Topology) Learners() int {
	n := 0
	for _, p := range t.Processes {
		n += len(p.Learners)
	}
	return n
}

// index returns the index of the process that runs role id, or -1.
func (t Topology) index(role Role, id int) int {
	return slices.IndexFunc(t.Processes, func(p Roles) bool {
		switch role {
		case RoleServer:
			return slices.Contains(p.Servers, id)
		case RoleLearner:
			return slices.Contains(p.Learners, id)
		}
		return role == RoleEvaluator && p.Evaluator && id == 0
	})
}

// check returns an error unless the topology runs a job of learners
// learners and shards shards: each shard on one server, each server,
// learner, the coordinator and the evaluator in one process.
func (t Topology) check(learners, shards int) error {
	var all, servers, ls, coords, evals []int
	for _, s := range t.Servers {
		all = append(all, s...)
	}
	for _, p := range t.Processes {
		servers, ls = append(servers, p.Servers...), append(ls, p.Learners...)
		if p.Coordinator {
			coords = append(coords, 0)
		}
		if p.Evaluator {
			evals = append(evals, 0)
		}
	}
	for _, c := range []struct {
		what string
		ids  []int
		n    int
	}{{"shards", all, shards}, {"shard servers", servers, len(t.Servers)}, {"learners", ls, learners},
		{"coordinators", coords, 1}, {"evaluators", evals, 1}} {
		if slices.Sort(c.ids); !slices.Equal(c.ids, upTo(c.n)) {
			return fmt.Errorf("%w: %s %v, want 0…%d once each", ErrTopology, c.what, c.ids, c.n-1)
		}
	}
	return nil
}

// expect lists the roles of the processes a launcher started, with their
// ranks, for the coordinator's messages (CoordinatorConfig.Expect).
func (t Topology) expect() []Process {
	var out []Process
	for _, p := range t.Processes {
		if p.Rank < 0 {
			continue
		}
		for _, k := range p.Servers {
			out = append(out, Process{Rank: p.Rank, Role: RoleServer, ID: k})
		}
		for _, r := range p.Learners {
			out = append(out, Process{Rank: p.Rank, Role: RoleLearner, ID: r})
		}
	}
	return out
}

// upTo returns 0 … n−1.
func upTo(n int) []int {
	s := make([]int, max(n, 0))
	for i := range s {
		s[i] = i
	}
	return s
}

// oneShardEach deals n shards to n shard servers, one each.
func oneShardEach(n int) [][]int {
	s := make([][]int, n)
	for k := range s {
		s[k] = []int{k}
	}
	return s
}
