package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/softsync/softsync/learner/cluster"
)

// TestReportProcesses: the report counts processes by host and pid, not
// roles: mpirun -np 4 (rank 0 the shard server and the evaluator) is four
// processes, a learner restarted as a new process is one more, and each
// is listed once with its roles and their ids.
func TestReportProcesses(t *testing.T) {
	p := func(rank int, role cluster.Role, id int, host string, pid int) cluster.Process {
		return cluster.Process{Rank: rank, Role: role, ID: id, Host: host, PID: pid}
	}
	procs := []cluster.Process{
		p(0, cluster.RoleServer, 0, "a", 100), p(0, cluster.RoleEvaluator, 0, "a", 100),
		p(1, cluster.RoleLearner, 0, "a", 101), p(2, cluster.RoleLearner, 1, "b", 100), p(3, cluster.RoleLearner, 2, "b", 102),
	}
	got := processesOf(procs)
	want := []reportProcess{
		{Rank: 0, Host: "a", PID: 100, Roles: []string{"server", "evaluator"}, Servers: []int{0}, Learners: []int{}},
		{Rank: 1, Host: "a", PID: 101, Roles: []string{"learner"}, Servers: []int{}, Learners: []int{0}},
		{Rank: 2, Host: "b", PID: 100, Roles: []string{"learner"}, Servers: []int{}, Learners: []int{1}},
		{Rank: 3, Host: "b", PID: 102, Roles: []string{"learner"}, Servers: []int{}, Learners: []int{2}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("processes\n%v, want\n%v", got, want)
	}
	text := func(procs []cluster.Process) string {
		var b bytes.Buffer
		(&trainReport{Processes: processesOf(procs)}).writeText(&b)
		return b.String()
	}
	if out := text(procs); !strings.Contains(out, "4 processes on 2 hosts;") {
		t.Errorf("summary:\n%s", out)
	}
	restarted := append(procs, p(3, cluster.RoleLearner, 2, "b", 103))
	if out := text(restarted); !strings.Contains(out, "5 processes on 2 hosts;") {
		t.Errorf("with a restarted learner, summary:\n%s", out)
	}
	one := []cluster.Process{p(-1, cluster.RoleServer, 0, "localhost", 7), p(-1, cluster.RoleEvaluator, 0, "localhost", 7),
		p(-1, cluster.RoleLearner, 1, "localhost", 7), p(-1, cluster.RoleLearner, 0, "localhost", 7)}
	if got := processesOf(one); len(got) != 1 || fmt.Sprint(got[0].Roles) != "[server learner evaluator]" || fmt.Sprint(got[0].Learners) != "[0 1]" {
		t.Errorf("one process: %v", got)
	}
	if out := text(one); !strings.Contains(out, "1 process on 1 host;") {
		t.Errorf("one process, summary:\n%s", out)
	}
}
