package rdma

import (
	"encoding/binary"
	"fmt"

	"github.com/softsync/softsync/rdma/internal/verbs"
)

// Verbs packets (docs/wire.md, "Over verbs"). A frame travels as a verbs
// frame: the 52-byte frame header, 12 zero bytes (so that the payload
// starts 64-byte aligned in the receiver's buffer), the encoded payload,
// the data and the trailer, which is the CRC32C of data ‖ payload exactly
// as on TCP. Small frames go by SEND into a pre-posted receive buffer
// after an 8-byte control header; large ones by RDMA WRITE WITH IMMEDIATE
// into a buffer the receiver advertised, the immediate naming the buffer.
// Control packets (credits, advertisements, buffer requests, the probe)
// are SENDs with the same control header:
//
//	off size
//	  0   1  kind (pkFrame, pkCredit, pkAdvert, pkRequest, pkProbe)
//	  1   1  0
//	  2   2  credits: receives the sender has posted since it last said
//	  4   4  count: advertisements (pkAdvert) or released ids (pkRequest)
//
// pkAdvert carries count entries of 24 bytes: buffer id, rkey (uint32),
// address, capacity (uint64). pkRequest carries the capacity needed
// (uint64), then count buffer ids (uint32) the sender gives back unused.
const (
	vHeader  = 64 // frame header and padding before the payload
	vCtl     = 8  // control header of a SEND packet
	vAdvert  = 24 // one advertisement
	vMinSlot = 256

	pkFrame   = 1
	pkCredit  = 2
	pkAdvert  = 3
	pkRequest = 4
	pkProbe   = 5
)

// vFrameLen is the length of a verbs frame with w payload and d data bytes.
func vFrameLen(w, d int) int { return vHeader + w + d + TrailerSize }

// advert is a buffer the peer may write one frame into.
type advert struct {
	id   uint32
	rkey uint32
	addr uint64
	cap  uint64
}

func putCtl(b []byte, kind byte, credits int, count int) {
	b[0], b[1] = kind, 0
	binary.LittleEndian.PutUint16(b[2:], uint16(credits))
	binary.LittleEndian.PutUint32(b[4:], uint32(count))
}

func putAdvert(b []byte, a advert) {
	le := binary.LittleEndian
	le.PutUint32(b, a.id)
	le.PutUint32(b[4:], a.rkey)
	le.PutUint64(b[8:], a.addr)
	le.PutUint64(b[16:], a.cap)
}

func getAdvert(b []byte) advert {
	le := binary.LittleEndian
	return advert{id: le.Uint32(b), rkey: le.Uint32(b[4:]), addr: le.Uint64(b[8:]), cap: le.Uint64(b[16:])}
}

// Transport-reserved message types of the TCP control connection of a
// verbs or auto connection.
const (
	typeHello Type = 0xf1 // connection details, or why verbs cannot be used
	typeReady Type = 0xf2 // the probe over the queue pair went through (Seq 1) or not (Data: why)
	typeBye   Type = 0xf3 // Seq: packets sent over the queue pair; no more will come
	typeAck   Type = 0xf4 // answers typeBye: the sender posts nothing more either
	typeAbort Type = 0xf5 // the sender's queue pair failed (Data: why)
	// auto's move to shm (shm_auto.go)
	typeShmOffer  Type = 0xf6 // Seq 1: Data is a nonce and a unix socket name; Seq 0: Data is why no shm
	typeShmResult Type = 0xf7 // the dialer's shm connection is up (Seq 1), or why not (Data)
)

// verbsHello is the handshake message of a verbs or auto connection.
type verbsHello struct {
	auto      bool // the sender falls back to TCP if verbs cannot be used
	ok        bool // the sender has a usable device, port and queue pair
	shm       bool // the sender (an auto dialer) takes an offer of shm
	link      verbs.LinkLayer
	gidType   verbs.GIDType
	mtu       verbs.MTU
	lid       uint16
	qpn       uint32
	psn       uint32
	gid       [16]byte
	recvDepth int
	slotSize  int
	fabric    uint64
	text      string // ok: the device ("mlx5_0:1"); else why not
}

const helloVersion = 1
const helloLen = 52

// Hello layout (Data of a typeHello frame), little-endian:
//
//	0 1 version (1)   1 1 flags: 1 auto, 2 ok, 4 shm   2 1 link layer   3 1 GID type
//	4 1 MTU           5 1 0                     6 2 LID
//	8 4 QP number    12 4 PSN                  16 16 GID
//	32 2 receive depth 34 2 0                  36 4 slot size
//	40 8 fabric (0: hardware; else the emulation's id)
//	48 4 text length, then the text
func (h *verbsHello) marshal(dst []byte) []byte {
	b := make([]byte, helloLen, helloLen+len(h.text))
	b[0] = helloVersion
	if h.auto {
		b[1] |= 1
	}
	if h.ok {
		b[1] |= 2
	}
	if h.shm {
		b[1] |= 4
	}
	b[2], b[3], b[4] = byte(h.link), byte(h.gidType), byte(h.mtu)
	le := binary.LittleEndian
	le.PutUint16(b[6:], h.lid)
	le.PutUint32(b[8:], h.qpn)
	le.PutUint32(b[12:], h.psn)
	copy(b[16:32], h.gid[:])
	le.PutUint16(b[32:], uint16(h.recvDepth))
	le.PutUint32(b[36:], uint32(h.slotSize))
	le.PutUint64(b[40:], h.fabric)
	le.PutUint32(b[48:], uint32(len(h.text)))
	return append(append(dst, b...), h.text...)
}

func (h *verbsHello) unmarshal(b []byte) error {
	le := binary.LittleEndian
	if len(b) < helloLen || b[0] != helloVersion || int(le.Uint32(b[48:])) != len(b)-helloLen {
		return fmt.Errorf("%w: malformed verbs verbsHello (%d bytes, version %d)", ErrBadVersion, len(b), b[0])
	}
	*h = verbsHello{auto: b[1]&1 != 0, ok: b[1]&2 != 0, shm: b[1]&4 != 0, link: verbs.LinkLayer(b[2]), gidType: verbs.GIDType(b[3]),
		mtu: verbs.MTU(b[4]), lid: le.Uint16(b[6:]), qpn: le.Uint32(b[8:]), psn: le.Uint32(b[12:]),
		recvDepth: int(le.Uint16(b[32:])), slotSize: int(le.Uint32(b[36:])), fabric: le.Uint64(b[40:]),
		text: string(b[helloLen:])}
	copy(h.gid[:], b[16:32])
	if h.ok && (h.recvDepth < 2 || h.slotSize < vMinSlot) {
		return fmt.Errorf("%w: verbs verbsHello with receive depth %d, slot size %d", ErrBadVersion, h.recvDepth, h.slotSize)
	}
	return nil
}
