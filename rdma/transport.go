package rdma

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Conn is one bidirectional, ordered, message-preserving connection.
//
// Contract:
//   - Messages arrive in the order they were sent, each exactly once, with
//     every header field, Data and the payload as encoded by its codec
//     (lossless codecs bit for bit).
//   - Send takes ownership of m (see Msg), also when it fails. It returns
//     once the transport has taken the message over: TCP when it is written
//     to the socket, in-memory when it is queued for the receiver. A nil
//     error does not mean the peer has processed it.
//   - Send and Recv may each be called from several goroutines; calls of
//     one kind are serialized (the order of concurrent Sends is the order
//     they take the connection). Sending and receiving proceed
//     concurrently, and a peer that sends must keep receiving, or both
//     ends can block on full buffers.
//   - Errors are *OpError values naming the peer; Recoverable tells whether
//     the connection is still usable in that direction.
//   - Cancelling ctx makes a blocked call return an error wrapping
//     ctx.Err(). Cancellation while waiting for a message (or before
//     anything was written) leaves the connection usable; cancellation in
//     the middle of a frame is fatal for that direction.
//   - Recv after the peer closed returns, once the messages sent before
//     are delivered, an error matching ErrClosed and io.EOF. Close may be
//     called at any time, from any goroutine, more than once; it unblocks
//     pending calls, which return ErrClosed.
//   - Stats and Transport may be called at any time.
type Conn interface {
	Send(ctx context.Context, m *Msg) error
	Recv(ctx context.Context) (*Msg, error)
	Close() error
	LocalAddr() string
	RemoteAddr() string
	Stats() Stats
	// Transport says which transport carries the connection and why
	// (an auto network's choice for this peer).
	Transport() TransportInfo
}

// Placement names where the payload of a received message goes: given
// the frame's type, shard, sequence and element count, before the payload
// is read, it returns a slice of exactly elems floats for the payload to
// be written (or decoded) into, or nil for a buffer of the transport's.
// It runs on the goroutine calling Recv, under the connection's receive
// lock. The received Msg then has that slice as its borrowed Payload (see
// Msg.Borrowed); if Recv fails after the placement, the slice's contents
// are undefined.
type Placement func(t Type, shard uint32, seq uint64, elems int) []float32

// Placer is implemented by every connection of this package: Place sets
// the connection's Placement (nil: none), taking effect at the next Recv.
// TCP and shm read a placed payload straight from the stream or ring into
// it, in-memory copies it there; verbs leaves large payloads where the
// peer wrote them and ignores the placement, so a receiver checks
// Msg.Borrowed.
type Placer interface {
	Place(f Placement)
}

// TransportInfo describes how one connection travels.
type TransportInfo struct {
	// Name is "inmem", "tcp", "shm" or "verbs".
	Name string
	// Reason says why: "requested" when the network had no choice to make,
	// else how shm found the peer on the same host, the devices used, or
	// why verbs was not used ("local: no RDMA support in this kernel ...",
	// "peer: ...") and, in parentheses, why shm was not.
	Reason string
	// Device is the local RDMA device and port ("mlx5_0:1"), verbs only.
	Device string
	// Emulated is set for verbs over the in-process emulation (see
	// NewEmulation), which moves memory with copies instead of a device.
	Emulated bool
}

// String is "name (reason)".
func (t TransportInfo) String() string {
	s := t.Name
	if t.Emulated {
		s += " (emulated)"
	}
	if t.Reason != "" {
		s += ": " + t.Reason
	}
	return s
}

var requested = TransportInfo{Reason: "requested"}

// Listener accepts connections at one address.
type Listener interface {
	// Accept waits for the next connection; after Close it returns
	// ErrClosed, and when ctx ends a recoverable error wrapping ctx.Err().
	// Connections that fail to authenticate never reach Accept (see
	// Options.Secret).
	Accept(ctx context.Context) (Conn, error)
	// Addr is the address peers dial (with the port chosen, for ":0").
	Addr() string
	// Close stops accepting and unblocks Accept; connections already
	// accepted stay open.
	Close() error
	// Stats may be called at any time.
	Stats() ListenerStats
}

