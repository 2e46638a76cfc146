package rdma

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/softsync/softsync/rdma/internal/verbs"
)

// verbsConn is a connection over a Reliable Connected queue pair.
//
// Receive side. RecvDepth (R) receives are posted, each on a slot of
// SlotSize (S) bytes of one registered block (the ring). A SEND fills a
// slot; an RDMA WRITE WITH IMMEDIATE consumes a receive without touching
// its slot and writes into one of our advertised buffers, named by the
// immediate (buffer index and generation). The progress goroutine handles
// control packets at once and reposts their receives; frames are queued
// in arrival order and their receives reposted only after Recv has taken
// them (copied a small frame out, or handed a large buffer to the
// application), so that a peer cannot run ahead of an application that
// does not receive.
//
// Credits. A sender may post a packet that consumes a receive only with a
// credit, one per receive the peer has posted; the peer returns credits
// in the control header of its SENDs, as the receives are reposted.
// Frames and buffer requests need two credits: the last one is kept for a
// credit-only packet, which is sent once half the ring (R/2, at least 2)
// is owed. Deadlock freedom: a sender blocked with at most one credit
// means the receiver owes it R−1 ≥ R/2 receives (unless its application
// holds frames it has not received: back-pressure); the receiver can
// return them unless it has no credit itself, in which case the sender
// owes it R and sends its own credits with its last one. A credit-only
// packet carries at least 2 credits and costs its receiver only 1 owed
// receive, so two idle ends never bounce credits back and forth.
//
// Large frames. A frame that does not fit a slot is written into a buffer
// the receiver advertised (pkAdvert: id, address, rkey, capacity), the
// smallest that fits; with none, the sender asks for one (pkRequest, with
// the capacity and the ids of the advertisements it holds and gives back,
// too small) and waits. After Recv has taken a large frame, the receiver
// advertises buffers of that frame's size class until Window buffers are
// advertised or queued, so that in steady state a gradient or weights go
// without a round trip. A request is answered at once by a new buffer
// unless Window large frames, and queueBytes, wait for Recv already (then
// after the next Recv), or by none when a buffer advertised earlier and
// still on its way fits. RC ordering makes a request, which follows every
// write the sender posted before it, a safe point to free the buffers it
// gives back.
//
// Zero copy. A payload in registered memory of the session (NewMsg, or a
// received message) is written from where it lies, and the Msg is
// released when the write completes; other payloads are copied into a
// registered block first. An encoded payload is encoded straight into a
// registered block. A received large frame with CodecNone becomes the
// received Msg's payload in place (64 bytes into the buffer); other codecs
// decode from the buffer into a fresh message.
//
// Close waits (up to closeLinger) for the packets posted to complete,
// then sends typeBye with the number of packets sent over the TCP control
// connection, which the peer's Recv waits for before reporting the close.
// The peer stops posting, lets what it posted complete and answers
// typeAck; only then does Close destroy the queue pair, so that neither
// end sees a completion error from an orderly close.
//
// Locking: sendMu serializes Send, recvMu Recv; mu guards the state
// below it and every post to the queue pair; the progress goroutine polls
// the completion queue and takes mu per batch.
type verbsConn struct {
	endpoint
	v      *Verbs
	s      *session
	ctl    Conn
	info   TransportInfo
	dialer bool
	qp     verbs.QP
	cq     verbs.CQ
	spin   int
	window int

	R, S         int   // our receive depth and slot size
	peerR, peerS int   // the peer's
	small        int   // largest SEND packet: min(S, peerS)
	ring         block // R receive slots
	slots        block // send slots
	nslots       int
	creditBatch  int

	mu sync.Mutex
	// Send side.
	credits     int
	freeSlots   []int32
	sends       []sendCtx // by slot: what to release when its work request completes
	adverts     []advert  // the peer's buffers we may write, unused
	requested   uint64    // capacity of an unanswered pkRequest
	requests    int       // pkRequests sent
	sentPkts    uint64    // packets posted that consume a receive at the peer
	outstanding int       // work requests posted, not completed
	probeSent   bool
	started     bool // the progress goroutine runs
	// Receive side.
	arrivals    []arrival // ring buffer of frames waiting for Recv
	aHead, aLen int
	toReturn    int // receives reposted, credits not yet returned
	held        int // receives consumed, not yet reposted
	recvdPkts   uint64
	bufs        []rbuf // our buffers for large frames, by index
	freeBufs    []int32
	advertised  int    // buffers advertised, neither filled nor given back
	queuedLarge int    // large frames waiting for Recv
	queuedBytes uint64 // their bytes
	pendingAdv  []advert
	need        uint64 // capacity the peer asked for, not yet advertised
	probed      bool
	// State.
	err      error // the queue pair failed: the connection is broken
	rerr     error // the receive side lost frame sync
	closing  bool
	bye      bool
	byeCount uint64
	acked    bool // the peer answered our typeBye
	live     bool // set up: failures are reported to the peer
	ctlWG    sync.WaitGroup
	ctlErr   error // the control connection ended

	sendWake, recvWake, stateWake, ctlWake chan struct{}
	lentDone                               chan struct{} // a lent payload's write completed (see sendCtx)
	done                                   chan struct{}
	progDone, ctlDone                      chan struct{}
	stopping                               atomic.Bool
	closeOnce                              sync.Once

	wcs [32]verbs.WC // the progress goroutine's
	wr  verbs.SendWR // under mu
	rwr verbs.RecvWR // under mu
}

