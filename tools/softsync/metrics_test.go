package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/rdma/transporttest"
)

// scrape is one scrape of a metrics endpoint, parsed.
type scrape map[string]*dto.MetricFamily

// scrapeMetrics fetches and parses http://addr/metrics.
func scrapeMetrics(addr string) (scrape, error) {
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	return p.TextToMetricFamilies(resp.Body)
}

// get returns the value of the sample of name whose labels include every
// "label=value" of labels (a histogram's count); ok is false if there is
// none.
func (s scrape) get(name string, labels ...string) (v float64, ok bool) {
	f := s[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		for _, l := range labels {
			k, want, _ := strings.Cut(l, "=")
			if !slices.ContainsFunc(m.Label, func(p *dto.LabelPair) bool { return p.GetName() == k && p.GetValue() == want }) {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// positive reports whether every sample named holds a value > 0.
func (s scrape) positive(samples ...[]string) bool {
	for _, x := range samples {
		if v, ok := s.get(x[0], x[1:]...); !ok || !(v > 0) {
			return false
		}
	}
	return true
}

// pollMetrics scrapes addr until done accepts a scrape, and returns it.
func pollMetrics(t *testing.T, addr string, what string, done func(scrape) bool) scrape {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		s, err := scrapeMetrics(addr)
		if err == nil && done(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no scrape of %s showed %s (last error %v)", t.Name(), addr, what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkNames checks that every metric but the Go runtime's and the
// process's is softsync's.
func checkNames(t *testing.T, s scrape) {
	t.Helper()
	for name := range s {
		if !strings.HasPrefix(name, "softsync_") && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			t.Errorf("metric %s is not named softsync_…", name)
		}
	}
}

// TestMetricsTrain scrapes softsync train --metrics while the job runs:
// every role's metrics appear with their labels and grow; the job, long
// enough to be scraped, is then interrupted (SIGINT, as Ctrl-C), and the
// endpoint is closed when the command returns.
func TestMetricsTrain(t *testing.T) {
	addrs := make(chan string, 1)
	metricsListening = func(addr string) { addrs <- addr }
	defer func() { metricsListening = nil }()
	done := make(chan error, 1)
	go func() {
		_, err := runErr("train", "--model", "mlp", "--epochs", "100000", "--train-subset", "256", "--test-subset", "100",
			"--batch", "16", "--learners", "2", "--shards", "2", "--protocol", "softsync", "--quiet", "--metrics", "127.0.0.1:0")
		done <- err
	}()
	var addr string
	select {
	case addr = <-addrs:
	case err := <-done:
		t.Fatalf("train ended before it served metrics: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("train served no metrics within a minute")
	}
	ended := false
	defer func() { // a failed test interrupts the job, if it still runs
		select {
		case <-done:
		default:
			if !ended {
				syscall.Kill(os.Getpid(), syscall.SIGINT)
				transporttest.Receive(t, done, time.Minute, "train to return after SIGINT")
			}
		}
	}()
	first := pollMetrics(t, addr, "every role at work", func(s scrape) bool {
		return s.positive(
			[]string{"softsync_learner_steps_total", "learner=0"}, []string{"softsync_learner_steps_total", "learner=1"},
			[]string{"softsync_images_per_second", "learner=0"}, []string{"softsync_images_per_second", "learner=1"},
			[]string{"softsync_gradients_total", "shard=0", "outcome=accepted"}, []string{"softsync_gradients_total", "shard=1", "outcome=accepted"},
			[]string{"softsync_updates_total", "shard=0"}, []string{"softsync_updates_total", "shard=1"},
			[]string{"softsync_staleness", "shard=0"},
			[]string{"softsync_bytes_total", "learner=0", "codec=none", "direction=sent"},
			[]string{"softsync_raw_bytes_total", "learner=1", "codec=none", "direction=received"},
			[]string{"softsync_job_steps_total"}, []string{"softsync_job_last_epoch"}, []string{"softsync_job_test_error"})
	})
	checkNames(t, first)
	for role, want := range map[string]float64{"coordinator": 1, "evaluator": 1, "server": 1, "learner": 2} {
		if v, _ := first.get("softsync_roles", "role="+role); v != want {
			t.Errorf("softsync_roles{role=%q} = %v, want %v", role, v, want)
		}
	}
	for _, r := range []string{"wrong_job", "wrong_shard", "unknown_learner", "bad_type", "bad_length", "future_clock", "non_finite", "already_pushed", "diverged"} {
		if _, ok := first.get("softsync_rejected_total", "shard=1", "reason="+r); !ok {
			t.Errorf("no softsync_rejected_total{reason=%q}", r)
		}
	}
	for _, m := range [][]string{{"softsync_refused_updates_total", "shard=0"}, {"softsync_refused_gradients_total", "shard=1", "learner=1"},
		{"softsync_pulled_bytes", "shard=1"}} { // lr-mode staleness keeps no pulled weights
		if v, ok := first.get(m[0], m[1:]...); !ok || v != 0 {
			t.Errorf("%v = %v (exported: %t), want 0", m, v, ok)
		}
	}
	if v, ok := first.get("softsync_auth_failures_total"); !ok || v != 0 {
		t.Errorf("softsync_auth_failures_total = %v, %v", v, ok)
	}
	if v, _ := first.get("softsync_job_epochs"); v != 100000 {
		t.Errorf("softsync_job_epochs = %v", v)
	}
	if v, _ := first.get("softsync_job_test_error"); v > 1 {
		t.Errorf("softsync_job_test_error = %v, not a fraction", v)
	}
	// The staleness histogram counts every accepted gradient.
	for _, k := range []string{"0", "1"} {
		n, _ := first.get("softsync_staleness", "shard="+k)
		if acc, _ := first.get("softsync_gradients_total", "shard="+k, "outcome=accepted"); n != acc {
			t.Errorf("shard %s: staleness histogram counts %v gradients, %v accepted", k, n, acc)
		}
	}
	steps := func(s scrape, l string) float64 {
		v, _ := s.get("softsync_learner_steps_total", "learner="+l)
		return v
	}
	pollMetrics(t, addr, "counters growing", func(s scrape) bool {
		grads := func(s scrape) float64 {
			v, _ := s.get("softsync_gradients_total", "shard=0", "outcome=accepted")
			return v
		}
		return steps(s, "0") > steps(first, "0") && steps(s, "1") > steps(first, "1") && grads(s) > grads(first)
	})

	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := transporttest.Receive(t, done, time.Minute, "train to return after SIGINT")
	ended = true
	if !errors.Is(err, cluster.ErrInterrupted) && !errors.Is(err, context.Canceled) {
		t.Errorf("train interrupted: %v", err)
	}
	if _, err := scrapeMetrics(addr); err == nil {
		t.Error("the metrics are still served after train returned")
	}
}

// TestMetricsLaunch scrapes every process of softsync launch --metrics
// 127.0.0.1:0 while the job runs: the head its job's progress, the shard
// server its shard, the learner its steps and traffic, each found by the
// address it logs; the job is then interrupted.
func TestMetricsLaunch(t *testing.T) {
	multiProcess(t)
	j, marker := startLaunch(t, "-n", "1", "--", "--model", "mlp", "--epochs", "100000", "--train-subset", "256",
		"--test-subset", "100", "--batch", "16", "--protocol", "softsync", "--metrics", "127.0.0.1:0")
	line := regexp.MustCompile(`(?m)^(\[[a-z ]+[0-9]\] )?.*msg="serving metrics" url=http://(\S+)/metrics`)
	var found [][]string
	waitFor(t, j.Output, func(out string) bool {
		found = line.FindAllStringSubmatch(out, -1)
		return len(found) == 3
	})
	addr := map[string]string{}
	for _, m := range found {
		addr[strings.TrimSpace(m[1])] = m[2]
	}
	want := map[string][][]string{
		"": {{"softsync_roles", "role=coordinator"}, {"softsync_job_steps_total"}},
		"[shard server 0]": {{"softsync_roles", "role=server"}, {"softsync_gradients_total", "shard=0", "outcome=accepted"},
			{"softsync_updates_total", "shard=0"}, {"softsync_staleness", "shard=0"}},
		"[learner 0]": {{"softsync_roles", "role=learner"}, {"softsync_learner_steps_total", "learner=0"},
			{"softsync_bytes_total", "learner=0", "codec=none", "direction=sent"}, {"softsync_images_per_second", "learner=0"}},
	}
	for proc, samples := range want {
		a, ok := addr[proc]
		if !ok {
			t.Fatalf("no metrics address logged by %q: %v", proc, found)
		}
		s := pollMetrics(t, a, proc+" at work", func(s scrape) bool { return s.positive(samples...) })
		checkNames(t, s)
		if proc != "" {
			if _, ok := s.get("softsync_job_steps_total"); ok {
				t.Errorf("%s serves the job's progress, which is the head's", proc)
			}
		}
	}
	pid := findProc(marker, "launch", "-n")
	if pid == 0 {
		t.Fatal("no launch process")
	}
	if err := syscall.Kill(pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if res := j.Wait(); !strings.Contains(res.Output, "interrupted") {
		t.Errorf("launch interrupted: %s", res)
	}
	for proc, a := range addr {
		if _, err := scrapeMetrics(a); err == nil {
			t.Errorf("%q still serves metrics after the job", proc)
		}
	}
}

// waitFor polls out until ok accepts it.
func waitFor(t *testing.T, out func() string, ok func(string) bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for !ok(out()) {
		if time.Now().After(deadline) {
			t.Fatalf("waited in vain; output:\n%s", out())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMetricsAddr: the processes launch starts and the ranks of
// --cluster auto serve on the ports after the head's, or each on a port
// of its own with port 0; the head's --metrics is not passed on as is.
func TestMetricsAddr(t *testing.T) {
	for _, c := range []struct {
		addr   string
		offset int
		want   string
	}{
		{"127.0.0.1:9100", 0, "127.0.0.1:9100"},
		{"127.0.0.1:9100", 3, "127.0.0.1:9103"},
		{":9100", 1, ":9101"},
		{"[::1]:9100", 2, "[::1]:9102"},
		{"127.0.0.1:0", 5, "127.0.0.1:0"},
		{"nonsense", 1, "nonsense"},
	} {
		if got := metricsAddr(c.addr, c.offset); got != c.want {
			t.Errorf("metricsAddr(%q, %d) = %q, want %q", c.addr, c.offset, got, c.want)
		}
	}
	f := &trainFlags{}
	if a := childMetrics(f, 1); a != nil {
		t.Errorf("without --metrics: %v", a)
	}
	f.cluster.metrics = "localhost:9100"
	if a := childMetrics(f, 2); !slices.Equal(a, []string{"--metrics", "localhost:9102"}) {
		t.Errorf("childMetrics = %v", a)
	}
	for _, bad := range []string{"9100", "localhost:http", "localhost:70000"} {
		_, err := runErr("train", "--model", "mlp", "--metrics", bad)
		if err == nil || !strings.Contains(err.Error(), "--metrics") {
			t.Errorf("--metrics %s: %v", bad, err)
		}
	}
}

// TestStalenessHistogram: the cumulative buckets of a shard's histogram,
// τ ≥ the last bound counted in +Inf only.
func TestStalenessHistogram(t *testing.T) {
	h := make([]uint64, ps.HistogramLen)
	h[0], h[1], h[9], h[800], h[ps.HistogramLen-1] = 5, 3, 2, 1, 4
	count, sum, b := stalenessHistogram(ps.Stats{Histogram: h, StalenessSum: 77})
	if count != 15 || sum != 77 || len(b) != len(stalenessBuckets) {
		t.Fatalf("count %d, sum %v, %d buckets", count, sum, len(b))
	}
	for bound, want := range map[float64]uint64{0: 5, 1: 8, 8: 8, 10: 10, 512: 10, 768: 10} {
		if b[bound] != want {
			t.Errorf("bucket le=%v: %d, want %d", bound, b[bound], want)
		}
	}
	count, _, b = stalenessHistogram(ps.Stats{Histogram: []uint64{2}})
	if count != 2 || b[0] != 2 || b[768] != 2 {
		t.Errorf("trimmed histogram: count %d, buckets %v", count, b)
	}
}

// TestRefusedMetrics: a shard's refused updates, and per learner its
// gradients they discarded, and its pushes rejected as diverged, are
// counters of the shard.
func TestRefusedMetrics(t *testing.T) {
	st := ps.ServerStats{Shards: []ps.Stats{{Shard: 3, Refused: 4, RefusedGradients: []uint64{1, 0, 5}, Rejected: ps.Rejections{Diverged: 2}}}}
	got := map[string]uint64{}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		got[d.String()+strings.Join(labels, ",")] = v
	}
	ch := make(chan prometheus.Metric, 64)
	collectServer(ch, st, counter, func(*prometheus.Desc, float64, ...string) {})
	for _, c := range []struct {
		desc   *prometheus.Desc
		labels string
		want   uint64
	}{
		{descRefused, "3", 4}, {descRefusedGrads, "3,0", 1}, {descRefusedGrads, "3,1", 0}, {descRefusedGrads, "3,2", 5},
		{descRejected, "3,diverged", 2},
	} {
		if v, ok := got[c.desc.String()+c.labels]; !ok || v != c.want {
			t.Errorf("%v{%s} = %d (exported: %t), want %d", c.desc, c.labels, v, ok, c.want)
		}
	}
}

// TestImagesPerSecond: the rate over the samples of the last window.
func TestImagesPerSecond(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := &learnerMetrics{batch: 10, samples: []stepSample{{t0, 0}}}
	if r := l.rate(t0.Add(2*time.Second), 4); r != 20 {
		t.Errorf("rate since the start: %v, want 20", r)
	}
	for s := 1; s <= 30; s++ {
		l.record(t0.Add(time.Duration(s)*time.Second), uint64(s*s)) // accelerating
	}
	if len(l.samples) != 11 {
		t.Errorf("%d samples kept, want the 11 of the window", len(l.samples))
	}
	// From second 20 (400 steps) to 30 (900): 500 steps of 10 images in 10 s.
	if r := l.rate(t0.Add(30*time.Second), 900); r != 500 {
		t.Errorf("rate over the window: %v, want 500", r)
	}
}