// Network creates listeners and connections of one transport. Its methods
// are safe for concurrent use.
type Network interface {
	// Name is the transport's name ("inmem", "tcp", "shm", "verbs", "auto").
	Name() string
	Listen(addr string) (Listener, error)
	// Dial connects to a listener; if nothing listens there the error
	// matches ErrRefused.
	Dial(ctx context.Context, addr string) (Conn, error)
	// NewMsg returns a message with len(Payload) == n (contents
	// undefined), zeroed header and empty Data, whose payload lives where
	// this transport sends from and receives into without an extra copy:
	// registered memory for verbs (while the network has a listener or a
	// connection; ordinary memory otherwise), the process's lend segment
	// for large payloads of shm (which its peers map, so that they copy
	// the payload straight out of it), the process-wide pool (package
	// NewMsg) for TCP and in-memory. Release returns it to the allocator
	// it came from. Messages of any origin may be sent on any connection;
	// one from another allocator costs a copy on verbs and shm.
	NewMsg(n int) *Msg
}

// Options configures a Network. The zero value is usable: zero fields
// take the defaults listed.
type Options struct {
	// Job is stamped on every frame sent; frames of any other job are
	// rejected on receipt with ErrWrongJob. With a Secret, the handshake
	// binds it too: peers of another job fail to connect.
	Job uint32
	// MaxElems bounds a message's payload (default DefaultLimits().MaxElems,
	// at most MaxElems); MaxData its byte payload (default
	// DefaultLimits().MaxData). Larger messages fail on Send and are
	// rejected on receipt with ErrFrameTooLarge.
	MaxElems uint32
	MaxData  uint32
	// QueueLen is how many messages an in-memory connection buffers per
	// direction before Send blocks (default 16).
	QueueLen int
	// SocketBuffer sets SO_SNDBUF and SO_RCVBUF of TCP sockets, in bytes.
	// The default 0 keeps the kernel's autotuning, which usually does
	// better than a fixed size on Linux.
	SocketBuffer int
	// NoPayloadChecksum sends frames without the payload CRC32C (flag
	// FlagNoPayloadCRC, zero trailer), for links whose own checksums are
	// trusted: on loopback the checksum costs about a quarter of the
	// throughput. Headers stay checksummed, and frames from peers are
	// verified whenever they carry a checksum.
	NoPayloadChecksum bool

	// Secret, when not empty, makes every TCP connection (and shm's unix
	// socket connections) authenticate both ways before any frame is read
	// (or shared memory set up): a challenge–response handshake
	// with fresh nonces from both sides and HMAC-SHA256 under Secret over
	// the job id (docs/wire.md, "Handshake"), so that only processes that
	// hold the job's secret can connect, and recorded handshakes cannot be
	// replayed. Both ends need the same Secret and Job. It must have at
	// least 16 bytes; 32 random bytes per job are the usual choice. The
	// handshake authenticates the peers once; it neither encrypts nor
	// signs the frames that follow. The in-memory transport, whose peers
	// are in one process, ignores it.
	Secret []byte
	// Insecure lets a TCP listener without a Secret bind to an address
	// that is not loopback; without it such a Listen fails with
	// ErrInsecure, as anyone who reaches the port could end or poison the
	// job. Loopback addresses (127.0.0.0/8, ::1, localhost) need neither.
	Insecure bool
	// HandshakeTimeout bounds a handshake, on either side (default 5 s);
	// a listener closes a peer that has not finished by then.
	HandshakeTimeout time.Duration
	// MaxHandshakes bounds how many connections a listener authenticates
	// at once, counting authenticated ones not yet accepted (default 64),
	// so that connections that never finish their handshake cost at most
	// this many goroutines and sockets. A connection beyond that sheds
	// the connection in its handshake that has kept the listener waiting
	// longest for its next message (connected, or sent its hello,
	// longest ago), so that idle or slow connections, however many, do
	// not keep peers that hold the secret out; with every slot held by
	// authenticated connections the new one is closed unread. Both are
	// counted in ListenerStats.Rejected and reported to OnAuthFailure.
	MaxHandshakes int
	// OnAuthFailure, if not nil, is called with the peer's address ("pid
	// N" for shm's unix sockets) and the reason (matching ErrAuth, and
	// ErrProtocol for a shm set-up that breaks the protocol) for every
	// connection a listener closes
	// without accepting it. It is called from the listener's goroutines,
	// possibly concurrently, must return promptly and must not close the
	// listener. The peer itself is told nothing: its connection is reset.
	OnAuthFailure func(peer string, err error)
	// Verbs configures the verbs transport and the verbs side of auto.
	Verbs VerbsOptions
	// OnConnect, if not nil, is called by verbs and auto networks once for
	// every TCP connection they dial or accept, when its handshake ends,
	// on either end, with the connection's addresses, its transport and
	// why, and err when the connection could not be made (on Dial the
	// error is returned too; an accepted connection that fails its
	// handshake is dropped and only reported here). It runs on the goroutine that set the connection up
	// and must not block. The library never logs: this is how callers
	// learn what auto chose for each peer.
	OnConnect func(local, remote string, t TransportInfo, err error)
}

