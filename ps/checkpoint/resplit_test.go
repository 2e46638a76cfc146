package checkpoint

import (
	"errors"
	"slices"
	"testing"

	"github.com/softsync/softsync/ps"
)

// resplitJob returns the shard files of a job of shards shards over 1000
// floats after some pushes, one learner gone, with pending gradients.
func resplitJob(t *testing.T, shards int) []*Shard {
	j := newJob(t, testConfig(4, shards), 1000, uint64(shards))
	j.run(30)
	j.member(ps.MsgLeave, 3)
	j.run(7)
	return j.files()
}

// TestResplitSameLayout: the same layout returns the old shards
// themselves, in shard order, whatever order they came in.
func TestResplitSameLayout(t *testing.T) {
	old := resplitJob(t, 3)
	in := []*Shard{old[2], old[0], old[1]}
	got, info, err := Resplit(in, 1000, 3)
	if err != nil || info != (ResplitInfo{}) || len(got) != 3 {
		t.Fatalf("Resplit: %v, %+v", err, info)
	}
	for k := range got {
		if got[k] != old[k] {
			t.Fatalf("shard %d was not returned as is", k)
		}
	}
	if in[0] != old[2] {
		t.Fatal("Resplit reordered its argument")
	}
}

// TestResplit re-splits 3 → 2 and 2 → 5: the flat weights and momentum
// are preserved bit for bit, the per-learner and clock merges follow the
// rules, and every new shard restores under the new configuration.
func TestResplit(t *testing.T) {
	for _, tc := range []struct{ from, to int }{{3, 2}, {2, 5}, {1, 4}, {4, 1}} {
		old := resplitJob(t, tc.from)
		// Learner 1 is evicted everywhere, 3 has left. Make the shards
		// disagree as shards of different servers can.
		wantInc, wantEvicted, wantActive := []uint32{0, 1, 2, 0}, []bool{false, true, false, false}, []bool{true, false, true, false}
		if last := old[len(old)-1]; tc.from > 1 {
			old[0].LastSeq[0] += 5
			last.Incarnations[2], last.Evicted[2] = 7, true // evicted, active in the other shards
			old[0].Incarnations[2], old[0].Evicted[2] = 6, false
			old[0].Incarnations[0], old[0].Evicted[0] = 4, true // evicted, but a later incarnation elsewhere
			last.Incarnations[0] = 5
			last.Samples -= 4
			wantInc, wantEvicted, wantActive = []uint32{5, 1, 7, 0}, []bool{false, true, true, false}, []bool{true, false, false, false}
		}
		wantPending := 0
		for _, o := range old {
			wantPending = max(wantPending, o.Solver.Pending)
		}
		got, info, err := Resplit(old, 1000, tc.to)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Relaid || info.DroppedPending != wantPending || wantPending == 0 {
			t.Fatalf("%d → %d: info %+v, want %d pending dropped", tc.from, tc.to, info, wantPending)
		}
		ow, om := flat(old)
		nw, nm := flat(got)
		if !sameBits(ow, nw) || !sameBits(om, nm) {
			t.Fatalf("%d → %d: the flat weights or momentum changed", tc.from, tc.to)
		}
		cfg := testConfig(4, tc.to)
		ranges, _ := ps.Ranges(1000, tc.to)
		for k, s := range got {
			if r, _ := s.Range(); r != ranges[k] || s.Shard != k || s.Shards != tc.to {
				t.Fatalf("new shard %d: %d of %d owns %v, want %v", k, s.Shard, s.Shards, r, ranges[k])
			}
			maxClock, minSamples := uint64(0), old[0].Samples
			for _, o := range old {
				maxClock, minSamples = max(maxClock, o.Clock), min(minSamples, o.Samples)
			}
			if s.Clock != maxClock || s.Samples != minSamples || s.Solver.Pending != 0 || s.Solver.Acc != nil {
				t.Fatalf("new shard %d: clock %d samples %d pending %d; want %d, %d, 0", k, s.Clock, s.Samples, s.Solver.Pending, maxClock, minSamples)
			}
			if s.Stats.Gradients != 0 || s.Stats.Histogram != nil || s.Stats.Clock != maxClock || s.Stats.Shard != k {
				t.Fatalf("new shard %d: stats %+v", k, s.Stats)
			}
			wantSeq := slices.Clone(old[0].LastSeq)
			for _, o := range old {
				for l := range wantSeq {
					wantSeq[l] = max(wantSeq[l], o.LastSeq[l])
				}
			}
			if !slices.Equal(s.LastSeq, wantSeq) ||
				!slices.Equal(s.Incarnations, wantInc) || !slices.Equal(s.Evicted, wantEvicted) ||
				!slices.Equal(s.Active, wantActive) || slices.Contains(s.RoundPushed, true) {
				t.Fatalf("%d → %d: new shard %d: learners seq %v inc %v evicted %v active %v", tc.from, tc.to, k, s.LastSeq, s.Incarnations, s.Evicted, s.Active)
			}
			if _, err := ps.Restore(cfg, &s.Checkpoint, 1); err != nil {
				t.Fatalf("restore of new shard %d: %v", k, err)
			}
		}
	}
}