type sendCtx struct {
	msg  *Msg     // its payload is being written
	blks [2]block // encoded or copied payload, long data
	lent bool     // the payload is lent memory written in place: Send waits (lentDone)
}

type arrival struct {
	slot int32
	buf  int32  // -1: a small frame in the slot; else our buffer index
	n    uint32 // bytes
}

const (
	bufFree uint8 = iota
	bufAdvertised
	bufFilled
)

type rbuf struct {
	b     block
	gen   uint16
	state uint8
}

const (
	recvTag     = 1 << 63
	closeLinger = 10 * time.Second
	// queueBytes is how much of large frames a receiver lets wait for
	// Recv before it stops answering buffer requests (beyond Window
	// frames), the counterpart of a TCP socket's buffer.
	queueBytes = 64 << 20
)

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// newVerbsConn creates the queue pair, its completion queue, the ring and
// the send slots, and posts the receives.
func (v *Verbs) newVerbsConn(ctl Conn, dialer bool) (*verbsConn, error) {
	s, err := v.acquire()
	if err != nil {
		return nil, err
	}
	o := &v.opts.Verbs
	c := &verbsConn{v: v, s: s, ctl: ctl, dialer: dialer, spin: o.SpinPolls, window: o.Window,
		R: o.RecvDepth, S: o.SlotSize, nslots: sendDepth(o.RecvDepth), creditBatch: o.RecvDepth / 2,
		sendWake: make(chan struct{}, 1), recvWake: make(chan struct{}, 1), stateWake: make(chan struct{}, 1), ctlWake: make(chan struct{}, 1),
		lentDone: make(chan struct{}, 1),
		done:     make(chan struct{}), progDone: make(chan struct{}), ctlDone: make(chan struct{})}
	c.init(v.opts, ctl.LocalAddr(), ctl.RemoteAddr())
	c.arrivals = make([]arrival, c.R)
	c.sends = make([]sendCtx, c.nslots)
	c.freeSlots = make([]int32, 0, c.nslots)
	for i := c.nslots - 1; i >= 0; i-- {
		c.freeSlots = append(c.freeSlots, int32(i))
	}
	if err := c.setup(); err != nil {
		c.release()
		return nil, err
	}
	return c, nil
}

func (c *verbsConn) setup() error {
	var err error
	wrap := func(err error) error {
		if errors.Is(err, ErrMemlock) || errors.Is(err, ErrVerbs) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrVerbs, err)
	}
	if c.cq, err = c.s.pd.CreateCQ(c.nslots + c.R); err != nil {
		return wrap(err)
	}
	if c.qp, err = c.s.pd.CreateQP(c.cq, verbs.QPCaps{MaxSendWR: c.nslots, MaxRecvWR: c.R, MaxSendSGE: verbs.MaxSGE, MaxRecvSGE: 1}); err != nil {
		return wrap(err)
	}
	if err = c.qp.Init(c.s.port); err != nil {
		return wrap(err)
	}
	if c.ring, err = c.s.pool.alloc(c.R * c.S); err != nil {
		return wrap(err)
	}
	if c.slots, err = c.s.pool.alloc(c.nslots * c.S); err != nil {
		return wrap(err)
	}
	for i := range c.R {
		c.rwr = verbs.RecvWR{ID: recvTag | uint64(i), SGE: c.ring.sge(i*c.S, c.S)}
		if err := c.qp.PostRecv(&c.rwr); err != nil {
			return wrap(err)
		}
	}
	return nil
}

// release frees everything the connection holds, once its queue pair can
// no longer complete anything.
func (c *verbsConn) release() {
	if c.qp != nil {
		c.qp.Fail()
		c.qp.Close()
	}
	if c.cq != nil {
		c.cq.Close()
	}
	pool := c.s.pool
	for i := range c.sends {
		c.releaseSend(&c.sends[i])
	}
	for i := range c.bufs {
		if b := &c.bufs[i]; b.state != bufFree {
			pool.free(b.b)
			b.state = bufFree
		}
	}
	for _, b := range []block{c.ring, c.slots} {
		if b.valid() {
			pool.free(b)
		}
	}
	c.s.unref()
}

func (c *verbsConn) releaseSend(sc *sendCtx) {
	if sc.lent {
		sc.lent = false
		signal(c.lentDone)
	}
	if sc.msg != nil {
		sc.msg.Release()
	}
	for i, b := range sc.blks {
		if b.valid() {
			c.s.pool.free(b)
		}
		sc.blks[i] = block{}
	}
	*sc = sendCtx{}
}

func (c *verbsConn) slot(i int) []byte {
	return c.slots.bytes()[i*c.S : (i+1)*c.S]
}

func (c *verbsConn) Transport() TransportInfo { return c.info }

