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
