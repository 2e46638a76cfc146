package kernels

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCSrcHash fails when csrc/ changed without csrc_hash.go: the go
// command would otherwise keep using objects compiled from the old C.
func TestCSrcHash(t *testing.T) {
	var files []string
	for _, pat := range []string{"../csrc/*.c", "../csrc/*.h"} {
		m, err := filepath.Glob(pat)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) == 0 {
		t.Skip("csrc/ not present")
	}
	// Sort by base name, byte order (the Makefile uses LC_ALL=C sort).
	slices.SortFunc(files, func(a, b string) int { return strings.Compare(filepath.Base(a), filepath.Base(b)) })
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != csrcHash {
		t.Fatalf("csrc/ changed (hash %s) but kernels/csrc_hash.go says %s: run `make csrc-hash`", got, csrcHash)
	}
}
