package verbs

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Emu is an in-process emulation of the verbs operations: one fabric on
// which every queue pair of the process can reach every other. It
// reproduces the semantics the transport relies on:
//
//   - Reliable Connected delivery: a queue pair's work requests take
//     effect in the order they were posted, each exactly once, and only
//     between two queue pairs connected to each other (RTR names the
//     peer); a send to a queue pair that is gone, not ready or connected
//     elsewhere completes with StatusRetryExcErr.
//   - SEND consumes the peer's oldest posted receive; RDMA WRITE WITH
//     IMMEDIATE writes the peer's memory and consumes a receive too, whose
//     completion carries the immediate value and the length.
//   - Local keys and bounds are checked (StatusLocProtErr), remote keys,
//     bounds and REMOTE_WRITE access too (StatusRemAccessErr, which puts
//     both queue pairs in error), and a SEND longer than the receive
//     buffer fails with StatusLocLenErr on the receiver and
//     StatusRemInvReqErr on the sender.
//   - Receiver not ready: with RNRRetry 7 a SEND or WRITE WITH IMMEDIATE
//     that finds no receive posted waits (and everything posted after it
//     on that queue pair) until one is; with a smaller RNRRetry it fails
//     with StatusRNRRetryExcErr.
//   - A queue pair in error flushes its posted receives and waiting sends,
//     and everything posted to it later, with StatusFlush.
//   - Queue depths: posting beyond MaxSendWR or MaxRecvWR outstanding work
//     requests fails with ENOMEM; a completion queue that overflows fails
//     its next Poll.
//   - Completion events: Arm, then an event at the next completion; Wait
//     and Wake as on a completion channel.
//   - Memory registration counts against a configured locked-memory limit
//     and fails with ENOMEM beyond it, as the kernel does.
//
// Work is done synchronously when it is posted (or, for a send waiting
// for a receive, when the receive is posted), under one lock; memory is
// copied with Go's copy. Nothing runs in the background, so an Emu needs
// no closing. Hooks inject faults.
type Emu struct {
	id  uint64
	cfg EmuConfig

	mu     sync.Mutex
	qps    map[uint32]*emuQP
	mrs    map[uint32]*emuMR
	next   uint32
	pinned uint64
	hooks  Hooks
}

// EmuConfig describes the emulated host.
type EmuConfig struct {
	// NoKernelSupport makes Devices fail as ibv_get_device_list does on a
	// kernel without RDMA support.
	NoKernelSupport bool
	// Devices lists the devices; nil means one device "emu0" with one
	// active RoCE v2 port. An empty non-nil slice means no devices.
	Devices []EmuDevice
	// Memlock is the locked-memory limit; the zero value means unlimited.
	Memlock Memlock
}

// EmuDevice is an emulated device and its ports (port i+1 is Ports[i]).
type EmuDevice struct {
	Name  string
	Ports []PortAttr
}

// Hooks inject faults into an Emu. Nil fields inject nothing.
type Hooks struct {
	// RegMR, if it returns an error, fails a registration of size bytes.
	RegMR func(size int) error
	// CreateQP, if it returns an error, fails a queue pair's creation.
	CreateQP func() error
	// Modify, if it returns an error, fails a state change of queue pair
	// qpn to state ("INIT", "RTR", "RTS").
	Modify func(qpn uint32, state string) error
	// Send, if it returns a status other than StatusSuccess, completes the
	// work request with that status instead of executing it, and puts the
	// queue pair in error.
	Send func(qpn uint32, wr *SendWR) Status
	// Hold, if it returns true, makes a send work request of queue pair
	// qpn wait, as for a receive the peer has not posted, until Resume
	// finds it returning false. It runs under the emulation's lock.
	Hold func(qpn uint32, wr *SendWR) bool
}

// Resume runs the work requests that wait (Hooks.Hold, or a receive
// since posted), in order, on every queue pair.
func (e *Emu) Resume() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, qp := range e.qps {
		qp.drain()
	}
}

var emuIDs atomic.Uint64

