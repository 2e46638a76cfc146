package rdma

import (
	"errors"
	"io"
	"syscall"
)

// Sentinel errors. Every error returned by this package wraps one of them
// (or a context error) so callers can test with errors.Is; errors about a
// peer are *OpError values naming the peer's address.
var (
	// ErrClosed: the connection or listener was closed, locally or by the
	// peer. A Recv that finds the peer gone at a frame boundary returns an
	// error matching both ErrClosed and io.EOF.
	ErrClosed = errors.New("rdma: closed")
	// ErrRefused: nothing listens at the dialed address, or the listener
	// went away while the connection was pending (a connect reset by the
	// peer): a dial may try again later.
	ErrRefused = errors.New("rdma: connection refused")
	// ErrUnsupported: the transport is not available in this build or on
	// this host (the verbs transport without libibverbs, for example).
	ErrUnsupported = errors.New("rdma: unsupported")
	// ErrAuth: a connection's handshake failed (Options.Secret): another
	// secret or job id, bytes that are not a handshake, a replayed
	// handshake, a peer that closed or did not finish in time. Dial
	// returns it; a listener only counts it and reports it to
	// Options.OnAuthFailure.
	ErrAuth = errors.New("rdma: authentication failed")
	// ErrHandshakeClosed: the peer closed the connection in the middle
	// of the handshake, without a word; the error matches ErrAuth too.
	// A listener does that to peers of another job or without a
	// secret, and to the connections it sheds when its handshake slots
	// are full (Options.MaxHandshakes): a Dial that fails with it may
	// succeed when tried again after a pause.
	ErrHandshakeClosed = errors.New("rdma: the peer closed the connection during the handshake")
	// ErrInsecure: a TCP listener without Options.Secret on an address
	// that is not loopback, without Options.Insecure.
	ErrInsecure = errors.New("rdma: refusing to listen without authentication")
	// ErrVerbs: a verbs operation failed: opening the device, registering
	// memory, creating or connecting a queue pair, or a work completion
	// with an error status. The connection concerned is closed (or, when
	// setting up an auto connection, replaced by TCP).
	ErrVerbs = errors.New("rdma: verbs error")
	// ErrProtocol: the peer broke the transport's protocol where the
	// frames cannot say so: a shared-memory ring index that moved
	// backwards or past the ring, or a segment or file descriptor that is
	// not what the shm set-up requires. The connection's direction
	// concerned ends, as after a frame that cannot be trusted.
	ErrProtocol = errors.New("rdma: protocol violation by the peer")
	// ErrMemlock: registering RDMA buffers would exceed the process's
	// locked-memory limit (RLIMIT_MEMLOCK, ulimit -l).
	ErrMemlock = errors.New("rdma: locked-memory limit too low for RDMA buffers")

	// ErrBadMagic: the frame does not start with the softsync magic.
	ErrBadMagic = errors.New("rdma: bad frame magic")
	// ErrBadVersion: the frame's version or flags are not understood.
	ErrBadVersion = errors.New("rdma: unsupported frame version or flags")
	// ErrHeaderChecksum: the header's CRC32C does not match.
	ErrHeaderChecksum = errors.New("rdma: header checksum mismatch")
	// ErrFrameTooLarge: the element count or byte payload exceeds the
	// configured limits (checked before anything is allocated).
	ErrFrameTooLarge = errors.New("rdma: frame exceeds size limit")
	// ErrTruncated: the stream ended in the middle of a frame, or a buffer
	// holds less than the frame it starts.
	ErrTruncated = errors.New("rdma: truncated frame")
	// ErrChecksum: the payload's CRC32C does not match.
	ErrChecksum = errors.New("rdma: payload checksum mismatch")
	// ErrUnknownCodec: the codec id (on the wire) or name (in a flag) is
	// not known.
	ErrUnknownCodec = errors.New("rdma: unknown codec")
	// ErrBadCodecParam: a codec parameter is out of range (topk fraction).
	ErrBadCodecParam = errors.New("rdma: bad codec parameter")
	// ErrBadLength: the encoded payload length is inconsistent with the
	// codec and the element count.
	ErrBadLength = errors.New("rdma: payload length inconsistent with codec")
	// ErrCorrupt: an encoded payload does not decode to exactly the
	// announced number of elements (malformed data or a decompression bomb).
	ErrCorrupt = errors.New("rdma: corrupt encoded payload")
	// ErrWrongJob: the frame belongs to another job.
	ErrWrongJob = errors.New("rdma: message for another job")
	// ErrRemote: the peer sent a TypeError message; see Msg.Err.
	ErrRemote = errors.New("rdma: error reported by peer")
)

// OpError is the error type of connection operations: Op is "send",
// "recv", "dial", "accept", "listen" or "close", Peer the remote (or listening)
// address, Err the cause (a sentinel above, a context error or a socket
// error). Recoverable reports whether the connection is still usable in that
// direction: a recoverable Recv error means one bad frame was consumed and
// skipped, and the next Recv returns the next frame.
type OpError struct {
	Op          string
	Peer        string
	Err         error
	Recoverable bool
}

// Error names the operation, the peer and the cause.
func (e *OpError) Error() string {
	s := "rdma: " + e.Op
	if e.Peer != "" {
		switch e.Op {
		case "send", "dial":
			s += " to "
		case "recv":
			s += " from "
		default:
			s += " "
		}
		s += e.Peer
	}
	return s + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }

// Recoverable reports whether err (from Send or Recv) left the connection
// usable: the failed message was skipped and the stream is still in frame
// sync. Fatal errors (bad magic, a header checksum mismatch, an oversized
// frame, a truncated stream, cancellation in the middle of a frame, closed
// connections) return false, and every later call in the same direction
// fails the same way. A caller serving many peers reports a recoverable
// error to the peer (a TypeError message), counts it and goes on reading;
// after a fatal one it may still Send an error message, then Closes.
func Recoverable(err error) bool {
	var oe *OpError
	return errors.As(err, &oe) && oe.Recoverable
}

// peerGone is the error of a Recv that finds the peer closed at a frame
// boundary: it matches ErrClosed and io.EOF.
var peerGone = &joined{ErrClosed, io.EOF, "rdma: closed by peer"}

type joined struct {
	a, b error
	msg  string
}

func (j *joined) Error() string   { return j.msg }
func (j *joined) Unwrap() []error { return []error{j.a, j.b} }

func isAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// ConnectError returns err, the failure of a connect (a socket error),
// as this package's dialers return it: matching ErrRefused too when it
// says that nothing listens there (ECONNREFUSED, and ENOENT for a unix
// socket) or that the listener went away while the connection was
// pending (ECONNRESET: a process that dies with connections in its listen
// backlog resets them), so that a dialer tries again; as it is otherwise.
// A simulated network makes its connect failures with it too.
func ConnectError(err error) error {
	for _, e := range []syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ENOENT} {
		if errors.Is(err, e) {
			return &joined{ErrRefused, err, err.Error()}
		}
	}
	return err
}
