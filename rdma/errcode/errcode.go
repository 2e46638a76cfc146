// Package errcode keeps the identity of errors that cross processes. It
// holds a registry of sentinel errors, each under a code of its own
// ("ps.non_finite", "learner.diverged"), filled by the packages that
// define them, and encodes an error for a message as its text and the
// codes of the registered sentinels it matches. The receiver decodes the
// two into an error that prints the same text and matches, with
// errors.Is, the sentinels of every code it knows; a code it does not
// know matches nothing but is kept, so that an error passed on keeps it
// (a newer peer's codes survive an older relay).
//
// It imports nothing of softsync, so that every package, the transport
// included, can register its sentinels and decode its peers' errors.
//
// A code is "<package>.<name>": lower-case ASCII letters, digits and
// underscores, words separated by dots. A code keeps its meaning for
// good; a sentinel that goes away leaves its code unused. docs/wire.md
// lists the registered codes and the encodings.
package errcode

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// registry is every registered sentinel, in the order of registration.
var registry struct {
	mu     sync.RWMutex
	codes  []string
	errs   []error
	byCode map[string]error
}

// Register adds sentinel under code. A package registers its sentinels
// at initialisation, before any error is decoded. It panics on a code
// that is malformed or already registered, and on a sentinel registered
// under another code: both are programming errors.
func Register(code string, sentinel error) {
	if !valid(code) {
		panic(fmt.Sprintf("errcode: malformed code %q", code))
	}
	if sentinel == nil {
		panic(fmt.Sprintf("errcode: nil sentinel for %q", code))
	}
	r := &registry
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.byCode[code]; dup {
		panic(fmt.Sprintf("errcode: code %q registered twice", code))
	}
	for i, e := range r.errs {
		if e == sentinel {
			panic(fmt.Sprintf("errcode: %q is registered already, as %q", sentinel, r.codes[i]))
		}
	}
	if r.byCode == nil {
		r.byCode = map[string]error{}
	}
	r.codes, r.errs = append(r.codes, code), append(r.errs, sentinel)
	r.byCode[code] = sentinel
}

// valid reports whether code is words of [a-z0-9_] starting with a
// letter, at least two, separated by dots.
func valid(code string) bool {
	words, start := 0, true
	for i := 0; i < len(code); i++ {
		switch c := code[i]; {
		case c == '.':
			if start {
				return false
			}
			start = true
		case c >= 'a' && c <= 'z':
			if start {
				words++
			}
			start = false
		case (c >= '0' && c <= '9' || c == '_') && !start:
		default:
			return false
		}
	}
	return !start && words >= 2
}

// Lookup returns the sentinel registered under code.
func Lookup(code string) (error, bool) {
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	err, ok := registry.byCode[code]
	return err, ok
}

// Registered returns every registered code, in the order of registration.
func Registered() []string {
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	return slices.Clone(registry.codes)
}

// Codes returns the codes err carries: those of the registered sentinels
// it matches (errors.Is), in the order of registration, then those of
// the errors decoded from a peer in its chain that this process does
// not know, in the order found. It returns nil for nil and for an error
// that carries none.
func Codes(err error) []string {
	if err == nil {
		return nil
	}
	var codes []string
	registry.mu.RLock()
	for i, s := range registry.errs {
		if errors.Is(err, s) {
			codes = append(codes, registry.codes[i])
		}
	}
	registry.mu.RUnlock()
	walk(err, func(e error) {
		if d, ok := e.(*decoded); ok {
			for _, c := range d.unknown {
				if !slices.Contains(codes, c) {
					codes = append(codes, c)
				}
			}
		}
	})
	return codes
}

// walk calls f with err and every error in its chain (Unwrap, depth
// first).
func walk(err error, f func(error)) {
	for err != nil {
		f(err)
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e, f)
			}
			return
		default:
			return
		}
	}
}

// Decode returns the error a peer sent as text and codes: its Error is
// text, and errors.Is finds in it the sentinel of every code registered
// here; the other codes match nothing but stay for Codes (empty ones
// are dropped). Without codes it is a plain error with the text.
func Decode(text string, codes []string) error {
	d := &decoded{text: text}
	for _, c := range codes {
		switch s, ok := Lookup(c); {
		case c == "":
		case ok && !slices.Contains(d.known, s):
			d.known = append(d.known, s)
		case !ok && !slices.Contains(d.unknown, c):
			d.unknown = append(d.unknown, c)
		}
	}
	return d
}

// decoded is an error received from a peer.
type decoded struct {
	text    string
	known   []error  // the sentinels of the codes registered here
	unknown []string // the other codes
}

func (d *decoded) Error() string { return d.text }

// Unwrap returns the sentinels of the codes registered here.
func (d *decoded) Unwrap() []error { return d.known }

// Wire is an error as a JSON message carries it: its text (err) and its
// codes (err_codes). Embedded in a message, its fields are the message's.
// The zero Wire is no error.
type Wire struct {
	Text  string   `json:"err,omitempty"`
	Codes []string `json:"err_codes,omitempty"`
}

// Encode returns err as a message carries it (the zero Wire for nil).
func Encode(err error) Wire {
	if err == nil {
		return Wire{}
	}
	return Wire{Text: err.Error(), Codes: Codes(err)}
}

// Err returns the error w carries (Decode), nil for the zero Wire.
func (w Wire) Err() error {
	if w.Text == "" && len(w.Codes) == 0 {
		return nil
	}
	return Decode(w.Text, w.Codes)
}

// Append appends err in the byte form of a transport's error report
// (docs/wire.md): its text as UTF-8, then, for each of its codes, a zero
// byte and the code. A zero byte in the text becomes U+FFFD, so that the
// first zero byte ends the text. A reader that knows nothing of codes
// sees the text followed by them.
func Append(dst []byte, err error) []byte {
	dst = append(dst, strings.ReplaceAll(err.Error(), "\x00", "\uFFFD")...)
	for _, c := range Codes(err) {
		dst = append(append(dst, 0), c...)
	}
	return dst
}

// Parse returns the error of b in the form Append writes: decoded with
// its codes (Decode); b without a zero byte is the text alone.
func Parse(b []byte) error {
	text, rest, _ := bytes.Cut(b, []byte{0})
	var codes []string
	for len(rest) > 0 {
		var c []byte
		c, rest, _ = bytes.Cut(rest, []byte{0})
		codes = append(codes, string(c))
	}
	return Decode(string(text), codes)
}
