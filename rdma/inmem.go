package rdma

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Inmem is the in-memory transport: connections are pairs of channels
// moving *Msg pointers between goroutines of one process, with no copy and
// no framing. With CodecNone a message arrives as the very Msg that was
// sent. With any other codec the payload is encoded on Send (into a buffer
// that travels with the Msg) and decoded on Recv in place, so that the
// receiver sees exactly what TCP would deliver and Stats count real wire
// bytes and codec time. Addresses are names private to one Inmem.
type Inmem struct {
	opts Options

	mu        sync.Mutex
	listeners map[string]*inmemListener
	next      int
}

var _ Network = (*Inmem)(nil)

// NewInmem returns an in-memory network.
func NewInmem(opts Options) (*Inmem, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Inmem{opts: o, listeners: map[string]*inmemListener{}}, nil
}

// Name returns "inmem".
func (n *Inmem) Name() string { return "inmem" }

// NewMsg returns a message from the process-wide pool (package NewMsg).
func (n *Inmem) NewMsg(k int) *Msg { return NewMsg(k) }

// Listen listens at the name addr; "" or a name ending in ":0" picks a
// fresh name.
func (n *Inmem) Listen(addr string) (Listener, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if addr == "" || strings.HasSuffix(addr, ":0") {
		n.next++
		addr = "inmem:" + strconv.Itoa(n.next)
	}
	if _, ok := n.listeners[addr]; ok {
		return nil, &OpError{Op: "listen", Peer: addr, Err: fmt.Errorf("address in use")}
	}
	l := &inmemListener{net: n, addr: addr, conns: make(chan *inmemConn, 64), done: make(chan struct{})}
	n.listeners[addr] = l
	return l, nil
}

// Dial connects to the listener at addr.
func (n *Inmem) Dial(ctx context.Context, addr string) (Conn, error) {
	n.mu.Lock()
	l := n.listeners[addr]
	n.next++
	local := "inmem-client:" + strconv.Itoa(n.next)
	n.mu.Unlock()
	if l == nil {
		return nil, &OpError{Op: "dial", Peer: addr, Err: ErrRefused}
	}
	a, b := newInmemConn(n.opts, local, addr), newInmemConn(n.opts, addr, local)
	a.peer, b.peer = b, a
	if err := l.enqueue(ctx, b); err != nil {
		return nil, &OpError{Op: "dial", Peer: addr, Err: err}
	}
	return a, nil
}

type inmemListener struct {
	net      *Inmem
	addr     string
	conns    chan *inmemConn
	done     chan struct{}
	once     sync.Once
	accepted atomic.Uint64
}

func (l *inmemListener) Addr() string { return l.addr }

func (l *inmemListener) Stats() ListenerStats { return ListenerStats{Accepted: l.accepted.Load()} }

func (l *inmemListener) Accept(ctx context.Context) (Conn, error) {
	select {
	case <-l.done:
		return nil, &OpError{Op: "accept", Peer: l.addr, Err: ErrClosed}
	default:
	}
	select {
	case c := <-l.conns:
		l.accepted.Add(1)
		return c, nil
	case <-l.done:
		return nil, &OpError{Op: "accept", Peer: l.addr, Err: ErrClosed}
	case <-ctx.Done():
		return nil, &OpError{Op: "accept", Peer: l.addr, Err: ctx.Err(), Recoverable: true}
	}
}

// enqueue puts the accepting end b of a dialled connection into the
// listener's backlog, or fails with ErrRefused if the listener is closed
// (also when it closes meanwhile: a listener that closes refuses the
// connections it has not accepted, as a socket's close resets them).
func (l *inmemListener) enqueue(ctx context.Context, b *inmemConn) error {
	select {
	case l.conns <- b:
	case <-l.done:
		return ErrRefused
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-l.done:
		// Closed meanwhile: its Close may have emptied the backlog before
		// b went in (select picks at random between a free slot and a
		// closed done), and nothing would ever accept or close b, its
		// dialer waiting for an answer for ever.
		l.drain()
		if b.closed.Load() {
			return ErrRefused
		}
	default:
	}
	return nil
}