func (o Options) withDefaults() (Options, error) {
	def := DefaultLimits()
	if o.MaxElems == 0 {
		o.MaxElems = def.MaxElems
	}
	if o.MaxData == 0 {
		o.MaxData = def.MaxData
	}
	if o.QueueLen == 0 {
		o.QueueLen = 16
	}
	if o.HandshakeTimeout == 0 {
		o.HandshakeTimeout = 5 * time.Second
	}
	if o.MaxHandshakes == 0 {
		o.MaxHandshakes = 64
	}
	o.Secret = slices.Clone(o.Secret) // the caller may reuse its slice
	switch {
	case len(o.Secret) > 0 && len(o.Secret) < minSecret:
		return o, fmt.Errorf("rdma: Options.Secret has %d bytes, want at least %d", len(o.Secret), minSecret)
	case o.HandshakeTimeout < 0:
		return o, fmt.Errorf("rdma: Options.HandshakeTimeout %v is negative", o.HandshakeTimeout)
	case o.MaxHandshakes < 0:
		return o, fmt.Errorf("rdma: Options.MaxHandshakes %d is negative", o.MaxHandshakes)
	case o.MaxElems > MaxElems:
		return o, fmt.Errorf("rdma: Options.MaxElems %d exceeds %d", o.MaxElems, MaxElems)
	case o.QueueLen < 0:
		return o, fmt.Errorf("rdma: Options.QueueLen %d is negative", o.QueueLen)
	case o.SocketBuffer < 0:
		return o, fmt.Errorf("rdma: Options.SocketBuffer %d is negative", o.SocketBuffer)
	}
	var err error
	o.Verbs, err = o.Verbs.withDefaults()
	return o, err
}

func (o *Options) limits() Limits {
	return Limits{MaxElems: o.MaxElems, MaxData: o.MaxData, Job: o.Job}
}

// Open returns the Network named kind: "inmem", "tcp", "shm" (shared
// memory between processes of one host; an error matching
// ErrUnsupported off Linux), "verbs" (an error matching ErrUnsupported
// when this build or host has no usable RDMA device) or "auto" (TCP
// connections that each move to shm when the peer is on the same host,
// else to verbs when both ends have a usable device and port; see
// NewAuto).
func Open(kind string, opts Options) (Network, error) {
	switch kind {
	case "inmem":
		return NewInmem(opts)
	case "tcp":
		return NewTCP(opts)
	case "shm":
		return NewShm(opts)
	case "verbs":
		return NewVerbs(opts)
	case "auto":
		return NewAuto(opts)
	}
	return nil, fmt.Errorf("rdma: unknown transport %q (%s)", kind, strings.Join(Kinds(), ", "))
}

// Kinds returns the names Open knows, in the order of its documentation.
func Kinds() []string { return []string{"inmem", "tcp", "shm", "verbs", "auto"} }

