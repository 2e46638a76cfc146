package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/softsync/softsync/learner"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/checkpoint"
	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/errcode"
)

// wireTrip returns v as the peer receives it: its JSON, decoded as the
// coordinator decodes message t.
func wireTrip(t *testing.T, typ rdma.Type, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeCtrl(typ, b)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestFailureKeepsIdentity: a learner's failure, a shard's rejection as
// its client saw it, reaches the coordinator as JSON and fails the job
// with an error that matches every sentinel of the learner's (errors.Is)
// and prints its text; the stop the coordinator sends the other roles
// makes their error match them too.
func TestFailureKeepsIdentity(t *testing.T) {
	// What a learner's client makes of a shard's error reply.
	reply := rdma.NewErrorMsg(fmt.Errorf("ps shard 0: push from learner 1 (seq 5): %w: element 7 is +Inf", ps.ErrNonFinite))
	defer reply.Release()
	lerr := fmt.Errorf("learner 1 step 2: %w: %w", ps.ErrRejected, reply.Err())
	want := []error{ps.ErrNonFinite, ps.ErrRejected, rdma.ErrRemote}

	h := newHarness(t, CoordinatorConfig{Evaluator: true})
	j := h.startJob()
	rd := h.msg(j.lrn[1], tFail, wireTrip(t, tFail, failure{errcode.Encode(lerr)}))
	if !rd.done || rd.err == nil {
		t.Fatalf("the job did not fail: done %v, err %v", rd.done, rd.err)
	}
	for _, s := range append(want, ErrJobFailed) {
		if !errors.Is(rd.err, s) {
			t.Errorf("the job's error %q does not match %q", rd.err, s)
		}
	}
	if errors.Is(rd.err, ps.ErrDiverged) || errors.Is(rd.err, learner.ErrDiverged) || !strings.Contains(rd.err.Error(), lerr.Error()) {
		t.Errorf("the job's error %q: want the learner's text and no other sentinel", rd.err)
	}
	// The other roles' stop.
	for _, conn := range []connID{j.srv[0], j.srv[1], j.lrn[0], j.eval} {
		m := h.expect(conn, tStop)[0]
		b, err := json.Marshal(m.v)
		if err != nil {
			t.Fatal(err)
		}
		serr := stopErr(tStop, b)
		for _, s := range append(want, ErrJobFailed) {
			if !errors.Is(serr, s) {
				t.Errorf("connection %d: stopped with %q, which does not match %q", conn, serr, s)
			}
		}
		if serr.Error() != rd.err.Error() {
			t.Errorf("connection %d: stopped with %q, want the job's error %q (without another \"job failed\")", conn, serr, rd.err)
		}
	}
}

// TestCheckpointReportKeepsIdentity: a shard server's checkpoint
// failure reaches the coordinator with the identity of its cause.
func TestCheckpointReportKeepsIdentity(t *testing.T) {
	cause := fmt.Errorf("v00000003/shard-00001.ckpt: %w", checkpoint.ErrMismatch)
	got := wireTrip(t, tCheckpointed, ckptReport{Version: 3, Wire: errcode.Encode(cause)}).(*ckptReport)
	if err := got.Err(); got.Version != 3 || !errors.Is(err, checkpoint.ErrMismatch) || err.Error() != cause.Error() {
		t.Errorf("report %+v: error %v", got, err)
	}
	if ok := wireTrip(t, tCheckpointed, ckptReport{Version: 4}).(*ckptReport); ok.Err() != nil {
		t.Errorf("a report without an error decodes to %v", ok.Err())
	}
}

// TestErrorCodesDocumented: docs/wire.md lists every registered code
// with the sentinel's name, and nothing else; the codes of every
// package a job links are registered.
func TestErrorCodesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/wire.md")
	if err != nil {
		t.Fatal(err)
	}
	// Rows of the table: | `code` | `pkg.ErrName` | its text |
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9_.]+)` \\| `([A-Za-z.]+)` \\| (.*) \\|$")
	var documented []string
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		documented = append(documented, m[1])
		s, ok := errcode.Lookup(m[1])
		if !ok {
			t.Errorf("docs/wire.md lists %s (%s), which is not registered", m[1], m[2])
			continue
		}
		if want := sentinelName(m[1]); m[2] != want || m[3] != s.Error() {
			t.Errorf("docs/wire.md: %s is %s, %q; want %s, %q", m[1], m[2], m[3], want, s)
		}
	}
	registered := errcode.Registered()
	for _, c := range registered {
		if !slices.Contains(documented, c) {
			t.Errorf("%s is registered but not in docs/wire.md", c)
		}
	}
	for _, c := range []string{"rdma.closed", "param.invalid_config", "ps.non_finite", "checkpoint.partial", "learner.diverged", "data.end", "cluster.job_failed"} {
		if !slices.Contains(registered, c) {
			t.Errorf("%s is not registered", c)
		}
	}
}

// TestSentinelsRegistered: every sentinel a package of a job defines
// (an exported Err… = errors.New(…) of its sources) has a code, so that
// it keeps its identity when a peer reports it.
func TestSentinelsRegistered(t *testing.T) {
	named := map[string]bool{}
	for _, c := range errcode.Registered() {
		named[sentinelName(c)] = true
	}
	for dir, pkg := range map[string]string{"../../rdma": "rdma", "../../ps": "ps", "../../ps/param": "param", "../../ps/checkpoint": "checkpoint",
		"../../learner": "learner", "../../learner/data": "data", ".": "cluster"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: %v", dir, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range sentinels(file) {
				if !named[pkg+"."+name] {
					t.Errorf("%s: %s.%s has no code: register it (an errcodes.go beside it) and list it in docs/wire.md", f, pkg, name)
				}
			}
		}
	}
}

// sentinels returns the names of the exported variables Err… of file
// whose value is errors.New(…).
func sentinels(file *ast.File) []string {
	var names []string
	for _, d := range file.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.VAR {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !strings.HasPrefix(n.Name, "Err") || !n.IsExported() || i >= len(vs.Values) {
					continue
				}
				if call, ok := vs.Values[i].(*ast.CallExpr); ok {
					if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "New" && fmt.Sprint(sel.X) == "errors" {
						names = append(names, n.Name)
					}
				}
			}
		}
	}
	return names
}

// sentinelName is the Go name of the sentinel of code, as docs/wire.md
// spells it: ps.non_finite is ps.ErrNonFinite.
func sentinelName(code string) string {
	pkg, name, _ := strings.Cut(code, ".")
	var b strings.Builder
	b.WriteString(pkg + ".Err")
	for _, w := range strings.Split(name, "_") {
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	return b.String()
}
