package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The reference programs softsync bench all measures beside softsync:
// PyTorch's training step (bench/torch_train_throughput.py) and iperf3
// over loopback. A reference that cannot run is reported with the reason,
// never replaced by a figure of another run.

// torchResult is one line of torch_train_throughput.py's output.
type torchResult struct {
	Model        string  // softsync's name of the network: lenet or cifar10_full
	Batch        int     // images per step
	Threads      int     // torch.get_num_threads()
	ImagesPerSec float64 // wall clock
	ImagesPerCPU float64 // per second of the process's CPU time; 0 if not printed
}

// torchVersion and torchLine match the script's output: a first line
// "torch 1.13.1", then per network
// "lenet-mnist batch=64 threads=2 2345 images/s [1234 images/cpu-s]".
var (
	torchVersion = regexp.MustCompile(`^torch (\S+)$`)
	torchLine    = regexp.MustCompile(`^(\S+) batch=(\d+) threads=(\d+) ([0-9.]+) images/s(?: ([0-9.]+) images/cpu-s)?$`)
)

// torchModels maps the script's network names to softsync's.
var torchModels = map[string]string{"lenet-mnist": "lenet", "lenet": "lenet", "cifar10_full": "cifar10_full"}

// parseTorch reads the script's output: the PyTorch version ("" if not
// printed) and one result per network.
func parseTorch(out []byte) (version string, res []torchResult, err error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if m := torchVersion.FindStringSubmatch(line); m != nil {
			version = m[1]
			continue
		}
		m := torchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		model, ok := torchModels[m[1]]
		if !ok {
			model = m[1]
		}
		r := torchResult{Model: model}
		r.Batch, _ = strconv.Atoi(m[2])
		r.Threads, _ = strconv.Atoi(m[3])
		r.ImagesPerSec, _ = strconv.ParseFloat(m[4], 64)
		if m[5] != "" {
			r.ImagesPerCPU, _ = strconv.ParseFloat(m[5], 64)
		}
		res = append(res, r)
	}
	if len(res) == 0 {
		return version, nil, fmt.Errorf("no result lines in the output of the PyTorch script: %q", tail(out, 400))
	}
	return version, res, nil
}

// torchConfig says how to run the PyTorch reference.
type torchConfig struct {
	Python  string // interpreter
	Script  string // path of torch_train_throughput.py
	Seconds float64
	// CoreType is the OPENBLAS_CORETYPE PyTorch's OpenBLAS is loaded
	// with: the core softsync uses, so that both run the same GEMMs.
	CoreType string
}

// runTorch runs the script on threads threads for the networks given as
// model → batches, and returns its version and results.
func runTorch(ctx context.Context, cfg torchConfig, threads int, nets [][2]string) (string, []torchResult, error) {
	if _, err := os.Stat(cfg.Script); err != nil {
		return "", nil, fmt.Errorf("PyTorch script: %w", err)
	}
	var list []string
	for _, n := range nets {
		list = append(list, n[0]+":"+n[1])
	}
	args := []string{cfg.Script, strconv.Itoa(threads), "--nets", strings.Join(list, ","),
		"--seconds", strconv.FormatFloat(cfg.Seconds, 'g', -1, 64)}
	cmd := exec.CommandContext(ctx, cfg.Python, args...)
	n := strconv.Itoa(threads)
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS="+n, "OPENBLAS_NUM_THREADS="+n)
	if cfg.CoreType != "" {
		cmd.Env = append(cmd.Env, "OPENBLAS_CORETYPE="+cfg.CoreType)
	}
	out, err := scriptOutput(cmd)
	if err != nil {
		return "", nil, err
	}
	return parseTorch(out)
}

// scriptOutput runs a reference script and returns its output; a failure
// names the command and ends with the tail of its standard error.
func scriptOutput(cmd *exec.Cmd) ([]byte, error) {
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) || errors.Is(err, exec.ErrNotFound) {
			return nil, fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, tail(stderr.Bytes(), 300))
		}
		return nil, err
	}
	return out, nil
}

// iperfResult is what parseIperf keeps of iperf3 -J's report.
type iperfResult struct {
	Version string
	// GBps is the bytes the receiver got per second (1e9 bytes),
	// BufBytes the size of the buffer iperf3 sends from.
	GBps     float64
	Seconds  float64
	BufBytes int
}

// parseIperf reads the JSON report of an iperf3 -J client.
func parseIperf(out []byte) (iperfResult, error) {
	var rep struct {
		Start struct {
			Version   string `json:"version"`
			TestStart struct {
				BlkSize int `json:"blksize"`
			} `json:"test_start"`
		} `json:"start"`
		End struct {
			SumReceived struct {
				Seconds       float64 `json:"seconds"`
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return iperfResult{}, fmt.Errorf("iperf3 report: %w", err)
	}
	if rep.Error != "" {
		return iperfResult{}, fmt.Errorf("iperf3: %s", rep.Error)
	}
	r := iperfResult{Version: rep.Start.Version, GBps: rep.End.SumReceived.BitsPerSecond / 8e9,
		Seconds: rep.End.SumReceived.Seconds, BufBytes: rep.Start.TestStart.BlkSize}
	if r.GBps <= 0 {
		return r, errors.New("iperf3 report: no received bytes")
	}
	return r, nil
}

// runIperf measures one TCP stream over loopback for the given time: a
// one-shot server (iperf3 -s -1) and a client (iperf3 -c 127.0.0.1 -J).
func runIperf(ctx context.Context, seconds int) (iperfResult, error) {
	path, err := exec.LookPath("iperf3")
	if err != nil {
		return iperfResult{}, fmt.Errorf("iperf3 is not installed (Debian package iperf3, make deps-bench): %w", err)
	}
	port, err := freePort()
	if err != nil {
		return iperfResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(seconds+30)*time.Second)
	defer cancel()
	srv := exec.CommandContext(ctx, path, "-s", "-1", "-B", "127.0.0.1", "-p", port)
	if err := srv.Start(); err != nil {
		return iperfResult{}, fmt.Errorf("iperf3 server: %w", err)
	}
	defer func() { cancel(); srv.Wait() }()
	for try := 0; ; try++ { // until the server listens
		out, _ := exec.CommandContext(ctx, path, "-c", "127.0.0.1", "-p", port, "-J", "-t", strconv.Itoa(seconds)).Output()
		res, err := parseIperf(out)
		if err == nil || try == 50 || !strings.Contains(err.Error(), "connect") {
			return res, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freePort returns a TCP port of the loopback interface that was free a
// moment ago.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}

// tail returns the last n bytes of b as a trimmed string.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}
