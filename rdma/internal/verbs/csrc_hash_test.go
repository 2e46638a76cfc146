package verbs

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestCSrcHash fails when csrc/verbs/ changed without csrc_hash.go: the go
// command would otherwise keep using objects compiled from the old C.
func TestCSrcHash(t *testing.T) {
	c, _ := filepath.Glob("../../../csrc/verbs/*.c")
	h, _ := filepath.Glob("../../../csrc/verbs/*.h")
	files := append(c, h...)
	if len(files) == 0 {
		t.Skip("csrc/verbs/ not present")
	}
	slices.Sort(files) // one directory: byte order of the names, as LC_ALL=C sort
	sum := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sum.Write(b)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != csrcHash {
		t.Fatalf("csrc/verbs/ changed (hash %s) but rdma/internal/verbs/csrc_hash.go says %s: run `make csrc-hash`", got, csrcHash)
	}
}