// TestResplitErrors checks that sets of shards that are not one layout
// are refused.
func TestResplitErrors(t *testing.T) {
	for name, spoil := range map[string]func([]*Shard) []*Shard{
		"none":            func([]*Shard) []*Shard { return nil },
		"gap":             func(s []*Shard) []*Shard { return []*Shard{s[0], s[2]} },
		"overlap":         func(s []*Shard) []*Shard { return []*Shard{s[0], s[1], s[1]} },
		"another total":   func(s []*Shard) []*Shard { s[1].Total = 999; return s },
		"another layout":  func(s []*Shard) []*Shard { s[2].Shards = 4; return s },
		"learners":        func(s []*Shard) []*Shard { s[1].Active = s[1].Active[1:]; return s },
		"short weights":   func(s []*Shard) []*Shard { s[1].Weights = s[1].Weights[1:]; return s },
		"job total":       func(s []*Shard) []*Shard { return s[:3:3] }, // with total 1001 below
		"too many shards": func(s []*Shard) []*Shard { return s },
	} {
		total, shards := 1000, 2
		switch name {
		case "job total":
			total = 1001
		case "too many shards":
			shards = 1001
		}
		if _, _, err := Resplit(spoil(resplitJob(t, 3)), total, shards); !errors.Is(err, ErrMismatch) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestResumeThroughStore takes a job's shards through the store as a
// resume does (write, commit, Latest with a check that decodes the shard
// files, Resplit, ps.Restore): on the same layout the restored shards
// step exactly as the originals; onto another number of shards they
// restore and train on.
func TestResumeThroughStore(t *testing.T) {
	a := newJob(t, testConfig(3, 2), 200, 4)
	a.run(13)
	s, _ := Open(t.TempDir())
	if err := s.Commit(3, writeVersion(t, s, 3, a.files()), meta()); err != nil {
		t.Fatal(err)
	}
	var old []*Shard
	snap, skipped, err := s.Latest(func(snap *Snapshot) error {
		if err := snap.CheckJob(testJob); err != nil {
			return err
		}
		var err error
		old, err = snap.Shards()
		return err
	})
	if err != nil || len(skipped) != 0 || snap.Version() != 3 {
		t.Fatalf("Latest: %v %v", err, skipped)
	}
	for _, shards := range []int{2, 3} {
		b := newJob(t, testConfig(3, shards), 200, 4)
		got, info, err := Resplit(old, 200, shards)
		if err != nil || info.Relaid != (shards != 2) {
			t.Fatalf("Resplit to %d: %v, %+v", shards, err, info)
		}
		for k, sh := range got {
			if b.shards[k], err = ps.Restore(b.cfg, &sh.Checkpoint, 1); err != nil {
				t.Fatal(err)
			}
		}
		b.follow(a)
		if shards != 2 {
			for l, active := range got[0].Active {
				b.left[l] = !active // the evicted learner 1 is gone
			}
			clock := b.shards[0].Clock()
			b.run(11) // pushes accepted, updates applied
			if b.shards[0].Clock() <= clock {
				t.Fatal("no update after the re-split")
			}
			continue
		}
		a.run(11)
		b.run(11)
		for k := range a.shards {
			if !sameBits(a.shards[k].Weights(), b.shards[k].Weights()) || a.shards[k].Clock() != b.shards[k].Clock() {
				t.Fatalf("shard %d diverged after a resume", k)
			}
		}
	}
}

// TestResplitConsumed: a re-split shard has consumed the mini-batches
// that every old shard it takes elements from had consumed, and restores
// with them: where the old shards disagree (a shard server restarted from
// an older version, a push lost to one of them) the mini-batch is not
// consumed, so that it is pushed again rather than missing from some
// elements.
func TestResplitConsumed(t *testing.T) {
	sets := [][]ps.Interval{
		{{First: 1, Last: 10}, {First: 14, Last: 14}},
		{{First: 1, Last: 5}, {First: 7, Last: 14}},
		{{First: 2, Last: 12}},
	}
	for _, to := range []int{2, 5, 1} {
		old := resplitJob(t, 3)
		for k, s := range old {
			s.Consumed = sets[k]
		}
		got, _, err := Resplit(old, 1000, to)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range got {
			r, _ := s.Range()
			set, err := ps.MakeBatchSet(s.Consumed)
			if err != nil {
				t.Fatal(err)
			}
			for id := uint64(0); id <= 16; id++ {
				want := true
				for _, o := range old {
					or, _ := o.Range()
					if max(r.Lo, or.Lo) < min(r.Hi, or.Hi) {
						os, _ := ps.MakeBatchSet(o.Consumed)
						want = want && os.Contains(id)
					}
				}
				if set.Contains(id) != want {
					t.Fatalf("3 → %d: new shard %d %v: mini-batch %d consumed %v, want %v (%v)", to, s.Shard, r, id, !want, want, s.Consumed)
				}
			}
			cfg := testConfig(4, to)
			rs, err := ps.Restore(cfg, &s.Checkpoint, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(rs.Consumed(), s.Consumed) {
				t.Fatalf("restored new shard %d consumed %v, want %v", s.Shard, rs.Consumed(), s.Consumed)
			}
		}
	}
}