// connect moves the queue pair to RTR and RTS towards peer.
func (c *verbsConn) connect(local, peer *verbsHello) error {
	rtr := verbs.RTR{Port: c.s.port, MTU: min(local.mtu, peer.mtu), DestQPN: peer.qpn, PSN: peer.psn, LID: peer.lid,
		Global: local.link == verbs.LinkEthernet, GID: peer.gid, SGIDIndex: c.s.gid.Index, HopLimit: 64, MinRNRTimer: 12}
	if err := c.qp.ReadyToReceive(rtr); err != nil {
		return fmt.Errorf("%w: %w", ErrVerbs, err)
	}
	// Credits make "receiver not ready" impossible, so a few retries
	// suffice: more would only turn a protocol error into a hang.
	if err := c.qp.ReadyToSend(verbs.RTS{PSN: local.psn, Timeout: 14, RetryCount: 7, RNRRetry: 6}); err != nil {
		return fmt.Errorf("%w: %w", ErrVerbs, err)
	}
	c.peerR, c.peerS = peer.recvDepth, peer.slotSize
	c.credits, c.small = c.peerR, min(c.S, c.peerS)
	return nil
}

// start runs the progress goroutine; the dialer sends the probe.
func (c *verbsConn) start() {
	c.started = true
	go c.progress()
	if c.dialer {
		c.mu.Lock()
		c.sendProbe()
		c.mu.Unlock()
	}
}

// sendProbe posts the probe; it runs under mu.
func (c *verbsConn) sendProbe() {
	if c.probeSent || c.credits < 1 || len(c.freeSlots) == 0 {
		return
	}
	slot := c.popSlot()
	putCtl(c.slot(slot), pkProbe, c.toReturn, 0)
	c.wr = verbs.SendWR{ID: uint64(slot), Op: verbs.OpSend, SGE: [verbs.MaxSGE]verbs.SGE{c.slots.sge(slot*c.S, vCtl)}, NumSGE: 1}
	if c.post(slot, true) == nil {
		c.probeSent = true
	}
}

func (c *verbsConn) popSlot() int {
	s := c.freeSlots[len(c.freeSlots)-1]
	c.freeSlots = c.freeSlots[:len(c.freeSlots)-1]
	return int(s)
}

// post posts c.wr (ID: the send slot) and counts it; resetCredits says
// the packet returned the credits owed. On failure the slot's resources
// are released and the connection fails. It runs under mu.
func (c *verbsConn) post(slot int, resetCredits bool) error {
	c.wr.Signaled = true
	if err := c.qp.PostSend(&c.wr); err != nil {
		c.releaseSend(&c.sends[slot])
		c.freeSlots = append(c.freeSlots, int32(slot))
		c.fail(fmt.Errorf("%w: %w", ErrVerbs, err))
		return c.err
	}
	c.credits--
	c.sentPkts++
	c.outstanding++
	if resetCredits {
		c.toReturn = 0
	}
	return nil
}

// fail breaks the connection: the queue pair goes to the error state,
// which flushes every outstanding work request. It runs under mu.
func (c *verbsConn) fail(err error) {
	if c.err == nil {
		if !errors.Is(err, ErrVerbs) {
			err = fmt.Errorf("%w: %w", ErrVerbs, err)
		}
		c.err = err
		c.qp.Fail()
		// Tell the peer, whose queue pair may not notice until it sends.
		if c.live && !c.closing {
			text := []byte(err.Error())
			c.ctlWG.Go(func() { c.sendControl(typeAbort, 0, text) })
		}
	}
	c.wakeAll()
}

func (c *verbsConn) wakeAll() {
	signal(c.sendWake)
	signal(c.recvWake)
	signal(c.stateWake)
	signal(c.ctlWake)
}

// progress polls the completion queue: a bounded spin of empty polls,
// then an armed wait on the completion channel.
func (c *verbsConn) progress() {
	defer close(c.progDone)
	spins := 0
	for {
		n, err := c.cq.Poll(c.wcs[:])
		if err != nil {
			c.mu.Lock()
			c.fail(err)
			c.mu.Unlock()
			return
		}
		if n > 0 {
			c.handle(c.wcs[:n])
			spins = 0
			continue
		}
		if c.stopping.Load() {
			return
		}
		if spins < c.spin {
			spins++
			runtime.Gosched()
			continue
		}
		if err := c.cq.Arm(); err != nil {
			c.mu.Lock()
			c.fail(err)
			c.mu.Unlock()
			return
		}
		// Completions that came before the arming raise no event.
		if n, err = c.cq.Poll(c.wcs[:]); err != nil {
			c.mu.Lock()
			c.fail(err)
			c.mu.Unlock()
			return
		} else if n > 0 {
			c.handle(c.wcs[:n])
			spins = 0
			continue
		}
		if err := c.cq.Wait(); err != nil && err != verbs.ErrWoken {
			c.mu.Lock()
			c.fail(err)
			c.mu.Unlock()
			return
		}
		spins = 0
	}
}

// handle processes a batch of completions.
func (c *verbsConn) handle(wcs []verbs.WC) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range wcs {
		wc := &wcs[i]
		if wc.ID&recvTag != 0 {
			c.received(wc)
			continue
		}
		slot := int(wc.ID)
		c.releaseSend(&c.sends[slot])
		c.freeSlots = append(c.freeSlots, int32(slot))
		c.outstanding--
		if err := wc.Err(); err != nil {
			c.fail(err)
		}
	}
	c.serveNeed()
	c.flushControl()
	c.wakeAll()
}

