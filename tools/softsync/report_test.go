package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/softsync/softsync/learner/cluster"
)

// TestReportProcesses: the summary counts the report's processes and
// their hosts.
func TestReportProcesses(t *testing.T) {
	p := func(host string, pid int) cluster.ReportProcess { return cluster.ReportProcess{Host: host, PID: pid} }
	for _, c := range []struct {
		procs []cluster.ReportProcess
		want  string
	}{
		{[]cluster.ReportProcess{p("a", 100), p("a", 101), p("b", 100), p("b", 102)}, "4 processes on 2 hosts;"},
		{[]cluster.ReportProcess{p("a", 100), p("a", 101), p("b", 100), p("b", 102), p("b", 103)}, "5 processes on 2 hosts;"},
		{[]cluster.ReportProcess{p("localhost", 7)}, "1 process on 1 host;"},
	} {
		var b bytes.Buffer
		writeText(&b, &cluster.Report{Processes: c.procs})
		if !strings.Contains(b.String(), c.want) {
			t.Errorf("%d processes: summary\n%s\nwant %q", len(c.procs), b.String(), c.want)
		}
	}
}

// TestReportCheckpoints: the summary tells the checkpoints written and
// those that failed, with the last failure; nothing without checkpoints.
func TestReportCheckpoints(t *testing.T) {
	for _, c := range []struct {
		r    cluster.Report
		want string
	}{
		{cluster.Report{}, ""},
		{cluster.Report{CheckpointsWritten: 4}, "checkpoints 4 written"},
		{cluster.Report{CheckpointsWritten: 1, CheckpointFailures: cluster.ReportCheckpointFailures{Count: 2, LastVersion: 3, LastEpoch: 0.9,
			LastSeconds: 6.4, LastError: "checkpoint 3: shard server 0: write v00000003/.shard-00000.ckpt.tmp: no space left on device"}},
			"checkpoints 1 written, 2 FAILED (the last, version 3 of epoch 0.90, at 6.4s: checkpoint 3: shard server 0: write v00000003/.shard-00000.ckpt.tmp: no space left on device)"},
	} {
		var b bytes.Buffer
		writeText(&b, &c.r)
		_, line, _ := strings.Cut(b.String(), "\ncheckpoints")
		if line != "" {
			line = strings.Join(strings.Fields("checkpoints"+line), " ")
		}
		if line != c.want {
			t.Errorf("summary\n%s\nwant its last line %q", b.String(), c.want)
		}
	}
}
