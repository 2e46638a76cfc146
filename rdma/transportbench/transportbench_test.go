package transportbench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/softsync/softsync/rdma"
)

// TestRun checks the rows' arithmetic and ratios on a tiny, quick run.
func TestRun(t *testing.T) {
	fp16, _ := rdma.ParseCodec("fp16")
	var seen int
	rows, err := Run(context.Background(), Config{
		Transports: []string{"inmem", "tcp", "shm", "verbs-emu", "auto"},
		Codecs:     []rdma.Codec{{}, fp16}, Sizes: []int{40000}, MinTime: time.Millisecond, Baseline: true,
	}, func(Row) { seen++ })
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 12 || seen != 12 {
		t.Fatalf("%d rows (%d reported), want 12", len(rows), seen)
	}
	for _, r := range rows {
		want := map[string]string{"tcp-raw": "tcp", "memcpy": "memcpy", "inmem": "inmem", "tcp": "tcp", "shm": "shm", "verbs-emu": "verbs", "auto": ""}[r.Transport]
		if r.Conn != want && !(r.Transport == "auto" && r.Conn != "" && r.Reason != "") || r.Emulated != (r.Transport == "verbs-emu") {
			t.Fatalf("%s: conn %q (%s), emulated %v", r.Transport, r.Conn, r.Reason, r.Emulated)
		}
	}
	for _, r := range rows {
		if r.Rounds < 3 || r.RoundSec <= 0 || r.Bytes != 40000 {
			t.Fatalf("row %+v", r)
		}
		if want := 2 * 40000 / r.RoundSec / 1e9; r.GBps != want {
			t.Fatalf("gbps %v, want %v", r.GBps, want)
		}
		wantRatio := 1.0
		if r.Codec == "fp16" {
			wantRatio = 0.5
		}
		if r.Ratio != wantRatio || r.WireBytes != 2*40000*wantRatio {
			t.Fatalf("%s/%s: ratio %v, wire bytes %v", r.Transport, r.Codec, r.Ratio, r.WireBytes)
		}
		if (r.Codec == "fp16") != (r.EncodeSec > 0 && r.DecodeSec > 0) {
			t.Fatalf("%s/%s: codec time %v/%v", r.Transport, r.Codec, r.EncodeSec, r.DecodeSec)
		}
	}
	if _, err := Run(context.Background(), Config{Sizes: []int{6}}, nil); err == nil {
		t.Fatal("size not a multiple of 4 accepted")
	}
}

// BenchmarkRoundTrip: one push+pull per iteration. GB/s as in Row.GBps
// (verbs-emu: the verbs transport over its emulation, not a device).
func BenchmarkRoundTrip(b *testing.B) {
	for _, tr := range []string{"inmem", "tcp", "shm", "verbs-emu"} {
		for _, name := range []string{"none", "s2", "zstd", "shuffle+zstd", "fp16", "bf16", "topk:0.01"} {
			codec, _ := rdma.ParseCodec(name)
			for _, size := range []int{1 << 20, 4 << 20, 16 << 20} {
				b.Run(fmt.Sprintf("%s/%s/%dMiB", tr, name, size>>20), func(b *testing.B) {
					s, err := Open(context.Background(), tr, codec, size, 1)
					if err != nil {
						b.Fatal(err)
					}
					defer s.Close()
					s.Round(context.Background())
					b.ReportAllocs()
					b.SetBytes(int64(2 * size))
					var total time.Duration
					for b.Loop() {
						d, err := s.Round(context.Background())
						if err != nil {
							b.Fatal(err)
						}
						total += d
					}
					b.ReportMetric(2*float64(size)*float64(b.N)/total.Seconds()/1e9, "GB/s")
					c, _ := s.Stats()
					b.ReportMetric(c.Sent[codec.ID].Ratio(), "ratio")
				})
			}
		}
	}
}
