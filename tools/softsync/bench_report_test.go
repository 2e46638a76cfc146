package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softsync/softsync/tools/bench"
)

// TestBenchReportDoc renders the results file of tools/bench's golden
// test into a page and a summary.
func TestBenchReportDoc(t *testing.T) {
	dir := t.TempDir()
	in, doc := filepath.Join(dir, "results.json"), filepath.Join(dir, "performance.md")
	b, err := os.ReadFile(filepath.Join("..", "bench", "testdata", "results.golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(in, b, 0o644)
	page := "# Performance\n\nKept above.\n\n" + bench.MarkBegin + " -->\n" + bench.MarkEnd + " -->\n\nKept below.\n"
	os.WriteFile(doc, []byte(page), 0o644)
	run(t, "bench", "report", "--in", in, "--doc", doc, "--summary", filepath.Join(dir, "summary.md"))
	got, _ := os.ReadFile(doc)
	for _, want := range []string{"Kept above.", "Kept below.", "**Example CPU 9000 (virtual machine), AVX-512, 2 cores**",
		"### Training: softsync against PyTorch", "| 7,186 images/s | PyTorch 1.13 | 2,395 images/s | 3.00× |"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("page lacks %q:\n%s", want, got)
		}
	}
	want, _ := os.ReadFile(filepath.Join("..", "bench", "testdata", "summary.golden.md"))
	if s, _ := os.ReadFile(filepath.Join(dir, "summary.md")); len(want) == 0 || string(s) != string(want) {
		t.Errorf("summary.md:\n%s", s)
	}
}
