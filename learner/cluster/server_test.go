package cluster

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/ps/sgd"
)

// TestRefusalLog: a shard server logs a shard's first refused update at
// once with its learners, then at most one line per refusalEvery that
// counts the refusals since the last line; applied updates are not
// logged, and each shard has its own interval.
func TestRefusalLog(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	hook := refusalLog(slog.New(slog.NewTextHandler(&buf, nil)), func() time.Time { return now })
	refused := func(clock uint64, learners ...uint32) ps.Update {
		return ps.Update{Clock: clock, UpdateInfo: sgd.UpdateInfo{Refused: true}, Learners: learners}
	}
	hook(0, refused(1, 2))
	hook(0, ps.Update{Clock: 2})
	now = now.Add(time.Second)
	hook(0, refused(3, 0, 1))
	hook(1, refused(3, 1))
	now = now.Add(refusalEvery)
	hook(0, refused(9, 1))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{
		"shard=0 clock=1 learners=[2] refused_since_last_line=1",
		"shard=1 clock=3 learners=[1] refused_since_last_line=1",
		"shard=0 clock=9 learners=[1] refused_since_last_line=2",
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		if !strings.Contains(lines[i], "level=WARN") || !strings.Contains(lines[i], "update refused") || !strings.HasSuffix(lines[i], w) {
			t.Errorf("line %d: %s\nwant a warning ending %s", i, lines[i], w)
		}
	}
}
