package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// secretEnv forwards a job's secret to its processes: launch sets it for
// the processes it starts; with mpirun, `-x SOFTSYNC_SECRET` forwards it.
const secretEnv = "SOFTSYNC_SECRET"

// minSecret is the shortest secret softsync accepts (rdma.Options.Secret).
const minSecret = 16

// loadSecret returns the job's secret from --secret-file or
// $SOFTSYNC_SECRET, or nil if neither is set. A secret file readable by
// group or others is refused.
func loadSecret(file string) ([]byte, error) {
	if file != "" {
		fi, err := os.Stat(file)
		if err != nil {
			return nil, fmt.Errorf("--secret-file: %w", err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("--secret-file %s: readable by group or others (mode %#o): chmod 600 %[1]s", file, fi.Mode().Perm())
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--secret-file: %w", err)
		}
		b = bytes.TrimSpace(b)
		if len(b) < minSecret {
			return nil, fmt.Errorf("--secret-file %s: %d bytes, want at least %d (e.g. openssl rand -hex 32 > %[1]s)", file, len(b), minSecret)
		}
		return b, nil
	}
	if v := os.Getenv(secretEnv); v != "" {
		if len(v) < minSecret {
			return nil, fmt.Errorf("$%s: %d bytes, want at least %d (e.g. export %[1]s=$(openssl rand -hex 32))", secretEnv, len(v), minSecret)
		}
		return []byte(v), nil
	}
	return nil, nil
}

// newSecret returns a fresh random secret (hex, so that it can travel in
// an environment variable).
func newSecret() []byte {
	b := make([]byte, 32)
	rand.Read(b)
	return fmt.Appendf(nil, "%x", b)
}

// rendezvousFile is what the coordinator's process writes for the others
// of a job: where the coordinator listens, and the job's secret.
type rendezvousFile struct {
	Coordinator string `json:"coordinator"`
	Secret      string `json:"secret"` // base64
	Host        string `json:"host"`
	PID         int    `json:"pid"`
}

// locateRendezvous returns the coordinator's address in the rendezvous
// file path, if the file is there and its writer alive (or on another
// host); "" otherwise.
func locateRendezvous(path string) string {
	var r rendezvousFile
	b, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(b, &r) != nil {
		return ""
	}
	if host, _ := os.Hostname(); r.Host == host && !alive(r.PID) {
		return ""
	}
	return r.Coordinator
}

// secretOf returns the job's secret that the rendezvous file path holds,
// nil without one.
func secretOf(path string) ([]byte, error) {
	var r rendezvousFile
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("--rendezvous-file: %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("--rendezvous-file %s: %w", path, err)
	}
	secret, err := base64.StdEncoding.DecodeString(r.Secret)
	if err != nil {
		return nil, fmt.Errorf("--rendezvous-file %s: bad secret: %w", path, err)
	}
	return secret, nil
}

// writeSecretFile creates the file path holding b, readable and
// writable by its owner only (mode 0600). It never replaces a file nor
// follows a symbolic link: when anything exists at path, the error is
// fs.ErrExist. Every file softsync writes that holds a secret is written
// with it.
func writeSecretFile(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}

// writeRendezvous writes r to path atomically: a secret file of a random
// name beside it (writeSecretFile), renamed to path.
func writeRendezvous(path string, r rendezvousFile) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	var suffix [8]byte
	rand.Read(suffix[:])
	tmp := fmt.Sprintf("%s.tmp-%x", path, suffix)
	if err := writeSecretFile(tmp, b); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// readRendezvous waits for the rendezvous file at path, written by a
// coordinator whose process is alive when it is on this host, until
// timeout or until ctx ends; log is called every few seconds while it
// waits.
func readRendezvous(ctx context.Context, path string, timeout time.Duration, log func()) (rendezvousFile, []byte, error) {
	host, _ := os.Hostname()
	deadline, last := time.Now().Add(timeout), time.Now()
	for {
		var r rendezvousFile
		b, err := os.ReadFile(path)
		if err == nil && json.Unmarshal(b, &r) == nil && r.Coordinator != "" && (r.Host != host || alive(r.PID)) {
			secret, err := base64.StdEncoding.DecodeString(r.Secret)
			if err != nil {
				return r, nil, fmt.Errorf("rendezvous file %s: bad secret: %w", path, err)
			}
			return r, secret, nil
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return r, nil, fmt.Errorf("rendezvous file: %w", err)
		}
		if time.Now().After(deadline) {
			return r, nil, fmt.Errorf("rendezvous: no coordinator wrote %s within %v: is rank 0 running, with the same flags?", path, timeout)
		}
		if time.Since(last) > 5*time.Second {
			log()
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return r, nil, fmt.Errorf("rendezvous: waiting for %s: %w", path, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// alive reports whether process pid exists on this host.
func alive(pid int) bool {
	_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
	return err == nil
}

// localRendezvousDir is the folder of this host's rendezvous files,
// private to the user.
func localRendezvousDir() (string, error) {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("softsync-%d", os.Getuid()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return "", err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("rendezvous folder %s is open to group or others (mode %#o): chmod 700 %[1]s", dir, fi.Mode().Perm())
	}
	return dir, nil
}
