package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/learner/nn"
)

// runWithMemory runs softsync with args as on a host with avail bytes
// available, and returns its output and error.
func runWithMemory(avail int64, args ...string) (string, error) {
	var out bytes.Buffer
	root := newRoot(&App{Out: &out, MemoryAvailable: func() (int64, string, error) { return avail, "the test's figure", nil }})
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// TestMemoryCheck: a job whose memory plan exceeds what the host has
// available is refused before it starts, naming the need and the
// figure; --skip-memory-check starts it anyway, --memory-plan prints the
// plan and stops, and the report carries the plan.
func TestMemoryCheck(t *testing.T) {
	job := []string{"train", "--model", "mlp", "--data", "synthetic", "--train-subset", "64", "--test-subset", "32", "--batch", "8",
		"--epochs", "1", "--quiet"}
	_, err := runWithMemory(1<<20, job...)
	if !errors.Is(err, cluster.ErrNoMemory) {
		t.Fatalf("on a host with 1 MiB: %v, want ErrNoMemory", err)
	}
	for _, want := range []string{"the job needs ", "has 1 MiB available (the test's figure)", "--skip-memory-check", "one process "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	report := filepath.Join(t.TempDir(), "run.json")
	if _, err := runWithMemory(1<<20, append(job, "--skip-memory-check", "--json", report)...); err != nil {
		t.Fatalf("--skip-memory-check: %v", err)
	}
	r := readReport(t, report)
	m, ok := r["memory"].(map[string]any)
	if !ok || m["bytes"].(float64) <= 1<<20 || m["available_source"] != "the test's figure" || len(m["processes"].([]any)) != 1 {
		t.Errorf("the report's memory: %v", r["memory"])
	}
	out, err := runWithMemory(64<<30, append(job, "--memory-plan")...)
	if err != nil {
		t.Fatalf("--memory-plan: %v", err)
	}
	for _, want := range []string{"memory plan", "one process", "learners' networks", "this host", "64.0 GiB available (the test's figure)"} {
		if !strings.Contains(out, want) {
			t.Errorf("--memory-plan's output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "test error") {
		t.Errorf("--memory-plan trained:\n%s", out)
	}
}

// TestHugeNetworkRefused: a network whose weights or activations cannot
// be allocated is an error naming the file, the line, the layer and the
// bytes, not a crash of the Go runtime.
func TestHugeNetworkRefused(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, spec string
		args       []string
		want       string
		is         error
	}{
		{"weights.net", "input channels=1 height=28 width=28\nfc fc1 out=2000000000\nfc fc2 out=10\nsoftmax\n", nil,
			"weights.net:2: fc: fc1: 1,568,000,000,000 weights (5.7 TiB)", nil},
		// One worker: the 16 images' output of c1 is one tensor.
		{"activations.net", wideConv, []string{"--threads", "1"},
			"activations.net:2: conv c1: its output for 16 images holds 3,288,334,336 values (12.2 GiB)", nn.ErrTooLarge},
		// Two workers of an image at a time: within the tensors' limit, beyond the host.
		{"memory.net", wideConv, []string{"--threads", "2"},
			"the network's largest buffer is 784 MiB, the output of conv c1 (" + filepath.Join(dir, "memory.net") + ":2)", cluster.ErrNoMemory},
	} {
		p := filepath.Join(dir, c.name)
		if err := os.WriteFile(p, []byte(c.spec), 0o644); err != nil {
			t.Fatal(err)
		}
		args := append([]string{"train", "--model", p, "--data", "synthetic", "--train-subset", "16", "--test-subset", "16", "--batch", "16", "--quiet"}, c.args...)
		_, err := runWithMemory(64<<30, args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
		}
		if c.is != nil && !errors.Is(err, c.is) {
			t.Errorf("%s: %v, want %v", c.name, err, c.is)
		}
	}
}

// wideConv is a network whose first convolution's output is 784 MiB an
// image.
const wideConv = "input channels=3 height=224 width=224\nconv c1 out=4096 kernel=3 pad=1\npool p1 mode=avg global=true\nfc fc2 out=10\nsoftmax\n"

// TestAvailableMemory: the memory a process may take is MemAvailable, or
// less where its cgroup (v2, or v1's memory controller), or one above
// it, limits it, named in the figure's source.
func TestAvailableMemory(t *testing.T) {
	root := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("proc/meminfo", "MemTotal:       24000000 kB\nMemFree:         1000 kB\nMemAvailable:   20000000 kB\n")
	write("proc/self/cgroup", "0::/user/job\n")
	got, where, err := availableMemory(root)
	if err != nil || got != 20000000*1024 || where != "MemAvailable in /proc/meminfo" {
		t.Fatalf("no cgroup files: %d, %q, %v", got, where, err)
	}
	write("sys/fs/cgroup/user/job/memory.max", "max\n")
	write("sys/fs/cgroup/user/memory.max", "4294967296\n")
	write("sys/fs/cgroup/user/memory.current", "1073741824\n")
	if got, where, err = availableMemory(root); err != nil || got != 3<<30 || where != "memory.max of cgroup /user less its usage" {
		t.Errorf("cgroup v2, a limit above: %d, %q, %v", got, where, err)
	}
	write("proc/self/cgroup", "12:cpu,cpuacct:/x\n4:memory:/batch\n")
	write("sys/fs/cgroup/memory/batch/memory.limit_in_bytes", "2147483648\n")
	write("sys/fs/cgroup/memory/batch/memory.usage_in_bytes", "536870912\n")
	write("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n")
	if got, where, err = availableMemory(root); err != nil || got != 3<<29 || where != "memory.limit_in_bytes of cgroup /batch less its usage" {
		t.Errorf("cgroup v1: %d, %q, %v", got, where, err)
	}
	write("proc/meminfo", "MemTotal: 1 kB\n")
	if _, _, err := availableMemory(root); err == nil || !strings.Contains(err.Error(), "MemAvailable") {
		t.Errorf("no MemAvailable: %v", err)
	}
}