// received handles a receive completion; it runs under mu.
func (c *verbsConn) received(wc *verbs.WC) {
	if err := wc.Err(); err != nil {
		c.fail(err)
		return
	}
	if c.err != nil {
		return
	}
	slot := int(wc.ID &^ recvTag)
	c.recvdPkts++
	if wc.Op == verbs.WCRecvImm {
		i, gen := int(wc.Imm&0xffff), uint16(wc.Imm>>16)
		if i >= len(c.bufs) || c.bufs[i].gen != gen || c.bufs[i].state != bufAdvertised || int(wc.Len) > c.bufs[i].b.size {
			c.fail(fmt.Errorf("peer wrote %d bytes into buffer %#x, which it does not hold", wc.Len, wc.Imm))
			return
		}
		c.bufs[i].state = bufFilled
		c.advertised--
		c.queuedLarge++
		c.queuedBytes += uint64(wc.Len)
		c.queue(arrival{slot: int32(slot), buf: int32(i), n: wc.Len})
		return
	}
	b := c.ring.bytes()[slot*c.S : slot*c.S+int(wc.Len)]
	if len(b) < vCtl {
		c.fail(fmt.Errorf("verbs packet of %d bytes", len(b)))
		return
	}
	le := binary.LittleEndian
	kind, count := b[0], int(le.Uint32(b[4:]))
	c.credits += int(le.Uint16(b[2:]))
	body := b[vCtl:]
	switch kind {
	case pkFrame:
		c.queue(arrival{slot: int32(slot), buf: -1, n: wc.Len})
		return
	case pkCredit:
	case pkProbe:
		c.probed = true
		if !c.dialer {
			c.sendProbe()
		}
	case pkAdvert:
		if len(body) < count*vAdvert {
			c.fail(fmt.Errorf("advertisement packet of %d bytes for %d buffers", len(b), count))
			return
		}
		for j := range count {
			a := getAdvert(body[j*vAdvert:])
			c.adverts = append(c.adverts, a)
			if a.cap >= c.requested {
				c.requested = 0
			}
		}
	case pkRequest:
		if len(body) < 8+4*count {
			c.fail(fmt.Errorf("request packet of %d bytes for %d buffers", len(b), count))
			return
		}
		c.need = max(c.need, le.Uint64(body))
		for j := range count {
			if !c.giveBack(le.Uint32(body[8+4*j:])) {
				c.fail(fmt.Errorf("peer gives back buffer %#x, which it does not hold", le.Uint32(body[8+4*j:])))
				return
			}
		}
	default:
		c.fail(fmt.Errorf("unknown verbs packet kind %d", kind))
		return
	}
	c.held++ // repost undoes it
	c.repost(slot)
}

func (c *verbsConn) queue(a arrival) {
	c.arrivals[(c.aHead+c.aLen)%len(c.arrivals)] = a
	c.aLen++
	c.held++
}

// repost posts slot's receive again and owes the peer a credit; it runs
// under mu.
func (c *verbsConn) repost(slot int) {
	c.held--
	if c.err != nil || c.closing {
		return
	}
	c.rwr = verbs.RecvWR{ID: recvTag | uint64(slot), SGE: c.ring.sge(slot*c.S, c.S)}
	if err := c.qp.PostRecv(&c.rwr); err != nil {
		c.fail(err)
		return
	}
	c.toReturn++
}

// giveBack frees an advertised buffer the peer returns unused.
func (c *verbsConn) giveBack(id uint32) bool {
	i, gen := int(id&0xffff), uint16(id>>16)
	if i >= len(c.bufs) || c.bufs[i].gen != gen || c.bufs[i].state != bufAdvertised {
		return false
	}
	c.s.pool.free(c.bufs[i].b)
	c.dropBuf(i)
	c.advertised--
	return true
}

func (c *verbsConn) dropBuf(i int) {
	c.bufs[i] = rbuf{gen: c.bufs[i].gen + 1}
	c.freeBufs = append(c.freeBufs, int32(i))
}

// advertise allocates a buffer of size bytes and queues its
// advertisement; it runs under mu.
func (c *verbsConn) advertise(size int) bool {
	b, err := c.s.pool.alloc(size)
	if err != nil {
		c.fail(err)
		return false
	}
	var i int
	if n := len(c.freeBufs); n > 0 {
		i = int(c.freeBufs[n-1])
		c.freeBufs = c.freeBufs[:n-1]
	} else {
		if len(c.bufs) > 0xffff {
			c.s.pool.free(b)
			c.fail(errors.New("more than 65536 buffers advertised"))
			return false
		}
		i = len(c.bufs)
		c.bufs = append(c.bufs, rbuf{})
	}
	c.bufs[i].b, c.bufs[i].state = b, bufAdvertised
	c.pendingAdv = append(c.pendingAdv, advert{id: uint32(c.bufs[i].gen)<<16 | uint32(i), rkey: b.r.rkey, addr: b.addr(), cap: uint64(b.size)})
	c.advertised++
	return true
}

