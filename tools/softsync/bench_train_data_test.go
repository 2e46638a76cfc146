package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/tools/bench"
)

// TestBenchTrainDataJSON runs bench train-data on a small folder with a
// small network: the folder is packed into the --pack path, each job
// runs in every round, synthetic first, and the rows carry what the
// jobs' reports and processes say.
func TestBenchTrainDataJSON(t *testing.T) {
	multiProcess(t)
	dir, net := jpegFolder(t, 4, 1), tinyNet(t, 4)
	pack := filepath.Join(t.TempDir(), "pack")
	out, err := runErrWithin(t, 2*time.Minute, "--log-level", "warn", "bench", "train-data", "--json", "--model", net, "--batch", "2",
		"--steps", "3", "--repeat", "2", "--data", dir, "--pack", pack, "--data-threads", "1", "--data-nice", "0,10")
	if err != nil {
		t.Fatal(err)
	}
	var res bench.TrainDataResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if !data.IsPack(pack) {
		t.Errorf("no pack written into %s", pack)
	}
	if res.Model != net || res.Batch != 2 || res.Steps != 3 || res.Images != 16 || res.Classes != 4 || res.Repeat != 2 || len(res.Rows) != 5 {
		t.Fatalf("result %+v", res)
	}
	var got []string
	for _, r := range res.Rows {
		got = append(got, r.Data)
		if len(r.Runs) != 2 || r.ImagesPerSec <= 0 || r.Ratio <= 0 || r.CPUPerImage <= 0 || r.PeakRSS <= 0 || r.DataWaitFraction < 0 {
			t.Errorf("row %+v", r)
		}
		if (r.Data == "synthetic") != (r.Path == "" && r.DataThreads == 0) || (r.Data == "pack" && r.Path != pack) {
			t.Errorf("row %s: path %q, data threads %d", r.Data, r.Path, r.DataThreads)
		}
	}
	if want := []string{"synthetic", "folder", "folder", "pack", "pack"}; !slices.Equal(got, want) {
		t.Errorf("rows %v, want %v", got, want)
	}
	if res.Rows[0].Ratio != 1 || res.Rows[1].DataNice != 0 || res.Rows[2].DataNice != 10 {
		t.Errorf("synthetic's ratio %v, nice %d and %d", res.Rows[0].Ratio, res.Rows[1].DataNice, res.Rows[2].DataNice)
	}
	if _, err := runErr("bench", "train-data", "--data-nice", "20"); err == nil || !strings.Contains(err.Error(), "--data-nice") {
		t.Errorf("--data-nice 20: %v", err)
	}
}
