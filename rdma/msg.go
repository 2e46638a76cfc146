package rdma

import (
	"fmt"
	"math/bits"
	"sync"
	"unsafe"

	"github.com/softsync/softsync/rdma/errcode"
)

// Type is a message's kind. The transport gives meaning only to the types
// from TypeReserved up (TypeError); types below TypeReserved belong to the
// application, which defines them (the parameter server's push, pull,
// weights, ...). The transport never looks at them.
type Type uint8

const (
	// TypeReserved is the first type reserved for the transport.
	TypeReserved Type = 0xf0
	// TypeError carries an error report for the receiver in Data (UTF-8
	// text, then the codes of its sentinels); see NewErrorMsg and Msg.Err.
	TypeError Type = 0xff
)

// Msg is one message: a stamped header, a float32 payload (a gradient or
// weights, possibly empty) and a small byte payload (Data: error text or
// control data, possibly empty).
//
// Ownership. A Msg passed to Send belongs to the transport from that call
// on, whether Send succeeds or not: the sender must not read or write the
// Msg, its Payload or its Data afterwards. The in-memory transport hands
// the very same Msg (same slices, no copy) to the receiver; TCP recycles it
// once written. A Msg returned by Recv belongs to the receiver, who either
// passes it on to Send (replying in place is allowed) or calls Release when
// done. Payload and Data of a received Msg are never shared with anything
// else.
//
// Recycling. NewMsg takes messages from a process-wide pool of size
// classes (powers of two of the payload capacity) and Release returns
// them, so a steady stream of messages allocates nothing. A Msg built as a
// literal may be sent too; its slices then join the pool when released.
// A Network's NewMsg may hand out messages whose payload lies in memory
// of that transport (registered memory, for verbs), and so may its Recv;
// Release returns such a message's memory to that transport. The memory
// belongs to the Msg it came with, not to the slice: Payload may be
// replaced by another slice (the registered memory is then released with
// the Msg all the same), but a registered payload moved into another Msg
// is not that Msg's to keep, and must not be used after either is
// released.
//
// Borrowed payloads. Borrow makes memory the Msg does not own its
// payload: the caller's (a gradient, a shard's weights) on Send, the
// receiver's (see Placement) on Recv. Send is done with a borrowed
// payload when it returns (TCP writes it to the socket; shm, when it is
// memory of the network's NewMsg, waits for the receiver to copy it out,
// and otherwise copies it into its ring; in-memory copies it into a
// buffer of its own; verbs writes it from where it lies when it is memory
// of the network's NewMsg, waiting for the write to complete, and copies
// it otherwise), so the lender may
// change it from then on (BorrowHeld: once a later request has its
// answer); Release never recycles it.
type Msg struct {
	Type    Type
	Codec   Codec  // Send: encoding of Payload on the wire; Recv: the encoding it arrived in (Fraction 0)
	Job     uint32 // set by the transport: Send stamps the connection's job, Recv checks it
	Learner uint32 // sender (learner or server) id, application-defined
	Shard   uint32
	// Timestamp is the parameter-server clock the message refers to (the
	// weights' timestamp a gradient was computed on, for instance).
	Timestamp uint64
	// Seq is the sender's sequence number, application-defined (push ids
	// for idempotence, for instance).
	Seq     uint64
	Payload []float32
	Data    []byte
	// Feedback, on Send, is the error-feedback residual of the stream the
	// message belongs to, for codec TopK (see Feedback); nil sends TopK
	// without error feedback. Other codecs ignore it. The sender keeps
	// ownership of the Feedback itself. A received Msg has none.
	Feedback *Feedback

	wire     []byte    // in-memory transport: encoded payload between Send and Recv
	borrowed bool      // Payload is lent (Borrow): own is the Msg's own buffer
	held     bool      // with borrowed: BorrowHeld
	own      []float32 // with borrowed: the payload buffer Release keeps
	released bool
	pool     *regPool // non-nil: Payload lies in blk, registered memory of pool
	blk      block
	lend     lendAlloc // non-nil: Payload lies in a shm lend segment, lendOff bytes in
	lendOff  uint64
	lendSize uint64 // the bytes given to Payload there
}

// lendAlloc is the allocator of messages whose payload lies in a shm lend
// segment (Shm.NewMsg).
type lendAlloc interface{ releaseMsg(*Msg) }

