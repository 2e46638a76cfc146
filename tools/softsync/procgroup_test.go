package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestProcGroupHead: launch starts a head killed before it wrote the
// job's outputs again, and not one killed after (its --ended-file
// exists), whose end is then the job's: its error, if it wrote one.
func TestProcGroupHead(t *testing.T) {
	// The head: counts its starts in $3.count; marks the job ended (with
	// $ENDED_MSG) from its second start on, or from the first with
	// MARK_FIRST; then dies by SIGKILL.
	const script = `echo x >> "$3.count"
n=$(wc -l < "$3.count")
if [ "$n" -ge 2 ] || [ -n "$MARK_FIRST" ]; then printf %s "$ENDED_MSG" > "$3"; fi
kill -KILL $$`
	for _, c := range []struct {
		name       string
		markFirst  bool
		msg        string
		wantStarts int
		wantErr    string
	}{
		{"killed before its outputs", false, "", 2, ""},
		{"killed after its outputs", true, "", 1, ""},
		{"killed after outputs that failed", true, "test error 0.5 above --expect-error", 1, "above --expect-error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			ended := filepath.Join(dir, "ended")
			t.Setenv("ENDED_MSG", c.msg)
			t.Setenv("MARK_FIRST", map[bool]string{true: "1"}[c.markFirst])
			var log bytes.Buffer
			g := &procGroup{app: &App{Log: slog.New(slog.NewTextHandler(&log, nil))}, self: []string{"/bin/sh", "-c", script, "sh"},
				out: &lineWriter{w: &log}, restarts: 3, ended: ended}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			head := g.start(ctx, "eval", 0, []string{"--ended-file", ended})
			err := g.wait(ctx, head)
			g.stop(ctx, err != nil)
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("launch's head: %v, want success\n%s", err, log.String())
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("launch's head: %v, want an error with %q", err, c.wantErr)
			}
			b, err := os.ReadFile(ended + ".count")
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(b), "x"); n != c.wantStarts {
				t.Errorf("the head started %d times, want %d\n%s", n, c.wantStarts, log.String())
			}
		})
	}
}
