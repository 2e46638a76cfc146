package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// withUmask runs f with the process's umask set to mask, so that a file
// created with too wide a mode shows it.
func withUmask(mask int, f func()) {
	old := syscall.Umask(mask)
	defer syscall.Umask(old)
	f()
}

// checkSecretMode fails unless path is a regular file readable and
// writable by its owner only.
func checkSecretMode(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v, want a regular file of mode 0600", path, fi.Mode())
	}
}

// TestWriteSecretFile: a secret file is created with mode 0600 whatever
// the umask; an existing file, a symbolic link (to a file or dangling)
// and a link to a folder are refused and left as they were.
func TestWriteSecretFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "job.secret")
	withUmask(0, func() {
		if err := writeSecretFile(path, []byte("0123456789abcdef")); err != nil {
			t.Fatal(err)
		}
	})
	checkSecretMode(t, path)
	if b, _ := os.ReadFile(path); string(b) != "0123456789abcdef" {
		t.Errorf("the file holds %q", b)
	}

	old := filepath.Join(dir, "old.secret")
	if err := os.WriteFile(old, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("target"), 0o644); err != nil {
		t.Fatal(err)
	}
	link, dangling := filepath.Join(dir, "link.secret"), filepath.Join(dir, "dangling.secret")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "nothing"), dangling); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{old, link, dangling} {
		err := writeSecretFile(p, []byte("new secret, 16 bytes or more"))
		if !errors.Is(err, fs.ErrExist) {
			t.Errorf("%s: %v, want an error that is fs.ErrExist", p, err)
		}
	}
	for p, want := range map[string]string{old: "old", target: "target"} {
		if b, _ := os.ReadFile(p); string(b) != want {
			t.Errorf("%s now holds %q, want %q untouched", p, b, want)
		}
	}
	if fi, _ := os.Stat(old); fi.Mode().Perm() != 0o644 {
		t.Errorf("%s: mode %v changed", old, fi.Mode())
	}
	if _, err := os.Lstat(filepath.Join(dir, "nothing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the dangling link's target was created: %v", err)
	}
}

