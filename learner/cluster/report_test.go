package cluster

import (
	"fmt"
	"testing"
)

// TestReportProcesses: the report counts processes by host and pid, not
// roles: mpirun -np 4 (rank 0 the shard server and the evaluator) is four
// processes, and each is listed once with its roles and their ids; a job
// in one process is one entry with every role.
func TestReportProcesses(t *testing.T) {
	p := func(rank int, role Role, id int, host string, pid int) Process {
		return Process{Rank: rank, Role: role, ID: id, Host: host, PID: pid}
	}
	procs := []Process{
		p(0, RoleServer, 0, "a", 100), p(0, RoleEvaluator, 0, "a", 100),
		p(1, RoleLearner, 0, "a", 101), p(2, RoleLearner, 1, "b", 100), p(3, RoleLearner, 2, "b", 102),
	}
	got := processesOf(procs)
	want := []ReportProcess{
		{Rank: 0, Host: "a", PID: 100, Roles: []string{"server", "evaluator"}, Servers: []int{0}, Learners: []int{}},
		{Rank: 1, Host: "a", PID: 101, Roles: []string{"learner"}, Servers: []int{}, Learners: []int{0}},
		{Rank: 2, Host: "b", PID: 100, Roles: []string{"learner"}, Servers: []int{}, Learners: []int{1}},
		{Rank: 3, Host: "b", PID: 102, Roles: []string{"learner"}, Servers: []int{}, Learners: []int{2}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("processes\n%v, want\n%v", got, want)
	}
	if got := processesOf(append(procs, p(3, RoleLearner, 2, "b", 103))); len(got) != 5 {
		t.Errorf("with a restarted learner: %d processes, want 5", len(got))
	}
	one := []Process{p(-1, RoleServer, 0, "localhost", 7), p(-1, RoleEvaluator, 0, "localhost", 7),
		p(-1, RoleLearner, 1, "localhost", 7), p(-1, RoleLearner, 0, "localhost", 7)}
	if got := processesOf(one); len(got) != 1 || fmt.Sprint(got[0].Roles) != "[server learner evaluator]" || fmt.Sprint(got[0].Learners) != "[0 1]" {
		t.Errorf("one process: %v", got)
	}
}