// DefaultEmuPort is the port of the default emulated device.
var DefaultEmuPort = PortAttr{State: PortActive, LinkLayer: LinkEthernet, ActiveMTU: 5, GIDTableLen: 1}

// NewEmu returns a fresh emulated fabric.
func NewEmu(cfg EmuConfig) *Emu {
	if cfg.Devices == nil {
		cfg.Devices = []EmuDevice{{Name: "emu0", Ports: []PortAttr{DefaultEmuPort}}}
	}
	if cfg.Memlock == (Memlock{}) {
		cfg.Memlock.Limit = Unlimited
	}
	return &Emu{id: emuIDs.Add(1) | 1<<63, cfg: cfg, qps: map[uint32]*emuQP{}, mrs: map[uint32]*emuMR{}}
}

// SetHooks replaces the fault hooks.
func (e *Emu) SetHooks(h Hooks) {
	e.mu.Lock()
	e.hooks = h
	e.mu.Unlock()
}

// BreakQP puts queue pair qpn in error, as an asynchronous fatal error
// would, flushing its outstanding work requests.
func (e *Emu) BreakQP(qpn uint32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if qp := e.qps[qpn]; qp != nil {
		qp.toError()
	}
}

// Pinned is the number of bytes registered on this fabric (one process
// in the emulation).
func (e *Emu) Pinned() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pinned
}

// Live returns the number of memory registrations and queue pairs alive.
func (e *Emu) Live() (mrs, qps int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.mrs), len(e.qps)
}

func (e *Emu) Name() string     { return "emulation" }
func (e *Emu) Fabric() uint64   { return e.id }
func (e *Emu) Memlock() Memlock { return e.cfg.Memlock }

func (e *Emu) Devices() ([]Device, error) {
	if e.cfg.NoKernelSupport {
		return nil, fmt.Errorf("ibv_get_device_list: %w", syscall.ENOSYS)
	}
	var ds []Device
	for i, d := range e.cfg.Devices {
		ds = append(ds, Device{Name: d.Name, GUID: uint64(i + 1)})
	}
	return ds, nil
}

func (e *Emu) Open(name string) (Context, error) {
	if e.cfg.NoKernelSupport {
		return nil, fmt.Errorf("ibv_get_device_list: %w", syscall.ENOSYS)
	}
	for _, d := range e.cfg.Devices {
		if d.Name == name {
			return &emuCtx{emu: e, dev: d}, nil
		}
	}
	return nil, fmt.Errorf("no RDMA device %q: %w", name, syscall.ENODEV)
}

type emuCtx struct {
	emu *Emu
	dev EmuDevice
}

func (c *emuCtx) Attr() (DeviceAttr, error) {
	return DeviceAttr{Firmware: "emulated", Ports: len(c.dev.Ports), MaxQPWR: 16384, MaxSGE: 30, MaxCQE: 1 << 22, MaxMRSize: 1 << 40}, nil
}

func (c *emuCtx) Port(num int) (PortAttr, error) {
	if num < 1 || num > len(c.dev.Ports) {
		return PortAttr{}, fmt.Errorf("ibv_query_port %s/%d: %w", c.dev.Name, num, syscall.EINVAL)
	}
	return c.dev.Ports[num-1], nil
}

func (c *emuCtx) GID(port, index int) (GIDEntry, error) {
	p, err := c.Port(port)
	if err != nil {
		return GIDEntry{}, err
	}
	if index < 0 || index >= p.GIDTableLen {
		return GIDEntry{}, fmt.Errorf("ibv_query_gid %s/%d/%d: %w", c.dev.Name, port, index, syscall.EINVAL)
	}
	g := GIDEntry{Index: index, Type: GIDRoCEv2}
	if p.LinkLayer == LinkInfiniBand {
		g.Type = GIDIB
	}
	// ::ffff:127.0.0.<index+1>, an IPv4-mapped address as RoCE v2 uses.
	g.GID[10], g.GID[11], g.GID[12], g.GID[15] = 0xff, 0xff, 127, byte(index+1)
	return g, nil
}

