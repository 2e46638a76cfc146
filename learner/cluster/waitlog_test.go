package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
)

// records is a slog.Handler that keeps every record, for tests.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}

// lines returns the records at level or above as "LEVEL msg attrs…".
func (r *records) lines(level slog.Level) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.recs {
		if rec.Level < level {
			continue
		}
		s := rec.Level.String() + " " + rec.Message
		rec.Attrs(func(a slog.Attr) bool {
			s += fmt.Sprintf(" %s=%v", a.Key, a.Value)
			return true
		})
		out = append(out, s)
	}
	return out
}

func TestWaitLog(t *testing.T) {
	t0 := time.Unix(100, 0)
	for _, tc := range []struct {
		warn time.Duration
		at   []time.Duration // calls of next, from t0
		want string          // the lines due, "-" for none
	}{
		{0, []time.Duration{0, time.Second, 9 * time.Second, 10 * time.Second, 12 * time.Second, 20 * time.Second, 45 * time.Second},
			"DEBUG - - WARN - WARN WARN"},
		{time.Second, []time.Duration{300 * time.Millisecond, 900 * time.Millisecond, time.Second, 1500 * time.Millisecond, 2 * time.Second},
			"DEBUG - WARN - WARN"},
		// The first line comes late, after the wait has lasted warn: a
		// warning at once.
		{time.Second, []time.Duration{3 * time.Second, 3500 * time.Millisecond, 4 * time.Second}, "WARN - WARN"},
	} {
		w := waitLog{warn: tc.warn}
		w.begin(t0)
		var got []string
		for _, d := range tc.at {
			level, ok := w.next(t0.Add(d))
			if !ok {
				got = append(got, "-")
				continue
			}
			got = append(got, level.String())
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("warn %v, next at %v: %v, want %s", tc.warn, tc.at, got, tc.want)
		}
	}
}

// TestRendezvousWaitLog: the coordinator says at debug level that it
// waits, and warns once the rendezvous has lasted WaitWarn, naming who
// is missing, then again each WaitWarn; never at info level.
func TestRendezvousWaitLog(t *testing.T) {
	h := newHarness(t, CoordinatorConfig{Evaluator: true, WaitWarn: 3 * time.Second})
	h.server(0)
	var got []string
	for range 7 {
		h.tick(time.Second)
		for _, l := range h.rd.logs {
			if l.msg == "waiting at rendezvous" {
				got = append(got, fmt.Sprintf("%s %v", l.level, l.args))
			}
		}
	}
	want := []string{"DEBUG [for server 1, learner 0, learner 1, evaluator waited 1s]",
		"WARN [for server 1, learner 0, learner 1, evaluator waited 3s]",
		"WARN [for server 1, learner 0, learner 1, evaluator waited 6s]"}
	if !slices.Equal(got, want) {
		t.Errorf("log lines\n%q\nwant\n%q", got, want)
	}
}

// TestMemberWaitLog: a process whose coordinator does not listen says
// so at debug level, and warns only once it has waited WaitWarn.
func TestMemberWaitLog(t *testing.T) {
	network, err := rdma.Open("tcp", rdma.Options{Job: 1})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := network.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr()
	ln.Close() // nothing listens there: every dial is refused
	for _, tc := range []struct {
		warn time.Duration
		want slog.Level // the highest level of the waiting lines
	}{{0, slog.LevelDebug}, {100 * time.Millisecond, slog.LevelWarn}} {
		var log records
		m := Member{Network: network, Job: 1, Coordinator: addr, Process: Process{Rank: -1, Role: RoleLearner},
			Rendezvous: 600 * time.Millisecond, WaitWarn: tc.warn, Logger: slog.New(&log)}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _, err := m.join(ctx, hello{})
		late := ctx.Err()
		cancel()
		if !errors.Is(err, ErrRendezvous) || late != nil {
			t.Fatalf("warn %v: join: %v, want a rendezvous failure within the deadline", tc.warn, err)
		}
		all := log.lines(slog.LevelDebug)
		if len(all) == 0 || !strings.Contains(all[0], "DEBUG waiting for the coordinator") || !strings.Contains(all[0], "connection refused") {
			t.Errorf("warn %v: first line %q, want a debug line with the refused dial", tc.warn, all)
		}
		louder := log.lines(slog.LevelInfo)
		switch {
		case tc.want == slog.LevelDebug && len(louder) > 0:
			t.Errorf("warn %v: lines above debug %q", tc.warn, louder)
		case tc.want == slog.LevelWarn && (len(louder) == 0 || !strings.HasPrefix(louder[0], "WARN waiting for the coordinator")):
			t.Errorf("warn %v: lines above debug %q, want a warning", tc.warn, louder)
		}
	}
}

// TestQuietStart: a job in one process starts and ends without a line
// above debug level about waiting or refused connections.
func TestQuietStart(t *testing.T) {
	train, test := mnistSubset(t, 256, 64)
	var log records
	cfg := Config{Spec: spec(t, "mlp"), Engine: engine(t), Train: train, Test: test, Learners: 2, Batch: 32,
		Protocol: ps.Softsync, N: 2, Shards: 1, Epochs: 1, Seed: 1, Transport: "tcp",
		Solver: sgd.Config{LR: 0.05, Momentum: 0.9, LRMode: sgd.LRStaleness}, Logger: slog.New(&log)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for _, l := range log.lines(slog.LevelInfo) {
		if strings.Contains(l, "waiting") || strings.Contains(l, "refused") {
			t.Errorf("start-up is not news: %s", l)
		}
	}
}
