package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/rdma"
)

// This file serves a process's Prometheus metrics (--metrics HOST:PORT,
// docs/metrics.md). Every value is read from the roles' own counters when
// Prometheus scrapes (ps.Server.Stats, ps.Client.Stats and Pushes, the
// coordinator's Progress), so the metrics cost the training path nothing;
// the roles hand their live objects over through the cluster hooks
// (OnServe, OnClient, OnEpoch, OnAuthFailure) as they start. The one
// goroutine of its own samples each learner's steps once a second for
// softsync_images_per_second.

// metricsListening, when set (by tests), is told the address the metrics
// endpoint is bound to.
var metricsListening func(addr string)

const (
	// rateEvery and rateWindow: softsync_images_per_second is the images
	// a learner pushed over the last rateWindow, from samples of its
	// steps taken every rateEvery.
	rateEvery  = time.Second
	rateWindow = 10 * time.Second
)

// stalenessBuckets are the upper bounds of softsync_staleness. τ is an
// integer, so each cumulative count is exact: the shards count every τ
// below ps.HistogramLen−1 on its own.
var stalenessBuckets = []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 20, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768}

func newDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("softsync_"+name, help, labels, nil)
}

// The metrics; docs/metrics.md lists them with their labels.
var (
	descRoles        = newDesc("roles", "Roles of the job this process runs, by role.", "role")
	descAuthFailures = newDesc("auth_failures_total", "Connections to this process's job listeners that failed authentication.")

	descUpdates       = newDesc("updates_total", "Updates the shard applied to its weights.", "shard")
	descPartial       = newDesc("partial_updates_total", "Updates of fewer than c0 gradients, at a scaled rate (the end of the job, lost learners).", "shard")
	descRefused       = newDesc("refused_updates_total", "Updates the shard refused: each would have made a weight or its momentum NaN or infinite.", "shard")
	descRefusedGrads  = newDesc("refused_gradients_total", "The learner's gradients that refused updates discarded.", "shard", "learner")
	descGradients     = newDesc("gradients_total", "Gradients the shard received, by outcome: accepted (applied or pending), dropped (too stale), duplicate (ignored).", "shard", "outcome")
	descRejected      = newDesc("rejected_total", "Messages the shard rejected, by reason.", "shard", "reason")
	descStaleness     = newDesc("staleness", "Staleness τ of the gradients the shard accepted.", "shard")
	descStalenessMax  = newDesc("staleness_max", "Largest staleness τ the shard accepted.", "shard")
	descPulledBytes   = newDesc("pulled_bytes", "Memory of the weights the shard keeps per learner for the rules that correct a gradient with the weights it was computed on (lr-mode dc, dc-adaptive, gap): 0 for the other rules.", "shard")
	descShardEpoch    = newDesc("shard_epoch", "Epochs the shard has consumed, by its count of gradients (the learning-rate schedule's epoch).", "shard")
	descServerErrors  = newDesc("server_errors_total", "Faults the shard server handled, by kind.", "kind")
	descLearnerSteps  = newDesc("learner_steps_total", "Mini-batches the learner computed and pushed.", "learner")
	descImagesPerSec  = newDesc("images_per_second", "Images per second the learner trained on, over the last 10 seconds.", "learner")
	descWireBytes     = newDesc("bytes_total", "Encoded payload bytes of the learner's messages (what the codec put on the wire), by codec and direction.", "learner", "codec", "direction")
	descRawBytes      = newDesc("raw_bytes_total", "Payload bytes of the learner's messages before encoding (4 per float), by codec and direction.", "learner", "codec", "direction")
	descMessages      = newDesc("messages_total", "The learner's messages, by codec and direction.", "learner", "codec", "direction")
	descFrameBytes    = newDesc("frame_bytes_total", "Bytes of the learner's frames, headers included, by direction.", "learner", "direction")
	descJobEpoch      = newDesc("job_epoch", "Epoch in progress, 1-based.")
	descJobEpochs     = newDesc("job_epochs", "Epochs of the job.")
	descJobSteps      = newDesc("job_steps_total", "Mini-batches pushed so far, all learners.")
	descJobStepsPlan  = newDesc("job_steps_planned", "Mini-batches the job will push, all learners.")
	descJobImages     = newDesc("job_images_total", "Images trained on so far, all learners.")
	descJobLoss       = newDesc("job_loss", "Moving average of recent mini-batch losses.")
	descJobElapsed    = newDesc("job_elapsed_seconds", "Training time so far.")
	descLastEpoch     = newDesc("job_last_epoch", "The last epoch completed (0 before the first).")
	descLastTestError = newDesc("job_test_error", "Test error (fraction misclassified) of the last epoch completed.")
	descLastTop5      = newDesc("job_test_error_top5", "Top-5 test error (fraction whose label is not among the five largest outputs) of the last epoch completed.")
	descLastTrainLoss = newDesc("job_train_loss", "Mean training loss of the last epoch completed.")
	descJobDataWait   = newDesc("job_data_wait_seconds_total", "Time the learners waited for their mini-batches to be read and decoded, all learners together.")
	descJobSkipped    = newDesc("job_data_skipped_total", "Images that could not be read or decoded (each replaced by the next that could).")

	allDescs = []*prometheus.Desc{descRoles, descAuthFailures, descUpdates, descPartial, descRefused, descRefusedGrads, descGradients, descRejected,
		descStaleness, descStalenessMax, descPulledBytes, descShardEpoch, descServerErrors, descLearnerSteps, descImagesPerSec,
		descWireBytes, descRawBytes, descMessages, descFrameBytes, descJobEpoch, descJobEpochs, descJobSteps,
		descJobStepsPlan, descJobImages, descJobLoss, descJobElapsed, descLastEpoch, descLastTestError, descLastTop5, descLastTrainLoss,
		descJobDataWait, descJobSkipped}
)

