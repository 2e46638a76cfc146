package rdma

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// Handshake layout (docs/wire.md, "Handshake"). With Options.Secret set,
// a TCP connection starts with three messages before any frame:
//
//	client → server  hello (44 bytes): magic "SSYA", version 1, role 1,
//	                 two zero bytes, job id, 32-byte client nonce
//	server → client  hello (44 bytes, role 2, server nonce) and the
//	                 server's MAC (32 bytes)
//	client → server  the client's MAC (32 bytes)
//
// server MAC = HMAC-SHA256(secret, "softsync-auth-v1-server" ‖ client hello ‖ server hello)
// client MAC = HMAC-SHA256(secret, "softsync-auth-v1-client" ‖ client hello ‖ server hello ‖ server MAC)
//
// Each side checks the other's MAC with a fresh nonce of its own in it,
// so that recorded handshake bytes replayed to either side fail. The
// client verifies the server first and never proves itself to a server
// that could not prove itself.
const (
	// AuthVersion is the handshake version this package speaks.
	AuthVersion = 1

	helloSize  = 44
	nonceSize  = 32
	macSize    = sha256.Size
	roleClient = 1
	roleServer = 2
	// transcriptSize holds client hello, server hello, server MAC and
	// client MAC, in the order they are sent.
	transcriptSize = 2*helloSize + 2*macSize
	// minSecret is the shortest Options.Secret accepted.
	minSecret = 16
)

// AuthMagic is the first four bytes of a handshake hello.
const AuthMagic = "SSYA"

var (
	labelServer = []byte("softsync-auth-v1-server")
	labelClient = []byte("softsync-auth-v1-client")
)

// hello is one side's handshake hello in host form.
type hello struct {
	role  uint8
	job   uint32
	nonce [nonceSize]byte
}

// putHello writes h into b[:helloSize].
func putHello(b []byte, h *hello) {
	_ = b[helloSize-1]
	copy(b, AuthMagic)
	b[4], b[5], b[6], b[7] = AuthVersion, h.role, 0, 0
	binary.LittleEndian.PutUint32(b[8:], h.job)
	copy(b[12:helloSize], h.nonce[:])
}

// parseHello decodes the hello at the start of b, which must come from a
// peer in role, for job: magic, version, role, the zero bytes and the job
// id are checked in that order.
func parseHello(b []byte, role uint8, job uint32) (hello, error) {
	if len(b) < helloSize {
		return hello{}, fmt.Errorf("%w: handshake hello of %d bytes, want %d", ErrAuth, len(b), helloSize)
	}
	switch {
	case string(b[:4]) == Magic:
		return hello{}, fmt.Errorf("%w: the peer sent a frame without authenticating (it has no Options.Secret)", ErrAuth)
	case string(b[:4]) != AuthMagic:
		return hello{}, fmt.Errorf("%w: not a softsync handshake (starts % x)", ErrAuth, b[:4])
	case b[4] != AuthVersion:
		return hello{}, fmt.Errorf("%w: handshake version %d, this end speaks %d", ErrAuth, b[4], AuthVersion)
	case b[5] != role || b[6] != 0 || b[7] != 0:
		return hello{}, fmt.Errorf("%w: handshake role %d and reserved bytes %#x %#x, want role %d and zeros", ErrAuth, b[5], b[6], b[7], role)
	}
	h := hello{role: role, job: binary.LittleEndian.Uint32(b[8:])}
	copy(h.nonce[:], b[12:helloSize])
	if h.job != job {
		return h, fmt.Errorf("%w: the peer is in job %d, this end in job %d", ErrAuth, h.job, job)
	}
	return h, nil
}

// authMAC returns HMAC-SHA256(secret, label ‖ transcript) in dst.
func authMAC(dst, secret, label, transcript []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(label)
	m.Write(transcript)
	return m.Sum(dst[:0])
}

// serverHandshake authenticates the client at the other end of rw for
// job under secret; the caller bounds it with a deadline. It reads at
// most helloSize+macSize bytes and writes only its own hello and MAC,
// and those only after the client's hello checked out, which it tells
// helloOK (if not nil) first.
func serverHandshake(rw io.ReadWriter, secret []byte, job uint32, helloOK func()) error {
	var t [transcriptSize]byte
	ch, sh := t[:helloSize], t[helloSize:2*helloSize]
	smac, cmac := t[2*helloSize:2*helloSize+macSize], t[2*helloSize+macSize:]
	if _, err := io.ReadFull(rw, ch); err != nil {
		return handshakeIOError("reading the client's hello", "", err)
	}
	if _, err := parseHello(ch, roleClient, job); err != nil {
		return err
	}
	if helloOK != nil {
		helloOK()
	}
	s := hello{role: roleServer, job: job}
	rand.Read(s.nonce[:]) // never fails: the runtime aborts if the system's source does
	putHello(sh, &s)
	authMAC(smac, secret, labelServer, t[:2*helloSize])
	if _, err := rw.Write(t[helloSize : 2*helloSize+macSize]); err != nil {
		return handshakeIOError("sending the server's hello", "", err)
	}
	if _, err := io.ReadFull(rw, cmac); err != nil {
		return handshakeIOError("reading the client's proof", "the client has another secret, or gave up", err)
	}
	var want [macSize]byte
	if !hmac.Equal(cmac, authMAC(want[:], secret, labelClient, t[:2*helloSize+macSize])) {
		return fmt.Errorf("%w: the client's proof does not match (another secret, or replayed handshake bytes)", ErrAuth)
	}
	return nil
}

// clientHandshake authenticates the server at the other end of rw for
// job under secret, then proves the client; the caller bounds it with a
// deadline.
func clientHandshake(rw io.ReadWriter, secret []byte, job uint32) error {
	var t [transcriptSize]byte
	ch, sh := t[:helloSize], t[helloSize:2*helloSize]
	smac, cmac := t[2*helloSize:2*helloSize+macSize], t[2*helloSize+macSize:]
	c := hello{role: roleClient, job: job}
	rand.Read(c.nonce[:])
	putHello(ch, &c)
	if _, err := rw.Write(ch); err != nil {
		return handshakeIOError("sending the client's hello", "", err)
	}
	if _, err := io.ReadFull(rw, t[helloSize:2*helloSize+macSize]); err != nil {
		return handshakeIOError("reading the server's hello",
			"the server is in another job, does not authenticate, or shed the connection to make room for others", err)
	}
	if _, err := parseHello(sh, roleServer, job); err != nil {
		return err
	}
	var want [macSize]byte
	if !hmac.Equal(smac, authMAC(want[:], secret, labelServer, t[:2*helloSize])) {
		return fmt.Errorf("%w: the server's proof does not match (another secret)", ErrAuth)
	}
	authMAC(cmac, secret, labelClient, t[:2*helloSize+macSize])
	if _, err := rw.Write(cmac); err != nil {
		return handshakeIOError("sending the client's proof", "", err)
	}
	return nil
}

// handshakeIOError describes a socket error during a handshake step; hint
// says why a peer may close at that step, as peers answer a handshake they
// reject by closing. A close matches ErrHandshakeClosed too.
func handshakeIOError(step, hint string, err error) error {
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		if hint != "" {
			hint = " (" + hint + ")"
		}
		return &joined{ErrAuth, ErrHandshakeClosed, fmt.Sprintf("%v: the peer closed the connection while %s%s", ErrAuth, step, hint)}
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w: timed out %s: %w", ErrAuth, step, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrAuth, step, err)
}