func (l *inmemListener) Close() error {
	l.once.Do(func() {
		l.net.mu.Lock()
		delete(l.net.listeners, l.addr)
		l.net.mu.Unlock()
		close(l.done)
		l.drain()
	})
	return nil
}

// drain closes the connections dialled and never accepted.
func (l *inmemListener) drain() {
	for {
		select {
		case c := <-l.conns:
			c.Close()
		default:
			return
		}
	}
}

type inmemConn struct {
	endpoint
	in     chan *Msg // messages for this end
	peer   *inmemConn
	done   chan struct{}
	closed atomic.Bool
	once   sync.Once
}

func newInmemConn(opts Options, local, remote string) *inmemConn {
	c := &inmemConn{in: make(chan *Msg, opts.QueueLen), done: make(chan struct{})}
	c.init(opts, local, remote)
	return c
}

// Transport reports the in-memory transport, as requested.
func (c *inmemConn) Transport() TransportInfo {
	t := requested
	t.Name = "inmem"
	return t
}

func (c *inmemConn) Send(ctx context.Context, m *Msg) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if err := c.send(ctx, m); err != nil {
		m.Release()
		return err
	}
	return nil
}

func (c *inmemConn) send(ctx context.Context, m *Msg) error {
	if c.closed.Load() {
		return c.opError("send", ErrClosed, false)
	}
	if err := ctx.Err(); err != nil {
		return c.opError("send", err, true)
	}
	if err := c.checkSend(m); err != nil {
		return err
	}
	wire, d := 4*len(m.Payload), time.Duration(0)
	if m.Codec.ID != CodecNone {
		var err error
		if m.wire, d, err = c.encode(m.wire, m); err != nil {
			return err
		}
		wire = len(m.wire)
	}
	m.keep(m.Codec.ID == CodecNone)                            // queued beyond Send: the lender's memory may change
	id, elems, data := m.Codec.ID, len(m.Payload), len(m.Data) // m is the receiver's once queued
	var err error
	select {
	case c.peer.in <- m:
		c.countSent(id, elems, data, wire, d)
		return nil
	case <-c.done:
		err = c.opError("send", ErrClosed, false)
	case <-c.peer.done:
		err = c.opError("send", peerGone, false)
	case <-ctx.Done():
		err = c.opError("send", ctx.Err(), true)
	}
	unsent(m, m.wire)
	return err
}

func (c *inmemConn) Recv(ctx context.Context) (*Msg, error) {
	c.recvMu.Lock()
	defer c.recvMu.Unlock()
	if c.closed.Load() {
		return nil, c.opError("recv", ErrClosed, false)
	}
	if err := ctx.Err(); err != nil {
		return nil, c.opError("recv", err, true)
	}
	select {
	case m := <-c.in:
		return c.deliver(m)
	case <-c.done:
		return nil, c.opError("recv", ErrClosed, false)
	case <-c.peer.done:
		select { // messages sent before the peer closed come first
		case m := <-c.in:
			return c.deliver(m)
		default:
			return nil, c.opError("recv", peerGone, false)
		}
	case <-ctx.Done():
		return nil, c.opError("recv", ctx.Err(), true)
	}
}

// deliver decodes an encoded payload in place, as a TCP receiver would,
// into the memory the Placement names, if any.
func (c *inmemConn) deliver(m *Msg) (*Msg, error) {
	id := m.Codec.ID
	m.Codec, m.Feedback = Codec{ID: id}, nil
	if p := c.placed(m.Type, m.Shard, m.Seq, len(m.Payload)); p != nil {
		if id == CodecNone {
			copyPar(p, m.Payload)
		}
		m.Borrow(p)
	}
	if id == CodecNone {
		c.countRecv(m, id, 4*len(m.Payload), 0)
		return m, nil
	}
	if err := c.decode(m, id, m.wire); err != nil {
		m.Release()
		c.countDropped()
		return nil, c.opError("recv", err, true)
	}
	return m, nil
}

func (c *inmemConn) Close() error {
	c.once.Do(func() {
		c.closed.Store(true)
		close(c.done)
		c.closeCodecs()
		for {
			select {
			case m := <-c.in:
				m.Release()
			default:
				return
			}
		}
	})
	return nil
}