// metrics is a process's metrics endpoint and what it reads. A nil
// *metrics (no --metrics) accepts every call and does nothing.
type metrics struct {
	addr string // where it listens
	srv  *http.Server
	done chan struct{} // closed when the HTTP server has stopped
	stop chan struct{} // ends the sampler
	wg   sync.WaitGroup
	auth atomic.Uint64

	mu       sync.Mutex
	servers  []*ps.Server
	learners map[int]*learnerMetrics
	job      interface{ Progress() cluster.Progress }
	last     *cluster.Epoch // the last epoch completed
}

// learnerMetrics is what the metrics read of one learner.
type learnerMetrics struct {
	client *ps.Client
	batch  int

	mu      sync.Mutex
	samples []stepSample // of the last rateWindow, oldest first
	traffic rdma.Stats   // as last exposed (counters never go back)
}

type stepSample struct {
	at    time.Time
	steps uint64
}

// startMetrics serves the metrics on addr (--metrics) until closeMetrics.
// It does nothing for addr "" or when they are served already.
func (app *App) startMetrics(addr string) error {
	if addr == "" || app.metrics != nil {
		return nil
	}
	if _, port, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("--metrics %s: want HOST:PORT: %w", addr, err)
	} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("--metrics %s: bad port %q", addr, port)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--metrics: %w", err)
	}
	m := &metrics{addr: ln.Addr().String(), done: make(chan struct{}), stop: make(chan struct{}), learners: map[int]*learnerMetrics{}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(app.Log.Handler(), slog.LevelWarn)}))
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "softsync: Prometheus metrics at /metrics (docs/metrics.md)")
	})
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(m.done)
		if err := m.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			app.Log.Error("metrics endpoint failed", "err", err)
		}
	}()
	m.wg.Go(m.sample)
	app.metrics = m
	app.Log.Info("serving metrics", "url", "http://"+m.addr+"/metrics")
	if metricsListening != nil {
		metricsListening(m.addr)
	}
	return nil
}

