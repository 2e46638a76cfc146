package main

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestBenchTransportJSON(t *testing.T) {
	out := run(t, "bench", "transport", "--json", "--sizes", "4K", "--codecs", "none,fp16",
		"--transports", "inmem,tcp", "--min-time", "1ms")
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(rows) != 5 { // tcp-raw, then 2 transports × 2 codecs
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
	for _, args := range [][]string{
		{"bench", "transport", "--codecs", "gzip"},
		{"bench", "transport", "--codecs", "topk:2"},
		{"bench", "transport", "--sizes", "10"},
		{"bench", "transport", "--sizes", "-1M"},
		{"bench", "transport", "--transports", "udp", "--sizes", "4K"},
	} {
		root := newRootCmd(&bytes.Buffer{})
		root.SetArgs(args)
		if err := root.Execute(); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
