package errcode

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

// Sentinels of the tests, registered once for the test binary.
var (
	errA = errors.New("a went wrong")
	errB = errors.New("b went wrong")
	errC = errors.New("c went wrong") // never registered
)

func init() {
	Register("test.a", errA)
	Register("test.b_2", errB)
}

func TestValid(t *testing.T) {
	for code, want := range map[string]bool{
		"ps.non_finite": true, "learner.diverged": true, "a.b.c": true, "x.y2": true, "rdma.err_1": true,
		"": false, "ps": false, ".ps": false, "ps.": false, "ps..x": false, "Ps.x": false, "ps.X": false,
		"ps.2x": false, "ps._x": false, "ps.x-y": false, "ps x.y": false, "ps.é": false,
	} {
		if got := valid(code); got != want {
			t.Errorf("valid(%q) = %v, want %v", code, got, want)
		}
	}
}

func TestRegisterRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, code string
		err        error
	}{
		{"malformed", "Test.x", errC},
		{"code twice", "test.a", errC},
		{"sentinel twice", "test.c", errA},
		{"nil", "test.c", nil},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Register(%q, %v) did not panic", tc.name, tc.code, tc.err)
				}
			}()
			Register(tc.code, tc.err)
		}()
	}
	if _, ok := Lookup("test.c"); ok {
		t.Error("a refused registration left test.c registered")
	}
	if got := Registered(); !slices.Contains(got, "test.a") || !slices.Contains(got, "test.b_2") || slices.Contains(got, "test.c") {
		t.Errorf("Registered() = %v", got)
	}
}

func TestCodes(t *testing.T) {
	both := fmt.Errorf("shard 3: %w; then %w", errA, fmt.Errorf("learner 1: %w", errB))
	for _, tc := range []struct {
		err  error
		want []string
	}{
		{nil, nil},
		{errC, nil},
		{io.EOF, nil},
		{fmt.Errorf("x: %w", errB), []string{"test.b_2"}},
		{both, []string{"test.a", "test.b_2"}},                          // registration order
		{errors.Join(errB, errC, errA), []string{"test.a", "test.b_2"}}, // a join's every branch
	} {
		if got := Codes(tc.err); !slices.Equal(got, tc.want) {
			t.Errorf("Codes(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// TestRoundTrip: an error encoded, sent as JSON and decoded prints the
// same text and matches every registered sentinel of its chain, and no
// other.
func TestRoundTrip(t *testing.T) {
	orig := fmt.Errorf("learner 1 step 3: %w: %w", errB, fmt.Errorf("shard 0: %w", errA))
	b, err := json.Marshal(struct {
		Wire
		N int `json:"n"`
	}{Encode(orig), 7})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"err":"learner 1 step 3: b went wrong: shard 0: a went wrong","err_codes":["test.a","test.b_2"],"n":7}`; string(b) != want {
		t.Errorf("JSON %s, want %s", b, want)
	}
	var msg struct {
		Wire
		N int `json:"n"`
	}
	if err := json.Unmarshal(b, &msg); err != nil {
		t.Fatal(err)
	}
	got := msg.Err()
	if got.Error() != orig.Error() {
		t.Errorf("text %q, want %q", got, orig)
	}
	if !errors.Is(got, errA) || !errors.Is(got, errB) || errors.Is(got, errC) {
		t.Errorf("%v: matches a %v, b %v, c %v; want a and b only", got, errors.Is(got, errA), errors.Is(got, errB), errors.Is(got, errC))
	}
	// Wrapped again on the receiving side, and encoded again: the codes
	// stay, and the new sentinel's join them.
	again := fmt.Errorf("job failed: %w", got)
	if codes := Codes(again); !slices.Equal(codes, []string{"test.a", "test.b_2"}) {
		t.Errorf("codes of the decoded error wrapped: %q", codes)
	}
	if !errors.Is(Encode(again).Err(), errA) {
		t.Error("an error decoded, wrapped and encoded again lost its identity")
	}
}

// TestUnknownCodes: codes this process does not know decode to an error
// with the text that matches none of them, and are passed on when the
// error is encoded again.
func TestUnknownCodes(t *testing.T) {
	got := Decode("newer peer: something new", []string{"future.thing", "test.a", "future.thing", "test.a"})
	if got.Error() != "newer peer: something new" || !errors.Is(got, errA) || errors.Is(got, errB) {
		t.Errorf("%v: matches a %v, b %v", got, errors.Is(got, errA), errors.Is(got, errB))
	}
	relayed := fmt.Errorf("relay: %w", got)
	if codes := Codes(relayed); !slices.Equal(codes, []string{"test.a", "future.thing"}) {
		t.Errorf("codes passed on: %q, want test.a then future.thing", codes)
	}
	plain := Decode("old peer", nil)
	if plain.Error() != "old peer" || errors.Is(plain, errA) || Codes(plain) != nil {
		t.Errorf("an error without codes: %v, codes %q", plain, Codes(plain))
	}
	if (Wire{}).Err() != nil {
		t.Error("the zero Wire is an error")
	}
	if w := Encode(nil); w.Text != "" || w.Codes != nil {
		t.Errorf("Encode(nil) = %+v", w)
	}
}

// TestAppendParse: the byte form of a transport's error report.
func TestAppendParse(t *testing.T) {
	orig := fmt.Errorf("shard 0: %w (element 7)", errA)
	b := Append([]byte("x"), orig)
	if want := "xshard 0: a went wrong (element 7)\x00test.a"; string(b) != want {
		t.Errorf("Append: %q, want %q", b, want)
	}
	got := Parse(b[1:])
	if got.Error() != orig.Error() || !errors.Is(got, errA) || errors.Is(got, errB) {
		t.Errorf("Parse: %v", got)
	}
	// A text alone (an older peer's) is the text; a zero byte in a text
	// does not end it early.
	if got := Parse([]byte("just text")); got.Error() != "just text" || Codes(got) != nil {
		t.Errorf("Parse(text): %v, %q", got, Codes(got))
	}
	nul := Parse(Append(nil, fmt.Errorf("odd\x00text: %w", errB)))
	if !strings.HasPrefix(nul.Error(), "odd\uFFFDtext") || !errors.Is(nul, errB) {
		t.Errorf("text with a zero byte: %q", nul)
	}
	if got := Parse([]byte("t\x00future.x\x00\x00test.b_2")); !errors.Is(got, errB) || !slices.Equal(Codes(got), []string{"test.b_2", "future.x"}) {
		t.Errorf("Parse with an unknown and an empty code (dropped): %q", Codes(got))
	}
}