func (c *emuCtx) AllocPD() (PD, error) { return &emuPD{emu: c.emu}, nil }
func (c *emuCtx) Close() error         { return nil }

type emuPD struct {
	emu      *Emu
	mrs, qps int // alive, guarded by emu.mu
	cqs      int
	closed   bool
}

type emuMR struct {
	pd     *emuPD
	key    uint32
	mem    []byte
	base   uint64
	access Access
}

func (pd *emuPD) RegMR(mem []byte, access Access) (MR, error) {
	e := pd.emu
	e.mu.Lock()
	defer e.mu.Unlock()
	if pd.closed {
		return nil, fmt.Errorf("ibv_reg_mr: %w", syscall.EINVAL)
	}
	if h := e.hooks.RegMR; h != nil {
		if err := h(len(mem)); err != nil {
			return nil, err
		}
	}
	if len(mem) == 0 {
		return nil, fmt.Errorf("ibv_reg_mr: %w", syscall.EINVAL)
	}
	if !e.cfg.Memlock.Allows(e.pinned, uint64(len(mem))) {
		return nil, fmt.Errorf("ibv_reg_mr: %w", syscall.ENOMEM)
	}
	e.next++
	mr := &emuMR{pd: pd, key: e.next, mem: mem, base: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(mem)))), access: access}
	e.mrs[mr.key] = mr
	e.pinned += uint64(len(mem))
	pd.mrs++
	return mr, nil
}

func (mr *emuMR) LKey() uint32 { return mr.key }
func (mr *emuMR) RKey() uint32 { return mr.key }

func (mr *emuMR) Close() error {
	e := mr.pd.emu
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mrs[mr.key] != mr {
		return fmt.Errorf("ibv_dereg_mr: %w", syscall.EINVAL)
	}
	delete(e.mrs, mr.key)
	e.pinned -= uint64(len(mr.mem))
	mr.pd.mrs--
	return nil
}

// slice returns the bytes [addr, addr+n) of mr, or false if they are out
// of its bounds.
func (mr *emuMR) slice(addr uint64, n uint32) ([]byte, bool) {
	if addr < mr.base || addr-mr.base > uint64(len(mr.mem)) || uint64(n) > uint64(len(mr.mem))-(addr-mr.base) {
		return nil, false
	}
	off := addr - mr.base
	return mr.mem[off : off+uint64(n)], true
}

func (pd *emuPD) CreateCQ(depth int) (CQ, error) {
	if depth < 1 {
		return nil, fmt.Errorf("ibv_create_cq: %w", syscall.EINVAL)
	}
	pd.emu.mu.Lock()
	pd.cqs++
	pd.emu.mu.Unlock()
	return &emuCQ{emu: pd.emu, pd: pd, depth: depth, event: make(chan struct{}, 1), wake: make(chan struct{}, 1)}, nil
}

func (pd *emuPD) CreateQP(cq CQ, caps QPCaps) (QP, error) {
	e := pd.emu
	e.mu.Lock()
	defer e.mu.Unlock()
	if h := e.hooks.CreateQP; h != nil {
		if err := h(); err != nil {
			return nil, err
		}
	}
	ecq, ok := cq.(*emuCQ)
	if !ok || caps.MaxSendWR < 1 || caps.MaxRecvWR < 1 || caps.MaxSendSGE > MaxSGE || caps.MaxRecvSGE > 1 {
		return nil, fmt.Errorf("ibv_create_qp: %w", syscall.EINVAL)
	}
	e.next++
	qp := &emuQP{emu: e, pd: pd, cq: ecq, qpn: e.next, caps: caps}
	e.qps[qp.qpn] = qp
	pd.qps++
	return qp, nil
}

func (pd *emuPD) Close() error {
	e := pd.emu
	e.mu.Lock()
	defer e.mu.Unlock()
	if pd.mrs > 0 || pd.qps > 0 || pd.cqs > 0 {
		return fmt.Errorf("ibv_dealloc_pd: %d MRs, %d QPs, %d CQs alive: %w", pd.mrs, pd.qps, pd.cqs, syscall.EBUSY)
	}
	pd.closed = true
	return nil
}