// serveNeed answers the peer's request for a buffer, unless Window large
// frames and queueBytes wait for Recv already; it runs under mu.
func (c *verbsConn) serveNeed() {
	if c.need == 0 || c.queuedLarge >= c.window && c.queuedBytes+c.need > queueBytes || c.err != nil || c.closing {
		return
	}
	// The peer gave back every advertisement it held: one still
	// advertised was on its way when it asked, and will do.
	for i := range c.bufs {
		if c.bufs[i].state == bufAdvertised && uint64(c.bufs[i].b.size) >= c.need {
			c.need = 0
			return
		}
	}
	if c.advertise(c.s.pool.classSize(int(c.need))) {
		c.need = 0
	}
}

// topUp advertises buffers of size until Window are advertised or queued;
// it runs under mu.
func (c *verbsConn) topUp(size int) {
	for c.advertised+c.queuedLarge < c.window && c.err == nil && !c.closing {
		if !c.advertise(size) {
			return
		}
	}
}

// flushControl sends the advertisements and credits that are due; it runs
// under mu.
func (c *verbsConn) flushControl() {
	for c.err == nil && !c.closing && !c.bye {
		adv := len(c.pendingAdv) > 0
		cred := c.toReturn >= c.creditBatch
		if !adv && !cred {
			return
		}
		need := 2
		if c.toReturn > 0 {
			need = 1
		}
		if c.credits < need || len(c.freeSlots) == 0 {
			return
		}
		slot := c.popSlot()
		b := c.slot(slot)
		n := vCtl
		if adv {
			k := min(len(c.pendingAdv), (c.small-vCtl)/vAdvert)
			putCtl(b, pkAdvert, c.toReturn, k)
			for j, a := range c.pendingAdv[:k] {
				putAdvert(b[vCtl+j*vAdvert:], a)
			}
			c.pendingAdv = c.pendingAdv[:copy(c.pendingAdv, c.pendingAdv[k:])]
			n += k * vAdvert
		} else {
			putCtl(b, pkCredit, c.toReturn, 0)
		}
		c.wr = verbs.SendWR{ID: uint64(slot), Op: verbs.OpSend, SGE: [verbs.MaxSGE]verbs.SGE{c.slots.sge(slot*c.S, n)}, NumSGE: 1}
		if c.post(slot, true) != nil {
			return
		}
	}
}

// sendState returns the error a Send meets now, if any; it runs under mu.
func (c *verbsConn) sendState() error {
	switch {
	case c.closing:
		return c.opError("send", ErrClosed, false)
	case c.bye:
		return c.opError("send", peerGone, false)
	case c.err != nil:
		return c.opError("send", c.err, false)
	case c.ctlErr != nil:
		return c.opError("send", &joined{ErrClosed, c.ctlErr, "rdma: control connection lost: " + c.ctlErr.Error()}, false)
	}
	return nil
}

// waitSend waits, with mu held on entry and return, until ready() holds
// or the send fails.
func (c *verbsConn) waitSend(ctx context.Context, ready func() bool) error {
	for {
		if err := c.sendState(); err != nil {
			return err
		}
		if ready() {
			return nil
		}
		c.mu.Unlock()
		var err error
		select {
		case <-c.sendWake:
		case <-c.done:
		case <-ctx.Done():
			err = c.opError("send", ctx.Err(), true)
		}
		c.mu.Lock()
		if err != nil {
			return err
		}
	}
}

func (c *verbsConn) canSend() bool { return c.credits >= 2 && len(c.freeSlots) > 0 }

func (c *verbsConn) Send(ctx context.Context, m *Msg) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return c.send(ctx, m)
}

// send sends m, which it takes over in every case.
func (c *verbsConn) send(ctx context.Context, m *Msg) (err error) {
	var sc sendCtx // what the work request holds until it completes
	sc.msg = m
	defer func() { c.releaseSend(&sc) }()
	c.mu.Lock()
	err = c.sendState()
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return c.opError("send", err, true)
	}
	if err := c.checkSend(m); err != nil {
		return err
	}
	payload, d := f32bytes(m.Payload), time.Duration(0)
	pool := c.s.pool
	if m.Codec.ID != CodecNone && len(m.Payload) > 0 {
		limit, _ := maxWireLen(m.Codec.ID, uint64(len(m.Payload)))
		if sc.blks[0], err = pool.alloc(int(limit)); err != nil {
			return c.broken(err)
		}
		buf := sc.blks[0].bytes()
		var wire []byte
		if wire, d, err = c.encode(buf[:0], m); err != nil {
			return err
		}
		if len(wire) > 0 && unsafe.SliceData(wire) != unsafe.SliceData(buf) {
			copy(buf, wire) // the encoder grew its own buffer (never with this capacity)
		}
		payload = buf[:len(wire)]
	}
	var flags uint8
	if c.opts.NoPayloadChecksum {
		flags = FlagNoPayloadCRC
	}
	h := Header{Type: m.Type, Codec: m.Codec.ID, Flags: flags, Job: m.Job, Learner: m.Learner, Shard: m.Shard,
		Elems: uint32(len(m.Payload)), Timestamp: m.Timestamp, Seq: m.Seq, PayloadLen: uint32(len(payload)), DataLen: uint32(len(m.Data))}
	var crc uint32
	if flags == 0 {
		crc = crc32.Update(crc32.Update(0, castagnoli, m.Data), castagnoli, payload)
	}
	flen := vFrameLen(len(payload), len(m.Data))
	if vCtl+flen <= c.small {
		err = c.sendSmall(ctx, &h, m.Data, payload, crc)
	} else {
		err = c.sendLarge(ctx, &h, m, payload, crc, &sc)
	}
	if err == nil { // m may be released already: count from h
		c.countSent(h.Codec, int(h.Elems), int(h.DataLen), int(h.PayloadLen), d)
	} else if m.Codec.ID != CodecNone {
		unsent(m, payload) // not delivered: the residual takes it back
	}
	return err
}

