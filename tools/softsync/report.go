package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/tools/internal/textfmt"
)

// distributed reports whether the run had more than one learner or shard:
// the staleness part of the summary and plot matters then.
func distributed(r *cluster.Report) bool { return r.Learners > 1 || r.Shards > 1 }

// writeText prints the end-of-run summary of the report r (the run report
// is built by cluster.NewReport).
func writeText(w io.Writer, r *cluster.Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	te := "n/a (no test set)"
	if r.TestError != nil {
		te = fmt.Sprintf("%.2f%%, top-5 %s (%d test images)", 100**r.TestError, percent(r.TestError5), r.TestImages)
	}
	fmt.Fprintf(tw, "model\t%s (%s parameters), %s, %d learner(s) × batch %d\n", r.Model, textfmt.Thousands(int64(r.Params)), r.Data, r.Learners, r.Batch)
	fmt.Fprintf(tw, "test error\t%s\n", te)
	epochs := fmt.Sprintf("%d epochs", r.Epochs)
	if r.EpochsDone < float64(r.Epochs) {
		epochs = fmt.Sprintf("%.2f of %d epochs", r.EpochsDone, r.Epochs)
	}
	fmt.Fprintf(tw, "training time\t%s (%s, %s steps, %s images)\n", textfmt.Duration(r.Seconds), epochs, textfmt.Thousands(r.Steps), textfmt.Thousands(r.Images))
	fmt.Fprintf(tw, "images/s\t%s\n", textfmt.Thousands(int64(math.Round(r.ImagesPerSec))))
	if r.DataWait > 0 {
		behind := ""
		if r.DataWaitFraction > 0.05 {
			behind = " (the data came too slowly: more --data-threads, or fewer learners per host)"
		}
		fmt.Fprintf(tw, "data wait\t%s, %.1f%% of the learners' time%s\n", textfmt.Duration(r.DataWait), 100*r.DataWaitFraction, behind)
	}
	if r.DataSkipped > 0 {
		fmt.Fprintf(tw, "images skipped\t%d (cannot be read or decoded; each replaced by the next image)\n", r.DataSkipped)
	}
	if distributed(r) {
		proto := r.Protocol
		switch {
		case r.Protocol == "softsync" && r.NSchedule != "":
			proto = fmt.Sprintf("softsync (n %s)", r.NSchedule)
		case r.Protocol == "softsync":
			proto = fmt.Sprintf("%d-softsync", r.N)
		}
		rule := r.LRMode
		if r.MomentumComp {
			rule += ", momentum-comp"
		}
		fmt.Fprintf(tw, "parameter server\t%s, lr-mode %s, %d shard(s), %s, compress %s\n", proto, rule, r.Shards, r.Transport, r.Compress)
		if r.PulledBytes > 0 {
			fmt.Fprintf(tw, "pulled weights kept\t%s (the weights each learner pulled, for lr-mode %s)\n", textfmt.Bytes(r.PulledBytes), r.LRMode)
		}
		fmt.Fprintf(tw, "staleness\tmean %.2f, max %d, histogram %s\n", r.Staleness.Mean, r.Staleness.Max, histText(r.Staleness.Histogram))
		fmt.Fprintf(tw, "updates\t%s (%s partial; %s gradients accepted, %s dropped)\n", textfmt.Thousands(int64(r.Updates)), textfmt.Thousands(int64(r.Partial)), textfmt.Thousands(int64(r.Gradients)), textfmt.Thousands(int64(r.Dropped)))
		fmt.Fprintf(tw, "steps per learner\t%s\n", spread(r.LearnerSteps))
		ratio := 1.0
		if r.Traffic.PushRawBytes > 0 {
			ratio = float64(r.Traffic.PushWireBytes) / float64(r.Traffic.PushRawBytes)
		}
		fmt.Fprintf(tw, "bytes sent\t%s (gradients at %.3f of raw size, codec time %s)\n", textfmt.Bytes(r.BytesSent), ratio, textfmt.Duration(r.Traffic.CodecSeconds))
	}
	if len(r.ShardStats) > 0 && r.ShardStats[0].Refused > 0 {
		sh := r.ShardStats[0]
		fmt.Fprintf(tw, "refused updates\t%s on shard 0 (each would have made a weight NaN or infinite); gradients discarded per learner %v\n",
			textfmt.Thousands(int64(sh.Refused)), sh.RefusedGradients)
	}
	if len(r.Processes) > 0 {
		hosts := map[string]bool{}
		for _, p := range r.Processes {
			hosts[p.Host] = true
		}
		fmt.Fprintf(tw, "processes\t%s on %s; %d learner(s) lost, %d restart(s), %d chunk(s) reassigned\n",
			count(len(r.Processes), "process", "processes"), count(len(hosts), "host", "hosts"), r.Lost, r.Restarts, r.Chunks.Reassigned)
	}
	if m := r.Memory; m != nil {
		fmt.Fprintf(tw, "memory planned\t%s in all: %s\n", cluster.FormatMemory(m.Bytes), m.Summary(nil))
	}
	if r.CheckpointsWritten > 0 || r.CheckpointFailures.Count > 0 {
		fmt.Fprintf(tw, "checkpoints\t%s\n", checkpointsText(r))
	}
	tw.Flush()
}

// checkpointsText tells the checkpoints written and failed during the
// job, and the last failure.
func checkpointsText(r *cluster.Report) string {
	s := fmt.Sprintf("%d written", r.CheckpointsWritten)
	if f := r.CheckpointFailures; f.Count > 0 {
		s += fmt.Sprintf(", %d FAILED (the last, version %d of epoch %.2f, at %s: %s)", f.Count, f.LastVersion, f.LastEpoch,
			textfmt.Duration(f.LastSeconds), f.LastError)
	}
	return s
}

// count shows n with the singular or plural noun.
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// spread shows per-learner counts as "min–max (mean m)".
func spread(v []int64) string {
	if len(v) == 0 {
		return "–"
	}
	var sum int64
	for _, x := range v {
		sum += x
	}
	return fmt.Sprintf("%s–%s (mean %.1f)", textfmt.Thousands(slices.Min(v)), textfmt.Thousands(slices.Max(v)), float64(sum)/float64(len(v)))
}

// histText shows a staleness histogram as "τ=count" pairs, the largest
// buckets elided past 12.
func histText(h []uint64) string {
	var parts []string
	for tau, n := range h {
		if n == 0 {
			continue
		}
		if len(parts) == 12 {
			parts = append(parts, "…")
			break
		}
		parts = append(parts, fmt.Sprintf("%d:%d", tau, n))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// writeJSONFile writes v as indented JSON to path.
func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// percent shows a fraction as a percentage, "n/a" for none.
func percent(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.2f%%", 100**v)
}