type emuCQ struct {
	emu     *Emu
	pd      *emuPD
	depth   int
	wcs     []WC // guarded by emu.mu
	armed   bool
	overrun bool
	closed  bool
	event   chan struct{}
	wake    chan struct{}
}

// add queues a completion; it runs under emu.mu.
func (cq *emuCQ) add(wc WC) {
	if cq.closed {
		return
	}
	if len(cq.wcs) >= cq.depth {
		cq.overrun = true
		return
	}
	cq.wcs = append(cq.wcs, wc)
	if cq.armed {
		cq.armed = false
		select {
		case cq.event <- struct{}{}:
		default:
		}
	}
}

func (cq *emuCQ) Poll(out []WC) (int, error) {
	e := cq.emu
	e.mu.Lock()
	defer e.mu.Unlock()
	if cq.overrun {
		return 0, fmt.Errorf("ibv_poll_cq: completion queue overrun (depth %d)", cq.depth)
	}
	n := copy(out, cq.wcs)
	for _, wc := range out[:n] {
		if wc.Op == WCSend || wc.Op == WCWrite {
			if qp := e.qps[wc.QPN]; qp != nil {
				qp.sqUsed--
			}
		}
	}
	rest := copy(cq.wcs, cq.wcs[n:])
	clear(cq.wcs[rest:])
	cq.wcs = cq.wcs[:rest]
	return n, nil
}

func (cq *emuCQ) Arm() error {
	cq.emu.mu.Lock()
	cq.armed = true
	cq.emu.mu.Unlock()
	return nil
}

func (cq *emuCQ) Wait() error {
	select {
	case <-cq.event:
		return nil
	case <-cq.wake:
		return ErrWoken
	}
}

func (cq *emuCQ) Wake() {
	select {
	case cq.wake <- struct{}{}:
	default:
	}
}

func (cq *emuCQ) Close() error {
	e := cq.emu
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, qp := range e.qps {
		if qp.cq == cq {
			return fmt.Errorf("ibv_destroy_cq: QP %#x still uses it: %w", qp.qpn, syscall.EBUSY)
		}
	}
	if !cq.closed {
		cq.closed = true
		cq.pd.cqs--
	}
	return nil
}

type qpState uint8

const (
	qpReset qpState = iota
	qpInit
	qpRTR
	qpRTS
	qpErr
)

type emuQP struct {
	emu      *Emu
	pd       *emuPD
	cq       *emuCQ
	qpn      uint32
	caps     QPCaps
	state    qpState
	remote   uint32 // the connected peer's QP number (from RTR)
	rnrRetry uint8
	recvs    []RecvWR // posted receives, oldest first
	pending  []SendWR // sends waiting for a receive at the peer (RNR), in order
	sqUsed   int      // send work requests posted and not yet polled
}

func (qp *emuQP) Num() uint32 { return qp.qpn }

func (qp *emuQP) modify(from []qpState, to qpState, name string) error {
	e := qp.emu
	e.mu.Lock()
	defer e.mu.Unlock()
	if h := e.hooks.Modify; h != nil {
		if err := h(qp.qpn, name); err != nil {
			return err
		}
	}
	for _, s := range from {
		if qp.state == s {
			qp.state = to
			return nil
		}
	}
	return fmt.Errorf("ibv_modify_qp to %s: %w", name, syscall.EINVAL)
}

func (qp *emuQP) Init(port int) error { return qp.modify([]qpState{qpReset}, qpInit, "INIT") }

func (qp *emuQP) ReadyToReceive(a RTR) error {
	if err := qp.modify([]qpState{qpInit}, qpRTR, "RTR"); err != nil {
		return err
	}
	qp.emu.mu.Lock()
	qp.remote = a.DestQPN
	qp.emu.mu.Unlock()
	return nil
}