// closeMetrics stops serving the metrics: a scrape in progress may finish
// within a second.
func (app *App) closeMetrics() {
	m := app.metrics
	if m == nil {
		return
	}
	app.metrics = nil
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if m.srv.Shutdown(ctx) != nil {
		m.srv.Close()
	}
	<-m.done
	close(m.stop)
	m.wg.Wait()
}

// metricsAddr returns the metrics address of the process offset places
// after addr's (the processes launch starts, the ranks of --cluster auto):
// port PORT+offset, or port 0 again (each process picks one).
func metricsAddr(addr string, offset int) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr // startMetrics says what is wrong
	}
	p, err := strconv.Atoi(port)
	if err != nil || p == 0 {
		return addr
	}
	return net.JoinHostPort(host, strconv.Itoa(p+offset))
}

// observeJob sets the hooks of a job run in this process so that its
// roles' metrics are served: the shard server, the learners, the epochs
// and the authentication failures (cfg.OnEpoch and cfg.OnAuthFailure, if
// set, are still called).
func (m *metrics) observeJob(cfg *cluster.Config) {
	if m == nil {
		return
	}
	cfg.OnServe = m.onServe()
	cfg.OnClient = m.onClient(cfg.Batch)
	cfg.OnEpoch = m.onEpoch(cfg.OnEpoch)
	auth := cfg.OnAuthFailure
	cfg.OnAuthFailure = func(peer string, err error) {
		m.authFailure()
		if auth != nil {
			auth(peer, err)
		}
	}
}

// watchJob serves the progress of job (a *cluster.Job or the
// coordinator of a job of several processes): this process is the job's
// head, its coordinator and evaluator.
func (m *metrics) watchJob(job interface{ Progress() cluster.Progress }) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.job = job
}

// onServe returns the hook of a shard server (ServerConfig.OnServe); nil
// without metrics.
func (m *metrics) onServe() func(*ps.Server) {
	if m == nil {
		return nil
	}
	return func(s *ps.Server) {
		m.mu.Lock()
		defer m.mu.Unlock()
		// A server of the same shards replaces the one before it.
		m.servers = slices.DeleteFunc(m.servers, func(o *ps.Server) bool {
			return slices.ContainsFunc(o.Shards(), func(k int) bool { return slices.Contains(s.Shards(), k) })
		})
		m.servers = append(m.servers, s)
	}
}

// onClient returns the hook of learners of mini-batches of batch images
// (LearnerConfig.OnClient); nil without metrics.
func (m *metrics) onClient(batch int) func(int, *ps.Client) {
	if m == nil {
		return nil
	}
	return func(id int, c *ps.Client) {
		l := &learnerMetrics{client: c, batch: batch}
		l.samples = []stepSample{{time.Now(), l.steps()}}
		m.mu.Lock()
		defer m.mu.Unlock()
		m.learners[id] = l
	}
}

// onEpoch returns an OnEpoch hook that records the epoch and calls next
// (next itself without metrics).
func (m *metrics) onEpoch(next func(cluster.Epoch)) func(cluster.Epoch) {
	if m == nil {
		return next
	}
	return func(e cluster.Epoch) {
		m.mu.Lock()
		m.last = &e
		m.mu.Unlock()
		if next != nil {
			next(e)
		}
	}
}

// authFailure counts a connection that failed authentication.
func (m *metrics) authFailure() {
	if m != nil {
		m.auth.Add(1)
	}
}

// steps returns the mini-batches the learner pushed: its client's pushes
// (every step pushes to every shard; a push lost on the way counts).
func (l *learnerMetrics) steps() uint64 {
	return slices.Max(l.client.Pushes())
}

// sample records every learner's steps each rateEvery until stop.
func (m *metrics) sample() {
	t := time.NewTicker(rateEvery)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case now := <-t.C:
			for _, l := range m.learnerList() {
				l.record(now, l.steps())
			}
		}
	}
}

func (m *metrics) learnerList() []*learnerMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ls []*learnerMetrics
	for _, l := range m.learners {
		ls = append(ls, l)
	}
	return ls
}