// NewMsg returns a Msg from the pool with a zeroed header, len(Payload)
// == n (contents undefined) and empty Data.
func NewMsg(n int) *Msg {
	c := sizeClass(n)
	var m *Msg
	if c < len(pools) {
		m, _ = pools[c].Get().(*Msg)
	}
	if m == nil {
		capacity := n // beyond the pools' classes: exactly n, never pooled
		if c < len(pools) {
			capacity = 1 << c
		}
		m = &Msg{Payload: make([]float32, 0, capacity)}
	}
	m.released = false
	m.Payload = m.Payload[:n]
	return m
}

// Release returns m to the allocator it came from (NewMsg's pool or a
// Network's NewMsg). m must not be used afterwards; releasing a Msg twice
// panics.
func (m *Msg) Release() {
	if m.released {
		panic("rdma: Msg released twice")
	}
	if m.borrowed {
		m.Payload, m.own, m.borrowed, m.held = m.own, nil, false, false
	}
	if m.pool != nil {
		m.pool.releaseMsg(m)
		return
	}
	if m.lend != nil {
		m.lend.releaseMsg(m)
		return
	}
	wire, payload, data := m.wire[:0], m.Payload[:0], m.Data[:0]
	if p := unsafe.Pointer(unsafe.SliceData(payload)); cap(payload) > 0 && (spans.contains(p) || lendContains(p)) {
		payload = nil // registered or lend memory moved here from another Msg: not ours to keep
	}
	*m = Msg{Payload: payload, Data: data, wire: wire, released: true}
	if c := bits.Len(uint(cap(payload))) - 1; c >= 0 && c < len(pools) {
		pools[c].Put(m) // every Msg in pools[c] holds at least 1<<c values
	}
}

// Borrow makes p the payload of m without handing it over (see Msg,
// "Borrowed payloads"): m keeps its own buffer for when it is released.
// Borrowing again replaces the lent payload.
func (m *Msg) Borrow(p []float32) {
	if !m.borrowed {
		m.own, m.borrowed = m.Payload, true
	}
	m.Payload = p
}

// BorrowHeld is Borrow by a lender that keeps p unchanged until it has
// received, on the same connection, a message its peer sent after
// reading this one, or until it has closed the connection: a request
// sent after it was answered. A Send over shm of such memory of the
// network's NewMsg then returns once the frame is written, rather than
// once the receiver has copied the payload, which it copies when it reads
// the frame; the other transports are done with p when Send returns, as
// with Borrow. A receiver that finds the sender's end closed once it has
// copied the payload drops the frame (the lender may have changed p
// meanwhile): a lender that closes the connection before an answer may
// lose what it sent.
func (m *Msg) BorrowHeld(p []float32) {
	m.Borrow(p)
	m.held = true
}

// Borrowed reports whether m's payload is lent (Borrow, or a Recv into
// memory its Placement named).
func (m *Msg) Borrowed() bool { return m.borrowed }

// keep gives a message whose payload is borrowed a payload of its own
// from the pool, a copy of the lent one if fill: for a transport that
// holds messages beyond Send.
func (m *Msg) keep(fill bool) {
	if !m.borrowed {
		return
	}
	t := NewMsg(len(m.Payload))
	if fill {
		copyPar(t.Payload, m.Payload)
	}
	m.Payload, t.Payload = t.Payload, m.own
	m.own, m.borrowed, m.held = nil, false, false
	t.Release()
}

// header copies the fields of a received frame header into m.
func (m *Msg) header(h *Header) {
	m.Type, m.Codec, m.Job, m.Learner, m.Shard = h.Type, Codec{ID: h.Codec}, h.Job, h.Learner, h.Shard
	m.Timestamp, m.Seq = h.Timestamp, h.Seq
}

// pools[c] holds messages whose payload capacity is in [1<<c, 1<<(c+1)).
var pools [31]sync.Pool

// sizeClass is the pool that can satisfy n elements: ⌈log2 n⌉.
func sizeClass(n int) int {
	if n <= 1 {
		return 0
	}
	return bits.Len(uint(n - 1))
}

// NewErrorMsg returns a TypeError message carrying err, for reporting a
// rejected message to the peer that sent it: its text and the codes of
// the registered sentinels it matches (errcode.Append; docs/wire.md).
func NewErrorMsg(err error) *Msg {
	m := NewMsg(0)
	m.Type = TypeError
	m.Data = errcode.Append(m.Data, err)
	return m
}

// Err returns, for a TypeError message, an error matching ErrRemote with
// the peer's text, which matches too every sentinel whose code the peer
// sent and this process knows (errcode.Parse); nil for any other type.
func (m *Msg) Err() error {
	if m.Type != TypeError {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrRemote, errcode.Parse(m.Data))
}