// TestWriteRendezvous: the rendezvous file, which holds the job's
// secret, is 0600 whatever the umask, and neither a file nor a symbolic
// link planted where a temporary file of this process could be named
// changes that or gets written through.
func TestWriteRendezvous(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "softsync-test.json")
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("target"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The names a temporary file beside path could take if it were
	// derived from the process id.
	planted := path + ".tmp" + strconv.Itoa(os.Getpid())
	if err := os.Symlink(target, planted); err != nil {
		t.Fatal(err)
	}
	withUmask(0, func() {
		if err := writeRendezvous(path, rendezvousFile{Coordinator: "127.0.0.1:1", Secret: "c2VjcmV0"}); err != nil {
			t.Fatal(err)
		}
	})
	checkSecretMode(t, path)
	if b, _ := os.ReadFile(target); string(b) != "target" {
		t.Errorf("the planted link's target now holds %q", b)
	}
	// Again over the first file, with a world-readable file planted.
	os.Remove(planted)
	if err := os.WriteFile(planted, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	withUmask(0, func() {
		if err := writeRendezvous(path, rendezvousFile{Coordinator: "127.0.0.1:2", Secret: "c2VjcmV0"}); err != nil {
			t.Fatal(err)
		}
	})
	checkSecretMode(t, path)
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), "127.0.0.1:2") {
		t.Errorf("the rendezvous file holds %s", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 { // path, target, planted: no temporary file left
		t.Errorf("files left: %v", entries)
	}
}

// evalArgs is a head (softsync eval) that gives up at once at
// rendezvous, on a small synthetic data set.
func evalArgs(t *testing.T, more ...string) []string {
	return append([]string{"eval", "--model", "mlp", "--data", idxFolder(t, 64, 16), "--batch", "8", "--epochs", "1",
		"--quiet", "--rendezvous-timeout", "1s"}, more...)
}

// TestEvalSecretFile: softsync eval without a secret writes the one it
// makes next to --json (in the current folder without --json), mode 0600,
// and refuses to replace a file already there, naming it.
func TestEvalSecretFile(t *testing.T) {
	t.Chdir(t.TempDir())
	out := t.TempDir()
	t.Setenv(secretEnv, "")
	_, err := runErr(evalArgs(t, "--json", filepath.Join(out, "run.json"))...)
	if err == nil || !strings.Contains(err.Error(), "rendezvous") {
		t.Fatalf("eval alone: %v, want a failed rendezvous", err)
	}
	path := filepath.Join(out, "softsync.secret")
	checkSecretMode(t, path)
	if b, _ := os.ReadFile(path); len(b) < minSecret {
		t.Errorf("%s holds %d bytes", path, len(b))
	}
	if _, err := os.Lstat("softsync.secret"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a secret was written in the current folder too: %v", err)
	}

	// Without --json: the current folder. A second head there is refused.
	if _, err := runErr(evalArgs(t)...); err == nil || !strings.Contains(err.Error(), "rendezvous") {
		t.Fatalf("eval alone: %v, want a failed rendezvous", err)
	}
	checkSecretMode(t, "softsync.secret")
	before, _ := os.ReadFile("softsync.secret")
	_, err = runErr(evalArgs(t)...)
	if err == nil || !strings.Contains(err.Error(), "softsync.secret") || !strings.Contains(err.Error(), "--secret-file") {
		t.Errorf("eval over an existing secret file: %v, want a refusal naming the file and --secret-file", err)
	}
	if after, _ := os.ReadFile("softsync.secret"); string(after) != string(before) {
		t.Error("the existing secret file was overwritten")
	}
}

// TestNoSecretFileTracked: no file of the repository is a secret (*.secret,
// which .gitignore keeps out); without git, none lies in the tree.
func TestNoSecretFileTracked(t *testing.T) {
	root := filepath.Join("..", "..")
	var found []string
	if out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--", "*.secret", ":(glob)**/*.secret").Output(); err == nil {
		for _, f := range strings.Split(string(out), "\x00") {
			if f != "" {
				found = append(found, f)
			}
		}
	} else {
		t.Logf("git ls-files: %v; looking through the tree instead", err)
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() && d.Name() == ".git" {
				return filepath.SkipDir
			}
			if err == nil && strings.HasSuffix(p, ".secret") {
				found = append(found, p)
			}
			return nil
		})
	}
	if len(found) > 0 {
		t.Errorf("secret files in the repository: %v (git rm them; .gitignore has *.secret)", found)
	}
}

// setRank0 makes this process rank 0 of a job of three under Open MPI.
func setRank0(t *testing.T) {
	for _, kv := range openMPIRank(0, 3) {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// TestClusterCoordinatorNeedsSecret: a rank of train --cluster auto
// --coordinator (loopback included) without a secret refuses to start,
// before it reads the data, and says how to give one; with
// $SOFTSYNC_SECRET, or with --insecure, it runs (and gives up at
// rendezvous: the other ranks never come).
func TestClusterCoordinatorNeedsSecret(t *testing.T) {
	setRank0(t)
	t.Setenv(secretEnv, "")
	dir := t.TempDir()
	report := filepath.Join(dir, "r.json")
	job := append([]string{"train", "--cluster", "auto", "--coordinator", "127.0.0.1:0", "--rendezvous-timeout", "1s"}, clusterJob("mlp", report)...)
	for _, args := range [][]string{job, slices.Concat(job, []string{"--data", filepath.Join(dir, "no-data")})} {
		_, err := runErrWithin(t, time.Minute, args...)
		if err == nil || !strings.Contains(err.Error(), "--secret-file") || !strings.Contains(err.Error(), secretEnv) || !strings.Contains(err.Error(), "--insecure") {
			t.Errorf("--coordinator on loopback without a secret: %v, want a refusal naming --secret-file, $%s and --insecure", err, secretEnv)
		}
	}
	_, err := runErrWithin(t, time.Minute, append(job, "--insecure")...)
	if err == nil || !strings.Contains(err.Error(), "rendezvous") {
		t.Errorf("with --insecure: %v, want the job to run until its rendezvous fails", err)
	}
	t.Setenv(secretEnv, string(newSecret()))
	_, err = runErrWithin(t, time.Minute, job...)
	if err == nil || !strings.Contains(err.Error(), "rendezvous") {
		t.Errorf("with $%s: %v, want the job to run until its rendezvous fails", secretEnv, err)
	}
}

// jobSecretFile writes a new secret to dir/job.secret and returns its path.
func jobSecretFile(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "job.secret")
	if err := writeSecretFile(path, newSecret()); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestClusterLaunchSecret: launch takes the job's secret from
// --secret-file after -- (which its processes are given too) or from
// $SOFTSYNC_SECRET, and the job completes.
func TestClusterLaunchSecret(t *testing.T) {
	multiProcess(t)
	dir := t.TempDir()
	file := jobSecretFile(t, dir)
	t.Run("secret-file", func(t *testing.T) {
		report := filepath.Join(dir, "file.json")
		j, _ := startLaunch(t, append([]string{"-n", "1", "--"}, clusterJob("mlp", report, "--secret-file", file, "--rendezvous-timeout", "30s")...)...)
		if res := j.Wait(); res.ExitCode != 0 {
			t.Fatalf("launch -- --secret-file: %s", res)
		}
		checkClusterReport(t, report, 3, 1, 1)
	})
	t.Run("environment", func(t *testing.T) {
		report := filepath.Join(dir, "env.json")
		t.Setenv(secretEnv, string(newSecret()))
		j, _ := startLaunch(t, append([]string{"-n", "1", "--"}, clusterJob("mlp", report, "--rendezvous-timeout", "30s")...)...)
		if res := j.Wait(); res.ExitCode != 0 {
			t.Fatalf("launch with $%s: %s", secretEnv, res)
		}
		checkClusterReport(t, report, 3, 1, 1)
	})
}

// TestReadRendezvousCancelled: a rank waiting for rank 0's rendezvous
// file stops waiting when its context ends (a signal), long before the
// rendezvous timeout.
func TestReadRendezvousCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := readRendezvous(ctx, filepath.Join(t.TempDir(), "never.json"), time.Hour, func() {})
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("readRendezvous: %v, want context.Canceled", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("readRendezvous still waits a minute after its context ended")
	}
}

// TestLocateRendezvous: the ranks of a job find its coordinator where
// the rendezvous file says, while its writer lives (or is on another
// host); a head restarted with eval --rendezvous-file takes the job's
// secret from it.
func TestLocateRendezvous(t *testing.T) {
	path := filepath.Join(t.TempDir(), "softsync-test.json")
	if got := locateRendezvous(path); got != "" {
		t.Errorf("no file: %q", got)
	}
	host, _ := os.Hostname()
	write := func(r rendezvousFile) {
		t.Helper()
		if err := writeRendezvous(path, r); err != nil {
			t.Fatal(err)
		}
	}
	write(rendezvousFile{Coordinator: "127.0.0.1:7", Secret: "c2VjcmV0", Host: host, PID: os.Getpid()})
	if got := locateRendezvous(path); got != "127.0.0.1:7" {
		t.Errorf("a live writer's file: %q", got)
	}
	if s, err := secretOf(path); err != nil || string(s) != "secret" {
		t.Errorf("secretOf: %q, %v", s, err)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	write(rendezvousFile{Coordinator: "127.0.0.1:8", Secret: "c2VjcmV0", Host: host, PID: dead.Process.Pid})
	if got := locateRendezvous(path); got != "" {
		t.Errorf("a dead writer's file: %q", got)
	}
	write(rendezvousFile{Coordinator: "10.0.0.1:9", Secret: "c2VjcmV0", Host: "elsewhere", PID: dead.Process.Pid})
	if got := locateRendezvous(path); got != "10.0.0.1:9" {
		t.Errorf("another host's file: %q", got)
	}
	if s, err := secretOf(filepath.Join(t.TempDir(), "none")); s != nil || err != nil {
		t.Errorf("secretOf without a file: %q, %v", s, err)
	}
}