// NumCodecs is the number of codec ids (the length of Stats' arrays).
const NumCodecs = int(numCodecs)

// CodecStats counts the messages of one codec in one direction.
type CodecStats struct {
	Msgs      uint64
	RawBytes  uint64        // payload bytes before encoding (4 per element)
	WireBytes uint64        // encoded payload bytes
	Time      time.Duration // time spent encoding (sent) or decoding (received)
}

// Ratio is WireBytes/RawBytes (1 when nothing was counted).
func (s CodecStats) Ratio() float64 {
	if s.RawBytes == 0 {
		return 1
	}
	return float64(s.WireBytes) / float64(s.RawBytes)
}

// Add accumulates o into s.
func (s *CodecStats) Add(o CodecStats) {
	s.Msgs += o.Msgs
	s.RawBytes += o.RawBytes
	s.WireBytes += o.WireBytes
	s.Time += o.Time
}

// Sub returns s − o: the traffic between an earlier snapshot o and s.
func (s CodecStats) Sub(o CodecStats) CodecStats {
	return CodecStats{s.Msgs - o.Msgs, s.RawBytes - o.RawBytes, s.WireBytes - o.WireBytes, s.Time - o.Time}
}

// Stats counts a connection's traffic, per codec and direction. Frame
// overhead is HeaderSize+TrailerSize bytes per message plus Data, counted
// in FrameBytes (in-memory and verbs connections count what TCP would
// send).
type Stats struct {
	Sent, Recv     [NumCodecs]CodecStats // indexed by CodecID
	FrameBytesSent uint64
	FrameBytesRecv uint64
	Dropped        uint64 // received frames rejected with a recoverable error
}

// Add accumulates o into s.
func (s *Stats) Add(o *Stats) {
	for i := range s.Sent {
		s.Sent[i].Add(o.Sent[i])
		s.Recv[i].Add(o.Recv[i])
	}
	s.FrameBytesSent += o.FrameBytesSent
	s.FrameBytesRecv += o.FrameBytesRecv
	s.Dropped += o.Dropped
}

// TotalSent sums Sent over all codecs.
func (s *Stats) TotalSent() (t CodecStats) {
	for _, c := range s.Sent {
		t.Add(c)
	}
	return t
}

// TotalRecv sums Recv over all codecs.
func (s *Stats) TotalRecv() (t CodecStats) {
	for _, c := range s.Recv {
		t.Add(c)
	}
	return t
}

// endpoint is what both transports share: options, the codec state of each
// direction and the counters.
type endpoint struct {
	opts   Options
	lim    Limits
	local  string
	remote string

	sendMu sync.Mutex // serializes Send; guards enc
	enc    *Encoder
	recvMu sync.Mutex // serializes Recv; guards dec and place
	dec    *Decoder
	place  Placement

	statsMu sync.Mutex
	stats   Stats
}

func (e *endpoint) init(opts Options, local, remote string) {
	e.opts, e.lim, e.local, e.remote = opts, opts.limits(), local, remote
	e.enc, e.dec = NewEncoder(), NewDecoder()
}

// handOver replaces the limits and clears the counters of a connection
// that carried a handshake, before it is handed to the application.
func (e *endpoint) handOver(l Limits) {
	e.lim = l
	e.statsMu.Lock()
	e.stats = Stats{}
	e.statsMu.Unlock()
}

// Place sets the connection's Placement (see Placer).
func (e *endpoint) Place(f Placement) {
	e.recvMu.Lock()
	e.place = f
	e.recvMu.Unlock()
}

// placed returns the memory the Placement names for a received payload,
// nil if none (or a slice of the wrong length); it runs under recvMu.
func (e *endpoint) placed(t Type, shard uint32, seq uint64, elems int) []float32 {
	if e.place == nil || elems == 0 {
		return nil
	}
	if p := e.place(t, shard, seq, elems); len(p) == elems {
		return p
	}
	return nil
}