// broken fails the connection with err (a registration failure) and
// returns the send error.
func (c *verbsConn) broken(err error) error {
	c.mu.Lock()
	c.fail(err)
	c.mu.Unlock()
	return c.opError("send", err, false)
}

// putFrame writes the verbs frame h, payload, data, trailer into b.
func putFrame(b []byte, h *Header, data, payload []byte, crc uint32) {
	PutHeader(b, h)
	clear(b[HeaderSize:vHeader])
	n := vHeader + copy(b[vHeader:], payload)
	n += copy(b[n:], data)
	binary.LittleEndian.PutUint32(b[n:], crc)
}

func (c *verbsConn) sendSmall(ctx context.Context, h *Header, data, payload []byte, crc uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.waitSend(ctx, c.canSend); err != nil {
		return err
	}
	slot := c.popSlot()
	b := c.slot(slot)
	putCtl(b, pkFrame, c.toReturn, 0)
	putFrame(b[vCtl:], h, data, payload, crc)
	n := vCtl + vFrameLen(len(payload), len(data))
	c.wr = verbs.SendWR{ID: uint64(slot), Op: verbs.OpSend, SGE: [verbs.MaxSGE]verbs.SGE{c.slots.sge(slot*c.S, n)}, NumSGE: 1}
	return c.post(slot, true)
}

func (c *verbsConn) sendLarge(ctx context.Context, h *Header, m *Msg, payload []byte, crc uint32, sc *sendCtx) error {
	pool := c.s.pool
	w, dl := len(payload), len(m.Data)
	// The payload's registered block: the encoded one, the message's own
	// or the registered memory it is lent (zero copy), or a copy.
	var pb block
	var poff int
	inPlace, lent := false, false
	switch {
	case sc.blks[0].valid():
		pb = sc.blks[0]
	case w == 0:
	default:
		if b, ok := pool.payloadBlock(m); ok {
			pb, poff, inPlace = b, int(uint64(uintptr(unsafe.Pointer(unsafe.SliceData(payload))))-b.addr()), true
			break
		}
		if b, off, ok := pool.lentBlock(m); ok {
			pb, poff, inPlace, lent = b, off, true, true
			break
		}
		var err error
		if sc.blks[0], err = pool.alloc(w); err != nil {
			return c.broken(err)
		}
		copy(sc.blks[0].bytes(), payload)
		pb = sc.blks[0]
	}
	// Data and trailer follow the header in the send slot, or in a block
	// of their own when long.
	tail := dl + TrailerSize
	if vHeader+tail > c.S {
		var err error
		if sc.blks[1], err = pool.alloc(tail); err != nil {
			return c.broken(err)
		}
		copy(sc.blks[1].bytes(), m.Data)
		binary.LittleEndian.PutUint32(sc.blks[1].bytes()[dl:], crc)
	}
	a, err := c.takeAdvert(ctx, uint64(vFrameLen(w, dl)))
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.waitSend(ctx, c.canSend); err != nil {
		c.adverts = append(c.adverts, a) // unused: keep it
		return err
	}
	slot := c.popSlot()
	b := c.slot(slot)
	PutHeader(b, h)
	clear(b[HeaderSize:vHeader])
	wr := &c.wr
	*wr = verbs.SendWR{ID: uint64(slot), Op: verbs.OpWriteImm, Imm: a.id, RemoteAddr: a.addr, RKey: a.rkey}
	wr.SGE[0] = c.slots.sge(slot*c.S, vHeader)
	wr.NumSGE = 1
	if w > 0 {
		wr.SGE[1] = pb.sge(poff, w)
		wr.NumSGE++
	}
	if sc.blks[1].valid() {
		wr.SGE[wr.NumSGE] = sc.blks[1].sge(0, tail)
	} else {
		copy(b[vHeader:], m.Data)
		binary.LittleEndian.PutUint32(b[vHeader+dl:], crc)
		wr.SGE[wr.NumSGE] = c.slots.sge(slot*c.S+vHeader, tail)
	}
	wr.NumSGE++
	// The work request holds the blocks and, when written from in place,
	// the message, until it completes (post releases them if it fails).
	// Lent memory is the lender's again once Send returns: Send waits for
	// the write's completion (or its flush, or the connection's end).
	c.sends[slot] = sendCtx{blks: sc.blks, lent: lent}
	sc.blks = [2]block{}
	if inPlace {
		c.sends[slot].msg, sc.msg = m, nil
	}
	err = c.post(slot, false)
	switch {
	case lent && err != nil:
		<-c.lentDone // post released the slot
	case lent:
		c.mu.Unlock()
		select {
		case <-c.lentDone:
		case <-c.progDone: // the queue pair failed and nothing completes any more
		case <-c.done:
		}
		c.mu.Lock()
		if st := c.sendState(); st != nil && c.sends[slot].lent {
			// Not known to be written: the connection failed or is closing
			// (the receiver's checksum rejects a torn frame).
			err = st
		}
	}
	return err
}

