package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/softsync/softsync/rdma"
)

func TestBenchTransportJSON(t *testing.T) {
	out := run(t, "bench", "transport", "--json", "--sizes", "4K", "--codecs", "none,fp16",
		"--transports", "inmem,tcp", "--min-time", "1ms")
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(rows) != 6 { // tcp-raw and memcpy, then 2 transports × 2 codecs
		t.Fatalf("%d rows: %v", len(rows), rows)
	}
	for _, r := range rows {
		for _, k := range []string{"transport", "codec", "bytes", "gbps", "ratio"} {
			if _, ok := r[k]; !ok {
				t.Fatalf("row %v lacks %s", r, k)
			}
		}
		if r["bytes"] != 4096.0 || r["gbps"].(float64) <= 0 {
			t.Fatalf("row %v", r)
		}
		if want := map[string]float64{"none": 1, "fp16": 0.5, "-": 1}[r["codec"].(string)]; r["ratio"] != want {
			t.Fatalf("row %v: ratio, want %v", r, want)
		}
	}
}

func TestBenchTransportBadFlags(t *testing.T) {
	for _, c := range []struct {
		args        []string
		flag, value string
	}{
		{[]string{"--codecs", "gzip"}, "--codecs", "gzip"},
		{[]string{"--codecs", "none,topk:2"}, "--codecs", "topk fraction 2"},
		{[]string{"--sizes", "10"}, "--sizes", `"10"`},
		{[]string{"--sizes", "4K,-1M"}, "--sizes", `"-1M"`},
		{[]string{"--sizes", "4096M"}, "--sizes", `"4096M"`},
		{[]string{"--transports", "tcp,udp", "--sizes", "4K"}, "--transports", `"udp"`},
	} {
		args := append([]string{"bench", "transport", "--min-time", "1ms"}, c.args...)
		_, err := runErr(args...)
		if err == nil || !strings.Contains(err.Error(), c.flag) || !strings.Contains(err.Error(), c.value) {
			t.Errorf("softsync %s: %v, want an error naming %s and %s", strings.Join(args, " "), err, c.flag, c.value)
		}
	}
}

// TestBenchTransportVerbs: the emulated verbs rows say so; verbs on a host
// without an RDMA device fails, naming the emulation as the alternative.
func TestBenchTransportVerbs(t *testing.T) {
	out := run(t, "bench", "transport", "--json", "--sizes", "64K", "--codecs", "none",
		"--transports", "verbs-emu,auto", "--min-time", "1ms", "--baseline=false")
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(rows) != 2 || rows[0]["emulated"] != true || rows[0]["conn"] != "verbs" || rows[1]["conn"] == nil || rows[1]["reason"] == nil {
		t.Fatalf("rows %v", rows)
	}
	if rdma.ProbeVerbs(rdma.Options{}).Usable != "" {
		return
	}
	root := newRootCmd(&bytes.Buffer{})
	root.SetArgs([]string{"bench", "transport", "--transports", "verbs", "--sizes", "4K", "--codecs", "none"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "verbs-emu") {
		t.Fatalf("verbs without a device: %v", err)
	}
}