// record adds a sample and forgets those older than the window.
func (l *learnerMetrics) record(at time.Time, steps uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.samples = append(l.samples, stepSample{at, steps})
	i := 0
	for i < len(l.samples)-1 && at.Sub(l.samples[i].at) > rateWindow {
		i++
	}
	l.samples = slices.Delete(l.samples, 0, i)
}

// rate returns the images per second from the oldest sample of the window
// to (at, steps).
func (l *learnerMetrics) rate(at time.Time, steps uint64) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.samples[0]
	for _, o := range l.samples {
		if at.Sub(o.at) <= rateWindow {
			s = o
			break
		}
	}
	dt := at.Sub(s.at).Seconds()
	if dt <= 0 || steps < s.steps {
		return 0
	}
	return float64(steps-s.steps) * float64(l.batch) / dt
}

// exposedTraffic returns the client's traffic, never below what was
// exposed before (Client.Stats may miss a connection for a moment while
// it is replaced; a counter must not go back).
func (l *learnerMetrics) exposedTraffic() rdma.Stats {
	st := l.client.Stats()
	l.mu.Lock()
	defer l.mu.Unlock()
	p := &l.traffic
	for i := range p.Sent {
		for _, c := range []struct{ prev, cur *rdma.CodecStats }{{&p.Sent[i], &st.Sent[i]}, {&p.Recv[i], &st.Recv[i]}} {
			c.prev.Msgs = max(c.prev.Msgs, c.cur.Msgs)
			c.prev.RawBytes = max(c.prev.RawBytes, c.cur.RawBytes)
			c.prev.WireBytes = max(c.prev.WireBytes, c.cur.WireBytes)
		}
	}
	p.FrameBytesSent = max(p.FrameBytesSent, st.FrameBytesSent)
	p.FrameBytesRecv = max(p.FrameBytesRecv, st.FrameBytesRecv)
	return *p
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector: it reads the roles' counters.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	servers, job, last := slices.Clone(m.servers), m.job, m.last
	learners := map[int]*learnerMetrics{}
	for id, l := range m.learners {
		learners[id] = l
	}
	m.mu.Unlock()

	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	head := 0.0
	if job != nil {
		head = 1
	}
	gauge(descRoles, head, "coordinator")
	gauge(descRoles, head, "evaluator")
	gauge(descRoles, float64(len(servers)), "server")
	gauge(descRoles, float64(len(learners)), "learner")
	counter(descAuthFailures, m.auth.Load())

	for _, s := range servers {
		collectServer(ch, s.Stats(), counter, gauge)
	}
	now := time.Now()
	for id, l := range learners {
		lid := strconv.Itoa(id)
		steps := l.steps()
		counter(descLearnerSteps, steps, lid)
		gauge(descImagesPerSec, l.rate(now, steps), lid)
		tr := l.exposedTraffic()
		for c := range rdma.NumCodecs {
			codec := rdma.CodecID(c).String()
			for _, d := range []struct {
				dir string
				st  rdma.CodecStats
			}{{"sent", tr.Sent[c]}, {"received", tr.Recv[c]}} {
				if d.st.Msgs == 0 {
					continue // codecs the learner does not use
				}
				counter(descMessages, d.st.Msgs, lid, codec, d.dir)
				counter(descWireBytes, d.st.WireBytes, lid, codec, d.dir)
				counter(descRawBytes, d.st.RawBytes, lid, codec, d.dir)
			}
		}
		counter(descFrameBytes, tr.FrameBytesSent, lid, "sent")
		counter(descFrameBytes, tr.FrameBytesRecv, lid, "received")
	}

	if job != nil {
		p := job.Progress()
		gauge(descJobEpoch, float64(p.Epoch))
		gauge(descJobEpochs, float64(p.Epochs))
		counter(descJobSteps, uint64(p.Steps))
		gauge(descJobStepsPlan, float64(p.TotalSteps))
		counter(descJobImages, uint64(p.Images))
		if !math.IsNaN(p.Loss) {
			gauge(descJobLoss, p.Loss)
		}
		gauge(descJobElapsed, p.Elapsed.Seconds())
		ch <- prometheus.MustNewConstMetric(descJobDataWait, prometheus.CounterValue, p.DataWait.Seconds())
		counter(descJobSkipped, uint64(p.Skipped))
		if last == nil {
			gauge(descLastEpoch, 0)
		} else {
			gauge(descLastEpoch, float64(last.Epoch))
			gauge(descLastTrainLoss, last.TrainLoss)
			if !math.IsNaN(last.TestError) {
				gauge(descLastTestError, last.TestError)
			}
			if !math.IsNaN(last.TestErrorTop5) {
				gauge(descLastTop5, last.TestErrorTop5)
			}
		}
	}
}