// takeAdvert returns the smallest advertised buffer that holds n bytes,
// asking the peer for one (and giving back those too small) if none does.
func (c *verbsConn) takeAdvert(ctx context.Context, n uint64) (advert, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	best := -1
	err := c.waitSend(ctx, func() bool {
		best = -1
		for i, a := range c.adverts {
			if a.cap >= n && (best < 0 || a.cap < c.adverts[best].cap) {
				best = i
			}
		}
		if best >= 0 {
			return true
		}
		if c.requested < n && c.canSend() {
			c.request(n)
		}
		return false
	})
	if err != nil {
		return advert{}, err
	}
	a := c.adverts[best]
	c.adverts = append(c.adverts[:best], c.adverts[best+1:]...)
	return a, nil
}

// request asks the peer for a buffer of n bytes, giving back the
// advertisements held; it runs under mu.
func (c *verbsConn) request(n uint64) {
	slot := c.popSlot()
	b := c.slot(slot)
	k := min(len(c.adverts), (c.small-vCtl-8)/4)
	putCtl(b, pkRequest, c.toReturn, k)
	binary.LittleEndian.PutUint64(b[vCtl:], n)
	for j, a := range c.adverts[:k] {
		binary.LittleEndian.PutUint32(b[vCtl+8+4*j:], a.id)
	}
	c.adverts = c.adverts[:copy(c.adverts, c.adverts[k:])]
	c.wr = verbs.SendWR{ID: uint64(slot), Op: verbs.OpSend, SGE: [verbs.MaxSGE]verbs.SGE{c.slots.sge(slot*c.S, vCtl+8+4*k)}, NumSGE: 1}
	if c.post(slot, true) == nil {
		c.requested = n
		c.requests++
	}
}

func (c *verbsConn) Recv(ctx context.Context) (*Msg, error) {
	c.recvMu.Lock()
	defer c.recvMu.Unlock()
	c.mu.Lock()
	var a arrival
	var buf block // a large frame's buffer; only Recv and Close change a filled one
	for {
		if err := c.recvState(); err != nil {
			c.mu.Unlock()
			return nil, err
		}
		if c.aLen > 0 {
			a = c.arrivals[c.aHead]
			c.aHead, c.aLen = (c.aHead+1)%len(c.arrivals), c.aLen-1
			if a.buf >= 0 {
				c.queuedLarge--
				c.queuedBytes -= uint64(a.n)
				buf = c.bufs[a.buf].b
			}
			break
		}
		if err := c.recvEnd(); err != nil {
			c.mu.Unlock()
			return nil, err
		}
		c.mu.Unlock()
		select {
		case <-c.recvWake:
		case <-c.done:
		case <-ctx.Done():
			return nil, c.opError("recv", ctx.Err(), true)
		}
		c.mu.Lock()
	}
	c.mu.Unlock()
	var frame []byte
	if a.buf < 0 {
		frame = c.ring.bytes()[int(a.slot)*c.S+vCtl : int(a.slot)*c.S+int(a.n)]
	} else {
		frame = buf.bytes()[:a.n]
	}
	m, keep, err := c.readFrame(frame, buf)
	c.mu.Lock()
	if a.buf >= 0 {
		if !keep {
			c.s.pool.free(buf)
		}
		c.dropBuf(int(a.buf))
		c.topUp(c.s.pool.classSize(int(a.n)))
		c.serveNeed()
	}
	c.repost(int(a.slot))
	c.flushControl()
	c.mu.Unlock()
	return m, err
}

// recvState returns the error a Recv meets before looking at the queue.
func (c *verbsConn) recvState() error {
	switch {
	case c.closing:
		return c.opError("recv", ErrClosed, false)
	case c.rerr != nil:
		return c.rerr
	}
	return nil
}

// recvEnd returns the error of a Recv that finds the queue empty, if the
// connection has ended.
func (c *verbsConn) recvEnd() error {
	switch {
	case c.bye && c.recvdPkts >= c.byeCount:
		return c.opError("recv", peerGone, false)
	case c.bye && c.err == nil:
		return nil // the peer's last packets are still being polled
	case c.err != nil:
		return c.opError("recv", c.err, false)
	case c.ctlErr != nil:
		return c.opError("recv", &joined{ErrClosed, c.ctlErr, "rdma: control connection lost: " + c.ctlErr.Error()}, false)
	}
	return nil
}

