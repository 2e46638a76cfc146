package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/checkpoint"
	"github.com/softsync/softsync/ps/param"
	"github.com/softsync/softsync/ps/sgd"
	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/errcode"
)

// ctrlPair returns the two ends of a control connection over a network
// of kind ("inmem" or "tcp", authenticated).
func ctrlPair(t *testing.T, kind string) (*ctrl, *ctrl) {
	t.Helper()
	n, err := rdma.Open(kind, rdma.Options{Job: 1, Secret: []byte("a secret of the control tests")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ln, err := n.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan rdma.Conn, 1)
	go func() {
		c, err := ln.Accept(ctx)
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	a, err := n.Dial(ctx, ln.Addr())
	if err != nil {
		t.Fatal(err)
	}
	b := <-accepted
	if b == nil {
		t.FailNow()
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return &ctrl{conn: a}, &ctrl{conn: b}
}

// TestControlParts: control messages far larger than a frame (1 MiB of
// data) arrive whole over both transports, also when two goroutines send
// them at once; one beyond maxControl is refused by its sender, and a
// peer whose parts add up to more is refused by the receiver.
func TestControlParts(t *testing.T) {
	for _, kind := range []string{"inmem", "tcp"} {
		t.Run(kind, func(t *testing.T) {
			a, b := ctrlPair(t, kind)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			big := func(i int) []string {
				s := make([]string, 1<<20/64)
				for k := range s {
					s[k] = fmt.Sprintf("%d:%060d", i, k)
				}
				return s
			}
			var wg sync.WaitGroup
			for i := range 2 {
				wg.Go(func() {
					if err := a.send(ctx, tProgress, big(i)); err != nil {
						t.Errorf("send %d: %v", i, err)
					}
				})
			}
			seen := map[string]bool{}
			for range 2 {
				typ, msg, err := b.recv(ctx)
				if err != nil {
					t.Fatalf("recv: %v", err)
				}
				var got []string
				if err := json.Unmarshal(msg, &got); err != nil || typ != tProgress {
					t.Fatalf("message %#x of %d bytes: %v", typ, len(msg), err)
				}
				i := got[0][:1]
				if want := big(int(i[0] - '0')); !slices.Equal(got, want) {
					t.Errorf("message %s arrived changed", i)
				}
				seen[i] = true
			}
			wg.Wait()
			if len(seen) != 2 {
				t.Errorf("messages seen: %v", seen)
			}
			// A small message after the large ones, as before.
			if err := a.send(ctx, tStop, stop{Wire: errcode.Wire{Text: "x"}}); err != nil {
				t.Fatal(err)
			}
			if typ, msg, err := b.recv(ctx); err != nil || typ != tStop || string(msg) != `{"err":"x"}` {
				t.Errorf("after the large messages: %#x %s %v", typ, msg, err)
			}

			huge := strings.Repeat("x", maxControl)
			if err := a.send(ctx, tProgress, huge); !errors.Is(err, ErrProtocol) {
				t.Errorf("a message of more than %d bytes: %v, want ErrProtocol", maxControl, err)
			}
			// Parts that never end: the receiver gives up past maxControl.
			go func() {
				a.mu.Lock()
				defer a.mu.Unlock()
				part := make([]byte, ctrlPart)
				for range maxControl/ctrlPart + 1 {
					if a.sendFrame(ctx, tPart, part) != nil {
						return
					}
				}
			}()
			if _, _, err := b.recv(ctx); !errors.Is(err, ErrProtocol) {
				t.Errorf("endless parts: %v, want ErrProtocol", err)
			}
		})
	}
}

// fillLargest sets every integer of v (a pointer to a struct, its
// structs included) to its largest value, and every []uint64 to n of
// them: HistogramLen for a Histogram, learners for the others (per
// learner counts).
func fillLargest(v reflect.Value, learners int) {
	v = v.Elem()
	for i := range v.NumField() {
		f, name := v.Field(i), v.Type().Field(i).Name
		switch f.Kind() {
		case reflect.Uint64, reflect.Uint32, reflect.Uint:
			f.SetUint(math.MaxUint64 >> (64 - f.Type().Bits()))
		case reflect.Int, reflect.Int64, reflect.Int32:
			f.SetInt(math.MaxInt64 >> (64 - f.Type().Bits()))
		case reflect.Struct:
			fillLargest(f.Addr(), learners)
		case reflect.Slice:
			if f.Type().Elem().Kind() != reflect.Uint64 {
				continue
			}
			n := learners
			if name == "Histogram" {
				n = ps.HistogramLen
			}
			s := make([]uint64, n)
			for k := range s {
				s[k] = math.MaxUint64
			}
			f.Set(reflect.ValueOf(s))
		}
	}
}

// TestControlMessagesFit builds the largest control message of each kind
// that grows with the shards, for a job of MaxShardsFor(λ) shards: every
// counter at its largest, every histogram full, addresses of the longest
// host name; each fits in maxControl bytes, and a shard's counters in
// the bytes MaxShardsFor counts for them.
func TestControlMessagesFit(t *testing.T) {
	nativeOnly(t)
	for _, learners := range []int{1, 487, 488, 5000} {
		S := MaxShardsFor(learners)
		var one ps.Stats
		fillLargest(reflect.ValueOf(&one), learners)
		b, _ := json.Marshal(one)
		if len(b)+1 > shardStatsBytes+learnerStatsBytes*learners { // a comma between shards
			t.Errorf("a shard's counters with %d learners: %d bytes, MaxShardsFor counts %d", learners, len(b)+1, shardStatsBytes+learnerStatsBytes*learners)
		}
		var stats ps.ServerStats
		fillLargest(reflect.ValueOf(&stats), learners)
		stats.Shards = make([]ps.Stats, S)
		for k := range stats.Shards {
			stats.Shards[k] = one
		}
		if b, _ := json.Marshal(stats); len(b) > maxControl {
			t.Errorf("a shard server's counters, %d shards of %d learners: %d bytes, more than maxControl (%d)", S, learners, len(b), maxControl)
		} else {
			t.Logf("a shard server's counters, %d shards of %d learners: %d bytes", S, learners, len(b))
		}
	}
	const S = MaxShards
	addr := strings.Repeat("h", 253) + ":65535"
	shards := make([]int, S)
	w := welcome{Incarnation: math.MaxUint32, Plan: data.Plan{Images: math.MaxInt, Batch: math.MaxInt}}
	var report ckptReport
	p := progress{Done: true, Traffic: &rdma.Stats{}}
	for k := range S {
		shards[k] = k
		w.Addrs = append(w.Addrs, addr)
		report.Files = append(report.Files, checkpoint.FileSum{Name: fmt.Sprintf("shard-%05d.ckpt", k), Size: math.MaxInt64})
		p.Pushes = append(p.Pushes, math.MaxUint64)
		p.Connections = append(p.Connections, Connection{Learner: math.MaxInt, Shards: []int{k}, Peer: addr,
			Transport: "verbs", Reason: strings.Repeat("r", 200)})
	}
	for name, v := range map[string]any{
		"the welcome":                        w,
		"a shard server's hello":             hello{Addr: addr, Shards: shards, Settings: Settings{"model": strings.Repeat("m", 4096)}},
		"a learner's last progress":          p,
		"a shard server's checkpoint report": report,
	} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d bytes for %d shards", name, len(b), S)
		if len(b) > maxControl {
			t.Errorf("%s: %d bytes for %d shards, more than maxControl (%d)", name, len(b), S, maxControl)
		}
	}
}

// TestJobMaxShards: a job of MaxShards shards in one process (one shard
// server runs them all) runs to its end; one more shard is refused at
// once, naming the field and the limit.
func TestJobMaxShards(t *testing.T) {
	train, test := mnistSubset(t, 256, 64)
	cfg := Config{Spec: spec(t, "mlp"), Engine: engine(t), Train: train, Test: test, Learners: 2, Batch: 32,
		Protocol: ps.Softsync, N: 2, Shards: MaxShards, Epochs: 1, Seed: 1,
		Solver: sgd.Config{LR: 0.05, Momentum: 0.9, LRMode: sgd.LRStaleness}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("%d shards: %v", cfg.Shards, err)
	}
	checkResult(t, cfg, res)

	for _, learners := range []int{2, 5000} {
		cfg.Learners, cfg.N = learners, learners
		max := MaxShardsFor(learners)
		cfg.Shards = max
		if err := cfg.Validate(); err != nil {
			t.Errorf("%d shards of %d learners: %v", max, learners, err)
		}
		cfg.Shards = max + 1
		var fe *param.FieldError
		err = cfg.Validate()
		if !errors.As(err, &fe) || fe.Field != "Shards" || !strings.Contains(err.Error(), fmt.Sprintf("at most %d shards", max)) {
			t.Errorf("%d shards of %d learners: %v, want a FieldError for Shards naming %d", cfg.Shards, learners, err, max)
		}
	}
}
