package rdma

import (
	"context"
	"errors"
	"time"
)

// streamReader is the receive side of a connection that reads frames
// from a byte stream (TCP, shm), as readMsg uses it; its methods run
// under recvMu.
type streamReader interface {
	// readFull fills p from the stream and returns crc updated over it
	// if sum.
	readFull(ctx context.Context, p []byte, sum bool, crc uint32) (uint32, error)
	// readPayload is readFull for a frame's payload, which shm may take
	// from elsewhere than the stream.
	readPayload(ctx context.Context, p []byte, sum bool, crc uint32) (uint32, error)
	// fatal records a receive error that cost the stream its frame sync.
	fatal(err error) error
}

// readMsg reads what follows the header h on r (data, encoded payload,
// trailer) into a new message, checks the trailer and decodes the
// payload, through rwire, the connection's decode buffer, for codecs
// other than none; trl holds the trailer. A payload that fails its
// checks is counted as dropped, and the error is recoverable.
func (e *endpoint) readMsg(ctx context.Context, r streamReader, h *Header, rwire *[]byte, trl []byte) (*Msg, error) {
	m := e.recvMsg(h)
	if err := e.readBody(ctx, r, h, m, rwire, trl); err != nil {
		m.Release()
		if Recoverable(err) {
			e.countDropped()
		}
		return nil, err
	}
	m.header(h)
	return m, nil
}

func (e *endpoint) readBody(ctx context.Context, r streamReader, h *Header, m *Msg, rwire *[]byte, trl []byte) error {
	if cap(m.Data) < int(h.DataLen) {
		m.Data = make([]byte, h.DataLen)
	}
	m.Data = m.Data[:h.DataLen]
	wire := f32bytes(m.Payload)
	if h.Codec != CodecNone {
		*rwire = grow(*rwire, int(h.PayloadLen))
		wire = *rwire
	}
	sum := h.Flags&FlagNoPayloadCRC == 0
	crc, err := r.readFull(ctx, m.Data, sum, 0)
	if err == nil {
		crc, err = r.readPayload(ctx, wire, sum, crc)
	}
	if err != nil {
		return r.fatal(err)
	}
	if crc, err = r.readFull(ctx, trl, true, crc); err != nil {
		return r.fatal(err)
	}
	// The trailer went through the checksum too: CRC32C over data, payload
	// and the stored CRC (little-endian) yields a constant residue. Without
	// a payload checksum only the trailer, which must be zero, was summed,
	// and CRC32C(00 00 00 00) is that same residue.
	if crc != crcResidue {
		return e.opError("recv", ErrChecksum, true)
	}
	if h.Codec == CodecNone {
		e.countRecv(m, CodecNone, len(wire), 0)
		return nil
	}
	if err := e.decode(m, h.Codec, wire); err != nil {
		return e.opError("recv", err, true)
	}
	return nil
}

// frame checks m against the limits, stamps the job, encodes the payload
// (into *swire for codecs other than none) and returns the frame header,
// the encoded payload and the time encoding took: the start of a Send on
// a stream. It runs under sendMu.
func (e *endpoint) frame(m *Msg, swire *[]byte) (h Header, payload []byte, d time.Duration, err error) {
	if err := e.checkSend(m); err != nil {
		return h, nil, 0, err
	}
	payload = f32bytes(m.Payload)
	if m.Codec.ID != CodecNone {
		if *swire, d, err = e.encode(*swire, m); err != nil {
			return h, nil, 0, err
		}
		payload = *swire
	}
	var flags uint8
	if e.opts.NoPayloadChecksum {
		flags = FlagNoPayloadCRC
	}
	h = Header{Type: m.Type, Codec: m.Codec.ID, Flags: flags, Job: m.Job, Learner: m.Learner, Shard: m.Shard,
		Elems: uint32(len(m.Payload)), Timestamp: m.Timestamp, Seq: m.Seq,
		PayloadLen: uint32(len(payload)), DataLen: uint32(len(m.Data))}
	return h, payload, d, nil
}

// lostSync records in *rerr, and returns, a receive error that cost the
// stream its frame sync, as an *OpError.
func (e *endpoint) lostSync(rerr *error, err error) error {
	var oe *OpError
	if !errors.As(err, &oe) {
		err = e.opError("recv", err, false)
	}
	*rerr = err
	return err
}