// readFrame turns a verbs frame into a message. buf is the frame's
// registered buffer for a large frame (invalid for a small one); keep
// reports that the message took it over.
func (c *verbsConn) readFrame(frame []byte, buf block) (m *Msg, keep bool, err error) {
	if len(frame) < vHeader+TrailerSize {
		return nil, false, c.recvFatal(fmt.Errorf("%w: verbs frame of %d bytes", ErrTruncated, len(frame)))
	}
	h, err := ParseHeader(frame[:HeaderSize], &c.lim)
	if err != nil {
		if !skippable(err) {
			return nil, false, c.recvFatal(err)
		}
		c.countDropped()
		return nil, false, c.opError("recv", err, true)
	}
	w, dl := int(h.PayloadLen), int(h.DataLen)
	if vFrameLen(w, dl) != len(frame) {
		return nil, false, c.recvFatal(fmt.Errorf("%w: verbs packet of %d bytes holds a frame of %d", ErrTruncated, len(frame), vFrameLen(w, dl)))
	}
	payload, data := frame[vHeader:vHeader+w], frame[vHeader+w:vHeader+w+dl]
	want := binary.LittleEndian.Uint32(frame[vHeader+w+dl:])
	var got uint32
	if h.Flags&FlagNoPayloadCRC == 0 {
		got = crc32.Update(crc32.Update(0, castagnoli, data), castagnoli, payload)
	}
	if got != want {
		c.countDropped()
		return nil, false, c.opError("recv", fmt.Errorf("%w: %08x, trailer says %08x", ErrChecksum, got, want), true)
	}
	n := int(h.Elems)
	if h.Codec == CodecNone && buf.valid() && n > 0 {
		m, keep = c.s.pool.msgIn(buf, vHeader, n), true
	} else {
		m = c.newRecvMsg(n)
	}
	m.Data = append(m.Data[:0], data...)
	if h.Codec == CodecNone {
		if !keep {
			copy(f32bytes(m.Payload), payload)
		}
		c.countRecv(m, CodecNone, w, 0)
	} else if err := c.decode(m, h.Codec, payload); err != nil {
		m.Release()
		c.countDropped()
		return nil, false, c.opError("recv", err, true)
	}
	m.header(&h)
	return m, keep, nil
}

// newRecvMsg returns a message for n received elements: registered memory
// if large (so that replying with it is zero copy), else the pool's.
func (c *verbsConn) newRecvMsg(n int) *Msg {
	if 4*n >= c.S {
		if m, err := c.s.pool.newMsg(n); err == nil {
			return m
		}
	}
	return NewMsg(n)
}

// recvFatal ends the receive side.
func (c *verbsConn) recvFatal(err error) error {
	err = c.opError("recv", err, false)
	c.mu.Lock()
	c.rerr = err
	c.mu.Unlock()
	return err
}

// readControl reads the control connection after the handshake: typeBye,
// or its loss.
func (c *verbsConn) readControl() {
	defer close(c.ctlDone)
	for {
		m, err := c.ctl.Recv(context.Background())
		if err != nil {
			if Recoverable(err) {
				continue
			}
			c.mu.Lock()
			c.ctlErr = err
			c.wakeAll()
			c.mu.Unlock()
			return
		}
		c.mu.Lock()
		switch m.Type {
		case typeBye:
			c.bye, c.byeCount = true, m.Seq
			c.wakeAll()
			c.mu.Unlock()
			// Nothing more is posted (flushControl, Send check bye): let
			// what was posted complete, then let the peer go.
			c.waitIdle(c.ctlWake)
			c.sendControl(typeAck, 0, nil)
			c.mu.Lock()
		case typeAck:
			c.acked = true
			c.wakeAll()
		case typeAbort:
			c.fail(fmt.Errorf("the peer's queue pair failed: %s", m.Data))
		default:
			c.fail(fmt.Errorf("unexpected message of type %#x on the control connection", m.Type))
		}
		c.mu.Unlock()
		m.Release()
	}
}

// waitIdle waits, woken through wake, until every posted work request
// completed or the connection failed, at most closeLinger.
func (c *verbsConn) waitIdle(wake chan struct{}) {
	c.waitFor(wake, func() bool { return c.outstanding == 0 || c.err != nil })
}

// waitFor waits, woken through wake, until cond (run under mu) holds, at
// most closeLinger.
func (c *verbsConn) waitFor(wake chan struct{}, cond func() bool) {
	t := time.NewTimer(closeLinger)
	defer t.Stop()
	for {
		c.mu.Lock()
		ok := cond()
		c.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-wake:
		case <-t.C:
			return
		}
	}
}

// sendControl sends a message of type t on the control connection.
func (c *verbsConn) sendControl(t Type, seq uint64, data []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	sendHandshake(ctx, c.ctl, t, seq, data)
	cancel()
}

// Close waits for the packets posted to complete (at most closeLinger),
// tells the peer how many there were, and releases the queue pair and its
// memory.
func (c *verbsConn) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closing = true
		c.mu.Unlock()
		close(c.done)
		c.sendMu.Lock()
		c.recvMu.Lock()
		defer c.recvMu.Unlock()
		defer c.sendMu.Unlock()
		c.waitFor(c.stateWake, func() bool { return c.outstanding == 0 || c.err != nil || c.bye || c.ctlErr != nil })
		c.mu.Lock()
		sent := c.sentPkts
		c.mu.Unlock()
		c.sendControl(typeBye, sent, nil)
		c.waitFor(c.stateWake, func() bool { return c.acked || c.ctlErr != nil })
		c.ctlWG.Wait()
		c.ctl.Close()
		<-c.ctlDone
		c.stop()
		c.release()
		c.enc.Close()
		c.dec.Close()
	})
	return nil
}

// stop ends the progress goroutine.
func (c *verbsConn) stop() {
	c.stopping.Store(true)
	c.cq.Wake()
	<-c.progDone
}