func (qp *emuQP) ReadyToSend(a RTS) error {
	if err := qp.modify([]qpState{qpRTR}, qpRTS, "RTS"); err != nil {
		return err
	}
	qp.emu.mu.Lock()
	qp.rnrRetry = a.RNRRetry
	qp.emu.mu.Unlock()
	return nil
}

func (qp *emuQP) Fail() error {
	qp.emu.mu.Lock()
	qp.toError()
	qp.emu.mu.Unlock()
	return nil
}

// toError moves qp to the error state and flushes its work requests; it
// runs under emu.mu.
func (qp *emuQP) toError() {
	if qp.state == qpErr {
		return
	}
	qp.state = qpErr
	for _, r := range qp.recvs {
		qp.cq.add(WC{ID: r.ID, Status: StatusFlush, Op: WCRecv, QPN: qp.qpn})
	}
	qp.recvs = qp.recvs[:0]
	for i := range qp.pending {
		qp.complete(&qp.pending[i], StatusFlush)
	}
	qp.pending = qp.pending[:0]
}

// complete queues the completion of a send work request; errors are
// always reported, successes only when signaled. It runs under emu.mu.
func (qp *emuQP) complete(wr *SendWR, st Status) {
	if st == StatusSuccess && !wr.Signaled {
		qp.sqUsed--
		return
	}
	op := WCSend
	if wr.Op == OpWrite || wr.Op == OpWriteImm {
		op = WCWrite
	}
	qp.cq.add(WC{ID: wr.ID, Status: st, Op: op, QPN: qp.qpn})
}

func (qp *emuQP) PostSend(wr *SendWR) error {
	e := qp.emu
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case qp.state == qpErr:
		qp.sqUsed++
		qp.complete(wr, StatusFlush)
		return nil
	case qp.state != qpRTS:
		return fmt.Errorf("ibv_post_send: QP not ready to send: %w", syscall.EINVAL)
	case wr.NumSGE < 0 || wr.NumSGE > qp.caps.MaxSendSGE:
		return fmt.Errorf("ibv_post_send: %d SGEs: %w", wr.NumSGE, syscall.EINVAL)
	case qp.sqUsed >= qp.caps.MaxSendWR:
		return fmt.Errorf("ibv_post_send: send queue full (%d): %w", qp.caps.MaxSendWR, syscall.ENOMEM)
	}
	qp.sqUsed++
	if len(qp.pending) > 0 {
		qp.pending = append(qp.pending, *wr)
		return nil
	}
	if !qp.execute(wr) {
		qp.pending = append(qp.pending, *wr)
	}
	return nil
}

func (qp *emuQP) PostRecv(wr *RecvWR) error {
	e := qp.emu
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case qp.state == qpReset:
		return fmt.Errorf("ibv_post_recv: QP in RESET: %w", syscall.EINVAL)
	case qp.state == qpErr:
		qp.cq.add(WC{ID: wr.ID, Status: StatusFlush, Op: WCRecv, QPN: qp.qpn})
		return nil
	case len(qp.recvs) >= qp.caps.MaxRecvWR:
		return fmt.Errorf("ibv_post_recv: receive queue full (%d): %w", qp.caps.MaxRecvWR, syscall.ENOMEM)
	}
	qp.recvs = append(qp.recvs, *wr)
	// A peer's sends waiting for a receive go now, in order.
	if src := e.qps[qp.remote]; src != nil && src.remote == qp.qpn {
		src.drain()
	}
	return nil
}

// drain executes waiting sends until one has to wait again; it runs under
// emu.mu. Each is taken off the queue before it runs, so that an error,
// which flushes the queue, does not complete it twice.
func (qp *emuQP) drain() {
	for len(qp.pending) > 0 && qp.state == qpRTS {
		wr := qp.pending[0]
		qp.pending = qp.pending[:copy(qp.pending, qp.pending[1:])]
		if !qp.execute(&wr) {
			qp.pending = append(qp.pending, SendWR{})
			copy(qp.pending[1:], qp.pending)
			qp.pending[0] = wr
			return
		}
	}
}