// recvMsg returns the message a frame with header h is received into:
// its payload placed (borrowed) or from the pool; it runs under recvMu.
func (e *endpoint) recvMsg(h *Header) *Msg {
	if p := e.placed(h.Type, h.Shard, h.Seq, int(h.Elems)); p != nil {
		m := NewMsg(0)
		m.Borrow(p)
		return m
	}
	return NewMsg(int(h.Elems))
}

func (e *endpoint) LocalAddr() string  { return e.local }
func (e *endpoint) RemoteAddr() string { return e.remote }

func (e *endpoint) Stats() Stats {
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	return e.stats
}

func (e *endpoint) opError(op string, err error, recoverable bool) error {
	return &OpError{Op: op, Peer: e.remote, Err: err, Recoverable: recoverable}
}

// checkSend validates m against the limits and stamps the job; it runs
// under sendMu.
func (e *endpoint) checkSend(m *Msg) error {
	if err := m.Codec.Validate(); err != nil {
		return e.opError("send", err, true)
	}
	if uint64(len(m.Payload)) > uint64(e.lim.MaxElems) || uint64(len(m.Data)) > uint64(e.lim.MaxData) {
		return e.opError("send", fmt.Errorf("%w: %d elements (limit %d), %d data bytes (limit %d)",
			ErrFrameTooLarge, len(m.Payload), e.lim.MaxElems, len(m.Data), e.lim.MaxData), true)
	}
	m.Job = e.opts.Job
	return nil
}

// encode encodes m's payload into dst for sending (not called for
// CodecNone) and returns the time taken; it runs under sendMu.
func (e *endpoint) encode(dst []byte, m *Msg) ([]byte, time.Duration, error) {
	t := time.Now()
	wire, err := e.enc.Encode(dst, m.Codec, m.Feedback, m.Payload)
	if err != nil {
		return wire, 0, e.opError("send", err, true)
	}
	return wire, time.Since(t), nil
}

// unsent hands what a failed Send of m took from its Feedback back (wire is
// m's encoded payload); it runs under sendMu.
func unsent(m *Msg, wire []byte) {
	if m.Codec.ID == CodecTopK && m.Feedback != nil {
		m.Feedback.giveBack(wire, len(m.Payload))
	}
}

// countSent counts one message sent: id its codec, elems its element
// count, data its byte payload length, wire its encoded payload length.
func (e *endpoint) countSent(id CodecID, elems, data, wire int, d time.Duration) {
	e.statsMu.Lock()
	count(&e.stats.Sent[id], elems, wire, d)
	e.stats.FrameBytesSent += uint64(HeaderSize + TrailerSize + data + wire)
	e.statsMu.Unlock()
}

func count(s *CodecStats, elems, wire int, d time.Duration) {
	s.Msgs++
	s.RawBytes += 4 * uint64(elems)
	s.WireBytes += uint64(wire)
	s.Time += d
}

// decode fills m.Payload from wire under codec id and counts it; it runs
// under recvMu.
func (e *endpoint) decode(m *Msg, id CodecID, wire []byte) error {
	t := time.Now()
	if err := e.dec.Decode(m.Payload, id, wire); err != nil {
		return err
	}
	e.countRecv(m, id, len(wire), time.Since(t))
	return nil
}

func (e *endpoint) countRecv(m *Msg, id CodecID, wire int, d time.Duration) {
	e.statsMu.Lock()
	count(&e.stats.Recv[id], len(m.Payload), wire, d)
	e.stats.FrameBytesRecv += uint64(HeaderSize + TrailerSize + len(m.Data) + wire)
	e.statsMu.Unlock()
}

func (e *endpoint) countDropped() {
	e.statsMu.Lock()
	e.stats.Dropped++
	e.statsMu.Unlock()
}

// closeCodecs releases the codec state once both directions are idle.
func (e *endpoint) closeCodecs() {
	e.sendMu.Lock()
	e.enc.Close()
	e.sendMu.Unlock()
	e.recvMu.Lock()
	e.dec.Close()
	e.recvMu.Unlock()
}