// collectServer sends a shard server's metrics.
func collectServer(ch chan<- prometheus.Metric, st ps.ServerStats, counter func(*prometheus.Desc, uint64, ...string), gauge func(*prometheus.Desc, float64, ...string)) {
	for _, sh := range st.Shards {
		k := strconv.Itoa(sh.Shard)
		counter(descUpdates, sh.Updates, k)
		counter(descPartial, sh.Partial, k)
		counter(descRefused, sh.Refused, k)
		for l, n := range sh.RefusedGradients {
			counter(descRefusedGrads, n, k, strconv.Itoa(l))
		}
		counter(descGradients, sh.Gradients, k, "accepted")
		counter(descGradients, sh.Dropped, k, "dropped")
		counter(descGradients, sh.Duplicates, k, "duplicate")
		counter(descGradients, sh.Redone, k, "redone")
		counter(descGradients, sh.StaleLife, k, "stale_life")
		r := sh.Rejected
		for _, c := range []struct {
			reason string
			n      uint64
		}{{"wrong_job", r.WrongJob}, {"wrong_shard", r.WrongShard}, {"unknown_learner", r.UnknownLearner}, {"bad_type", r.BadType},
			{"bad_length", r.BadLength}, {"future_clock", r.FutureClock}, {"non_finite", r.NonFinite}, {"already_pushed", r.AlreadyPush},
			{"diverged", r.Diverged}} {
			counter(descRejected, c.n, k, c.reason)
		}
		count, sum, buckets := stalenessHistogram(sh)
		ch <- prometheus.MustNewConstHistogram(descStaleness, count, sum, buckets, k)
		gauge(descStalenessMax, float64(sh.MaxStaleness), k)
		gauge(descShardEpoch, float64(sh.Epoch), k)
		gauge(descPulledBytes, float64(sh.PulledBytes), k)
	}
	for _, c := range []struct {
		kind string
		n    uint64
	}{{"bad_frame", st.BadFrames}, {"error_reply_dropped", st.ErrorsDropped}, {"refused", st.Refused},
		{"not_hosted", st.NotHosted}, {"connection_lost", st.Lost}, {"reply_detached", st.Detached}} {
		counter(descServerErrors, c.n, c.kind)
	}
}

// stalenessHistogram turns a shard's count per τ into a Prometheus
// histogram: the count, the sum of τ and the cumulative count at each of
// stalenessBuckets.
func stalenessHistogram(sh ps.Stats) (count uint64, sum float64, buckets map[float64]uint64) {
	buckets = make(map[float64]uint64, len(stalenessBuckets))
	i := 0 // τ of the next shard bucket to count
	for _, b := range stalenessBuckets {
		for ; i < len(sh.Histogram) && float64(i) <= b; i++ {
			count += sh.Histogram[i]
		}
		buckets[b] = count
	}
	for ; i < len(sh.Histogram); i++ {
		count += sh.Histogram[i]
	}
	return count, float64(sh.StalenessSum), buckets
}

// childMetrics returns the --metrics flag of the process launch starts
// offset places after the head (metricsAddr), none without --metrics.
func childMetrics(f *trainFlags, offset int) []string {
	if f.cluster.metrics == "" {
		return nil
	}
	return []string{"--metrics", metricsAddr(f.cluster.metrics, offset)}
}