// execute carries out wr; false means it must wait for a receive at the
// peer. It runs under emu.mu.
func (qp *emuQP) execute(wr *SendWR) bool {
	e := qp.emu
	if h := e.hooks.Hold; h != nil && h(qp.qpn, wr) {
		return false
	}
	if h := e.hooks.Send; h != nil {
		if st := h(qp.qpn, wr); st != StatusSuccess {
			qp.fail(wr, st)
			return true
		}
	}
	// Gather the local buffers.
	var src [MaxSGE][]byte
	total := uint64(0)
	for i := range wr.NumSGE {
		s := wr.SGE[i]
		mr := e.mrs[s.LKey]
		var ok bool
		if mr != nil && mr.pd == qp.pd {
			src[i], ok = mr.slice(s.Addr, s.Len)
		}
		if !ok {
			qp.fail(wr, StatusLocProtErr)
			return true
		}
		total += uint64(s.Len)
	}
	dst := e.qps[qp.remote]
	if dst == nil || dst.remote != qp.qpn || dst.state != qpRTR && dst.state != qpRTS {
		qp.fail(wr, StatusRetryExcErr)
		return true
	}
	needRecv := wr.Op == OpSend || wr.Op == OpSendImm || wr.Op == OpWriteImm
	if needRecv && len(dst.recvs) == 0 {
		if qp.rnrRetry == 7 {
			return false
		}
		qp.fail(wr, StatusRNRRetryExcErr)
		return true
	}
	var target []byte
	switch wr.Op {
	case OpWrite, OpWriteImm:
		mr := e.mrs[wr.RKey]
		ok := false
		if mr != nil && mr.pd == dst.pd && mr.access&AccessRemoteWrite != 0 && total <= 1<<32 {
			target, ok = mr.slice(wr.RemoteAddr, uint32(total))
		}
		if !ok {
			qp.fail(wr, StatusRemAccessErr)
			dst.toError()
			return true
		}
	default:
		r := dst.recvs[0]
		mr := e.mrs[r.SGE.LKey]
		ok := false
		if mr != nil && mr.pd == dst.pd && mr.access&AccessLocalWrite != 0 {
			target, ok = mr.slice(r.SGE.Addr, r.SGE.Len)
		}
		switch {
		case !ok:
			dst.recvs = dst.recvs[1:]
			dst.cq.add(WC{ID: r.ID, Status: StatusLocProtErr, Op: WCRecv, QPN: dst.qpn})
			dst.toError()
			qp.fail(wr, StatusRemInvReqErr)
			return true
		case total > uint64(len(target)):
			dst.recvs = dst.recvs[1:]
			dst.cq.add(WC{ID: r.ID, Status: StatusLocLenErr, Op: WCRecv, QPN: dst.qpn})
			dst.toError()
			qp.fail(wr, StatusRemInvReqErr)
			return true
		}
	}
	off := 0
	for i := range wr.NumSGE {
		off += copy(target[off:], src[i])
	}
	if needRecv {
		r := dst.recvs[0]
		rest := copy(dst.recvs, dst.recvs[1:])
		dst.recvs = dst.recvs[:rest]
		wc := WC{ID: r.ID, Op: WCRecv, Len: uint32(total), QPN: dst.qpn}
		if wr.Op == OpWriteImm {
			wc.Op = WCRecvImm
		}
		if wr.Op != OpSend {
			wc.Imm, wc.HasImm = wr.Imm, true
		}
		dst.cq.add(wc)
	}
	qp.complete(wr, StatusSuccess)
	return true
}

// fail completes wr with status st and puts qp in error; it runs under
// emu.mu.
func (qp *emuQP) fail(wr *SendWR, st Status) {
	qp.complete(wr, st)
	qp.toError()
}

func (qp *emuQP) Close() error {
	e := qp.emu
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.qps[qp.qpn] != qp {
		return fmt.Errorf("ibv_destroy_qp: %w", syscall.EINVAL)
	}
	delete(e.qps, qp.qpn)
	qp.pd.qps--
	qp.recvs, qp.pending = nil, nil
	return nil
}
