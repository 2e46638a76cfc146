package rdma

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softsync/softsync/rdma/internal/verbs"
)

// VerbsOptions configures the verbs transport (and the verbs side of
// auto). The zero value is usable: zero fields take the defaults listed.
type VerbsOptions struct {
	// Device and Port select the RDMA device and port (default: the first
	// device with an active port, and its first active port).
	Device string
	Port   int
	// GID is the index in the port's GID table to use on RoCE ("" picks a
	// RoCE v2 entry with an IPv4 address, else any RoCE v2 entry, else the
	// first valid one). InfiniBand ports route by LID and ignore it.
	GID string
	// RecvDepth is the number of receive buffers pre-posted per
	// connection, the peer's credits (default 32); SlotSize their size in
	// bytes, which bounds the frames sent inline by SEND (default 8 KiB,
	// a multiple of 64 from 256 up). Larger frames go by RDMA WRITE WITH
	// IMMEDIATE into buffers the receiver advertises.
	RecvDepth int
	SlotSize  int
	// RegionSize is the size of the regions registered memory is carved
	// from (default 32 MiB; a power of two from 1 MiB to 1 GiB); larger
	// buffers get regions of their own. Each registration is checked
	// against the locked-memory limit first.
	RegionSize int
	// Window is the number of buffers for large frames a receiver keeps
	// advertised or filled and not yet received per connection (default
	// 2): a sender can have that many large frames under way without a
	// round trip.
	Window int
	// SpinPolls is how many empty polls of the completion queue precede
	// sleeping on the completion channel (default 200; -1: none).
	SpinPolls int
	// HandshakeTimeout bounds the setup of a connection over its TCP
	// control connection (default 10 s).
	HandshakeTimeout time.Duration
	// Emulation, if not nil, replaces the host's RDMA devices by an
	// in-process emulation (NewEmulation), for tests and benchmarks on
	// hosts without RDMA. Both ends of a connection must share it. An
	// auto network with an emulation never moves a connection to shm, so
	// that its ends, which are in one process, use verbs or TCP.
	Emulation *Emulation
}

func (o VerbsOptions) withDefaults() (VerbsOptions, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.RecvDepth, 32)
	def(&o.SlotSize, 8<<10)
	def(&o.RegionSize, 32<<20)
	def(&o.Window, 2)
	def(&o.SpinPolls, 200)
	if o.HandshakeTimeout == 0 {
		o.HandshakeTimeout = 10 * time.Second
	}
	bad := func(f string, args ...any) (VerbsOptions, error) {
		return o, fmt.Errorf("rdma: Options.Verbs."+f, args...)
	}
	switch {
	case o.RecvDepth < 4 || o.RecvDepth > 4096:
		return bad("RecvDepth %d not in [4, 4096]", o.RecvDepth)
	case o.SlotSize < vMinSlot || o.SlotSize > 1<<20 || o.SlotSize%64 != 0:
		return bad("SlotSize %d is not a multiple of 64 in [%d, 1 MiB]", o.SlotSize, vMinSlot)
	case o.RegionSize < 1<<20 || o.RegionSize > 1<<30 || bits.OnesCount(uint(o.RegionSize)) != 1:
		return bad("RegionSize %d is not a power of two in [1 MiB, 1 GiB]", o.RegionSize)
	case o.Window < 1 || o.Window > 64:
		return bad("Window %d not in [1, 64]", o.Window)
	case o.SpinPolls < -1:
		return bad("SpinPolls %d is below -1", o.SpinPolls)
	case o.HandshakeTimeout < 0:
		return bad("HandshakeTimeout %v is negative", o.HandshakeTimeout)
	case o.Port < 0:
		return bad("Port %d is negative", o.Port)
	}
	if o.GID != "" {
		if i, err := strconv.Atoi(o.GID); err != nil || i < 0 {
			return bad("GID %q is not a GID table index", o.GID)
		}
	}
	return o, nil
}

// Emulation is an in-process emulation of the verbs operations (queue
// pairs, completion queues, memory registration), for running the verbs
// transport where there is no RDMA device: every connection between two
// networks that share an Emulation moves memory with copies, with the
// ordering, immediate data, key and bounds checks, receiver-not-ready and
// error states of a Reliable Connected queue pair. It is not a device:
// its throughput says nothing about RDMA hardware.
type Emulation struct {
	emu *verbs.Emu
}

// NewEmulation returns an emulated fabric with one device ("emu0") with
// one active port and no locked-memory limit.
func NewEmulation() *Emulation { return &Emulation{verbs.NewEmu(verbs.EmuConfig{})} }

// Verbs is the InfiniBand/RoCE verbs transport. Connections start as TCP
// connections (from the TCP transport's Dial and Listen, with its
// options) which carry the handshake: device and queue pair details, a
// probe over the new Reliable Connected queue pair, and at the end the
// count of packets sent. Messages then travel over the queue pair: small
// frames by SEND into pre-posted receive buffers under credit-based flow
// control, larger ones by RDMA WRITE WITH IMMEDIATE into buffers the
// receiver advertises (see verbsConn). NewMsg hands out registered memory,
// so that a payload is written straight from it and received straight
// into it.
//
// In auto mode (NewAuto, Open("auto")) a connection to a peer on the
// same host moves to shm first (shm_auto.go), and one whose ends cannot
// both use verbs stays on TCP, and its Transport says why; in verbs mode
// such a connection fails. A Verbs network opens the device when its
// first listener or connection needs it and closes it when nothing uses
// it any more (listeners, connections, messages of NewMsg).
type Verbs struct {
	opts    Options
	auto    bool
	tcp     *TCP
	shm     *Shm           // auto: the shm transport, nil where there is none
	prov    verbs.Provider // nil: no verbs in this build or on this host
	provErr error          // why prov is nil

	mu   sync.Mutex
	sess *session
}

var _ Network = (*Verbs)(nil)

// NewVerbs returns the verbs transport, or an error matching
// ErrUnsupported saying why there is none: a build without verbs support,
// no libibverbs, no RDMA support in the kernel, no device or no active
// port.
func NewVerbs(opts Options) (*Verbs, error) {
	v, err := newVerbs(opts, false)
	if err != nil {
		return nil, err
	}
	if err := v.usable(); err != nil {
		return nil, &OpError{Op: "open", Peer: "verbs", Err: err}
	}
	return v, nil
}

// NewAuto returns the verbs transport in auto mode: every connection to
// a peer on the same host and network namespace uses shm (where this
// host has it, and both ends run auto), every other one verbs when both
// ends have a usable device and port, and TCP otherwise, with the reason
// in its Transport and Options.OnConnect. Both ends must use auto or
// verbs (a plain TCP peer does not answer the handshake).
func NewAuto(opts Options) (*Verbs, error) { return newVerbs(opts, true) }

func newVerbs(opts Options, auto bool) (*Verbs, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	// The control connections carry the handshake whatever the limits on
	// messages; a connection that stays on TCP gets them back (see
	// fallback).
	co := o
	co.MaxData = max(o.MaxData, controlMaxData)
	t, err := NewTCP(co)
	if err != nil {
		return nil, err
	}
	v := &Verbs{opts: o, auto: auto, tcp: t}
	if auto && o.Verbs.Emulation == nil {
		v.shm, _ = NewShm(o) // nil without shm: auto does not offer it
	}
	if e := o.Verbs.Emulation; e != nil {
		v.prov = e.emu
	} else if v.prov, err = verbs.Host(); err != nil {
		v.prov, v.provErr = nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	return v, nil
}

// Name returns "verbs", or "auto" in auto mode.
func (v *Verbs) Name() string {
	if v.auto {
		return "auto"
	}
	return "verbs"
}

// usable checks that a device with an active port can be opened.
func (v *Verbs) usable() error {
	if v.prov == nil {
		return v.provErr
	}
	ctx, _, _, _, err := openDevice(v.prov, v.opts.Verbs)
	if err != nil {
		return err
	}
	ctx.Close()
	return v.memlockCheck()
}

// status says why this end cannot use verbs, if it cannot (without
// opening the device when a connection has it open already).
func (v *Verbs) status() error {
	v.mu.Lock()
	open := v.sess != nil
	v.mu.Unlock()
	if open {
		return nil
	}
	return v.usable()
}

// memlockCheck fails if the locked-memory limit leaves no room for one
// region.
func (v *Verbs) memlockCheck() error {
	lim, pinned, size := v.prov.Memlock(), v.prov.Pinned(), uint64(v.opts.Verbs.RegionSize)
	if !lim.Allows(pinned, size) {
		return memlockError(lim, pinned, size)
	}
	return nil
}

// NewMsg returns a message whose payload lies in registered memory when
// the network has a device open (a listener or a connection) and the
// payload is too large to go inline; otherwise, for auto, one of its shm
// side's (Shm.NewMsg), which its shm peers take without a copy, and
// else one from the process-wide pool.
func (v *Verbs) NewMsg(n int) *Msg {
	if 4*n < v.opts.Verbs.SlotSize {
		return NewMsg(n)
	}
	v.mu.Lock()
	s := v.sess
	if s != nil {
		s.refs.Add(1)
	}
	v.mu.Unlock()
	if s == nil && v.shm != nil {
		return v.shm.NewMsg(n)
	}
	if s == nil {
		return NewMsg(n)
	}
	m, err := s.pool.newMsg(n)
	s.unref()
	if err != nil {
		return NewMsg(n)
	}
	return m
}

// session is an open device: its context, protection domain, port and
// registered memory pool, shared by the network's connections.
type session struct {
	v    *Verbs
	refs atomic.Int64 // listeners, connections, blocks handed out
	dead bool         // guarded by v.mu

	prov     verbs.Provider
	ctx      verbs.Context
	pd       verbs.PD
	dev      string
	port     int
	pattr    verbs.PortAttr
	gid      verbs.GIDEntry
	emulated bool
	pool     *regPool
}

// acquire returns the open session with a reference taken, opening the
// device if none is open.
func (v *Verbs) acquire() (*session, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if s := v.sess; s != nil {
		s.refs.Add(1)
		return s, nil
	}
	if v.prov == nil {
		return nil, v.provErr
	}
	ctx, dev, port, pattr, err := openDevice(v.prov, v.opts.Verbs)
	if err != nil {
		return nil, err
	}
	s := &session{v: v, prov: v.prov, ctx: ctx, dev: dev, port: port, pattr: pattr, emulated: v.opts.Verbs.Emulation != nil}
	fail := func(err error) (*session, error) {
		if s.pd != nil {
			s.pd.Close()
		}
		ctx.Close()
		return nil, err
	}
	attr, err := ctx.Attr()
	if err != nil {
		return fail(fmt.Errorf("%w: %w", ErrVerbs, err))
	}
	sq := sendDepth(v.opts.Verbs.RecvDepth)
	if attr.MaxSGE < verbs.MaxSGE || attr.MaxQPWR < sq || attr.MaxCQE < sq+v.opts.Verbs.RecvDepth {
		return fail(fmt.Errorf("%w: %s allows %d SGEs, %d work requests and %d completions per queue; softsync needs %d, %d and %d (lower Options.Verbs.RecvDepth)",
			ErrUnsupported, dev, attr.MaxSGE, attr.MaxQPWR, attr.MaxCQE, verbs.MaxSGE, sq, sq+v.opts.Verbs.RecvDepth))
	}
	if s.gid, err = chooseGID(ctx, port, pattr, v.opts.Verbs.GID); err != nil {
		return fail(err)
	}
	if err := v.memlockCheck(); err != nil {
		return fail(err)
	}
	if s.pd, err = ctx.AllocPD(); err != nil {
		return fail(fmt.Errorf("%w: %w", ErrVerbs, err))
	}
	s.pool = newRegPool(s, v.prov, s.pd, v.opts.Verbs.RegionSize)
	s.refs.Store(1)
	v.sess = s
	return s, nil
}

// unref drops a reference; the last one closes the session.
func (s *session) unref() {
	if s.refs.Add(-1) != 0 {
		return
	}
	v := s.v
	v.mu.Lock()
	if s.refs.Load() != 0 || s.dead { // taken again meanwhile, or closed
		v.mu.Unlock()
		return
	}
	s.dead = true
	if v.sess == s {
		v.sess = nil
	}
	v.mu.Unlock()
	s.pool.close()
	s.pd.Close()
	s.ctx.Close()
}

// name is "device:port".
func (s *session) name() string { return s.dev + ":" + strconv.Itoa(s.port) }

// sendDepth is the send queue depth (and the number of send slots) for a
// receive depth r: the peer's credits bound the packets under way, and
// completions may trail the credits that return.
func sendDepth(r int) int { return 2*r + 4 }

// openDevice opens the configured device, or the first with an active
// port, and returns it with the port chosen.
func openDevice(prov verbs.Provider, o VerbsOptions) (verbs.Context, string, int, verbs.PortAttr, error) {
	devs, err := prov.Devices()
	if err != nil {
		return nil, "", 0, verbs.PortAttr{}, noRDMA(prov, err)
	}
	if len(devs) == 0 {
		return nil, "", 0, verbs.PortAttr{}, fmt.Errorf("%w: no RDMA devices (ibv_get_device_list found none)", ErrUnsupported)
	}
	var seen []string
	for _, d := range devs {
		if o.Device != "" && d.Name != o.Device {
			continue
		}
		ctx, err := prov.Open(d.Name)
		if err != nil {
			seen = append(seen, err.Error())
			continue
		}
		attr, err := ctx.Attr()
		if err != nil {
			seen = append(seen, err.Error())
			ctx.Close()
			continue
		}
		for p := 1; p <= attr.Ports; p++ {
			if o.Port != 0 && p != o.Port {
				continue
			}
			pa, err := ctx.Port(p)
			switch {
			case err != nil:
				seen = append(seen, err.Error())
			case pa.State == verbs.PortActive:
				return ctx, d.Name, p, pa, nil
			default:
				seen = append(seen, fmt.Sprintf("%s port %d is %s", d.Name, p, pa.State))
			}
		}
		if o.Port > attr.Ports {
			seen = append(seen, fmt.Sprintf("%s has no port %d", d.Name, o.Port))
		}
		ctx.Close()
	}
	if len(seen) == 0 {
		names := make([]string, len(devs))
		for i, d := range devs {
			names[i] = d.Name
		}
		return nil, "", 0, verbs.PortAttr{}, fmt.Errorf("%w: no RDMA device %q (there are %s)", ErrUnsupported, o.Device, strings.Join(names, ", "))
	}
	return nil, "", 0, verbs.PortAttr{}, fmt.Errorf("%w: no active RDMA port (%s)", ErrUnsupported, strings.Join(seen, "; "))
}

// noRDMA explains a device listing that failed.
func noRDMA(prov verbs.Provider, err error) error {
	if errors.Is(err, syscall.ENOSYS) || prov.Fabric() == 0 && !verbs.KernelSupport() {
		where := verbs.SysfsDir + " missing"
		if prov.Fabric() != 0 {
			where = "emulated"
		}
		return fmt.Errorf("%w: no RDMA support in this kernel (%s): %w", ErrUnsupported, where, err)
	}
	return fmt.Errorf("%w: cannot list RDMA devices: %w", ErrUnsupported, err)
}

// chooseGID picks the GID table entry of a RoCE port: the configured
// index, else a RoCE v2 entry with an IPv4-mapped address, else any RoCE
// v2 entry, else the first non-zero one. InfiniBand ports use entry 0.
func chooseGID(ctx verbs.Context, port int, pa verbs.PortAttr, want string) (verbs.GIDEntry, error) {
	if want != "" {
		i, _ := strconv.Atoi(want)
		g, err := ctx.GID(port, i)
		if err != nil {
			return g, fmt.Errorf("%w: GID index %d: %w", ErrUnsupported, i, err)
		}
		return g, nil
	}
	if pa.LinkLayer != verbs.LinkEthernet {
		g, _ := ctx.GID(port, 0)
		return g, nil
	}
	best, rank := verbs.GIDEntry{}, 0
	for i := range pa.GIDTableLen {
		g, err := ctx.GID(port, i)
		if err != nil || g.GID == [16]byte{} {
			continue
		}
		r := 1
		if g.Type == verbs.GIDRoCEv2 {
			r = 2
			if [12]byte(g.GID[:12]) == [12]byte{10: 0xff, 11: 0xff} {
				r = 3
			}
		}
		if r > rank {
			best, rank = g, r
		}
	}
	if rank == 0 {
		return best, fmt.Errorf("%w: RoCE port %d has no valid GID (no IP address on its network interface?)", ErrUnsupported, port)
	}
	return best, nil
}

// Listen listens on a TCP address; connections accepted there run the
// verbs handshake in the background and Accept returns them once set up.
// In verbs mode it fails if the device cannot be opened.
func (v *Verbs) Listen(addr string) (Listener, error) {
	s, err := v.acquire()
	if err != nil && !v.auto {
		return nil, &OpError{Op: "listen", Peer: addr, Err: err}
	}
	ln, err := v.tcp.Listen(addr)
	if err != nil {
		if s != nil {
			s.unref()
		}
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &verbsListener{v: v, ln: ln, s: s, offers: newShmOffers(v.shm), conns: make(chan Conn), done: make(chan struct{}), cancel: cancel}
	l.wg.Go(func() { l.loop(ctx) })
	return l, nil
}

// Dial connects to a verbs or auto listener and runs the handshake.
func (v *Verbs) Dial(ctx context.Context, addr string) (Conn, error) {
	ctl, err := v.tcp.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	c, err := v.handshake(ctx, ctl, nil)
	if err != nil {
		ctl.Close()
		return nil, &OpError{Op: "dial", Peer: addr, Err: err}
	}
	return c, nil
}

type verbsListener struct {
	v      *Verbs
	ln     Listener
	s      *session   // held while listening (nil if the device cannot be opened)
	offers *shmOffers // auto: where peers offered shm connect (nil: none offered)
	conns  chan Conn
	done   chan struct{}
	cancel context.CancelFunc // ends loop's context
	wg     sync.WaitGroup
	once   sync.Once
}

func (l *verbsListener) Addr() string { return l.ln.Addr() }

// Stats returns the counters of the TCP listener the connections are set
// up over (connections accepted there, handshakes refused), plus the
// handshakes refused on the unix socket of auto's shm offers.
func (l *verbsListener) Stats() ListenerStats {
	st := l.ln.Stats()
	if l.offers != nil {
		o := l.offers.stats()
		st.AuthFailures += o.AuthFailures
		st.Rejected += o.Rejected
	}
	return st
}

// loop accepts TCP connections and runs each handshake on its own
// goroutine, so that a slow peer does not hold up the others.
func (l *verbsListener) loop(ctx context.Context) {
	for {
		ctl, err := l.ln.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, ErrClosed) {
				return
			}
			select { // a transient error (out of file descriptors): breathe
			case <-l.done:
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		l.wg.Go(func() {
			c, err := l.v.handshake(ctx, ctl, l)
			if err != nil {
				ctl.Close()
				return
			}
			select {
			case l.conns <- c:
			case <-l.done:
				c.Close()
			}
		})
	}
}

func (l *verbsListener) Accept(ctx context.Context) (Conn, error) {
	select {
	case <-l.done:
		return nil, &OpError{Op: "accept", Peer: l.Addr(), Err: ErrClosed}
	default:
	}
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, &OpError{Op: "accept", Peer: l.Addr(), Err: ErrClosed}
	case <-ctx.Done():
		return nil, &OpError{Op: "accept", Peer: l.Addr(), Err: ctx.Err(), Recoverable: true}
	}
}

func (l *verbsListener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		l.cancel()
		err = l.ln.Close()
		l.wg.Wait()
		l.offers.close()
		if l.s != nil {
			l.s.unref()
		}
	})
	return err
}

// controlMaxData bounds the handshake messages.
const controlMaxData = 64 << 10

// tcpFallback is a TCP connection of an auto network that could not use
// verbs.
type tcpFallback struct {
	Conn
	info TransportInfo
}

func (f *tcpFallback) Transport() TransportInfo { return f.info }

// Place sets the TCP connection's Placement.
func (f *tcpFallback) Place(p Placement) { f.Conn.(Placer).Place(p) }

var _ = [...]Placer{(*tcpConn)(nil), (*shmConn)(nil), (*inmemConn)(nil), (*verbsConn)(nil), (*tcpFallback)(nil)}

// VerbsProbe describes the host's RDMA devices for softsync doctor.
type VerbsProbe struct {
	// Provider is what implements the verbs ("libibverbs.so.1",
	// "emulation"), empty if none; Err says why there is none.
	Provider string
	Err      error
	// Devices lists every device with its ports.
	Devices []VerbsDevice
	// Usable names the device and port a connection would use
	// ("mlx5_0:1"); Reason says why none is usable otherwise.
	Usable string
	Reason string
	// Memlock is the locked-memory limit in bytes (MemlockUnlimited:
	// none), MemlockExempt whether the process may exceed it
	// (CAP_IPC_LOCK), RegionSize the size of one registration, and
	// MemlockErr, matching ErrMemlock, says when the limit leaves no room
	// for one, with the fix.
	Memlock       uint64
	MemlockExempt bool
	RegionSize    int
	MemlockErr    error
}

// MemlockUnlimited is VerbsProbe.Memlock without a limit.
const MemlockUnlimited = verbs.Unlimited

// VerbsDevice is one RDMA device.
type VerbsDevice struct {
	Name     string
	Firmware string
	Ports    []VerbsPort
	Err      error // the device could not be opened or queried
}

// VerbsPort is one port of a device.
type VerbsPort struct {
	Num       int
	State     string // "ACTIVE", "DOWN", ...
	LinkLayer string // "InfiniBand", "Ethernet (RoCE)"
	MTU       int    // active MTU in bytes
	LID       uint16
	GID       string // the entry a connection would use, with its type
	Err       error
}

// ProbeVerbs lists the RDMA devices and ports that opts (Options.Verbs)
// would see, the locked-memory limit, and which port a connection would
// use or why none.
func ProbeVerbs(opts Options) VerbsProbe {
	o, err := opts.withDefaults()
	if err != nil {
		return VerbsProbe{Err: err, Reason: err.Error()}
	}
	v, err := newVerbs(o, true)
	if err != nil {
		return VerbsProbe{Err: err, Reason: err.Error()}
	}
	p := VerbsProbe{RegionSize: o.Verbs.RegionSize}
	lim, pinned := verbs.HostMemlock(), uint64(0)
	if v.prov != nil {
		lim, pinned = v.prov.Memlock(), v.prov.Pinned()
	}
	p.Memlock, p.MemlockExempt = lim.Limit, lim.Exempt
	if !lim.Allows(pinned, uint64(p.RegionSize)) {
		p.MemlockErr = memlockError(lim, pinned, uint64(p.RegionSize))
	}
	if v.prov == nil {
		p.Err, p.Reason = v.provErr, v.provErr.Error()
		return p
	}
	p.Provider = v.prov.Name()
	devs, err := v.prov.Devices()
	if err != nil {
		p.Reason = noRDMA(v.prov, err).Error()
		return p
	}
	for _, d := range devs {
		vd := VerbsDevice{Name: d.Name}
		ctx, err := v.prov.Open(d.Name)
		if err != nil {
			vd.Err = err
			p.Devices = append(p.Devices, vd)
			continue
		}
		attr, err := ctx.Attr()
		vd.Firmware, vd.Err = attr.Firmware, err
		for n := 1; n <= attr.Ports; n++ {
			pa, err := ctx.Port(n)
			vp := VerbsPort{Num: n, State: pa.State.String(), LinkLayer: pa.LinkLayer.String(), MTU: pa.ActiveMTU.Bytes(), LID: pa.LID, Err: err}
			if err == nil && pa.State == verbs.PortActive {
				if g, err := chooseGID(ctx, n, pa, o.Verbs.GID); err == nil && pa.LinkLayer == verbs.LinkEthernet {
					vp.GID = fmt.Sprintf("%s (index %d, %s)", fmtGID(g.GID), g.Index, g.Type)
				} else if err != nil {
					vp.Err = err
				}
			}
			vd.Ports = append(vd.Ports, vp)
		}
		ctx.Close()
		p.Devices = append(p.Devices, vd)
	}
	if ctx, dev, port, _, err := openDevice(v.prov, o.Verbs); err != nil {
		p.Reason = err.Error()
	} else {
		ctx.Close()
		p.Usable = dev + ":" + strconv.Itoa(port)
	}
	return p
}

// fmtGID writes a GID as an IPv6 address (IPv4-mapped ones as ::ffff:a.b.c.d).
func fmtGID(g [16]byte) string {
	if [12]byte(g[:12]) == [12]byte{10: 0xff, 11: 0xff} {
		return fmt.Sprintf("::ffff:%d.%d.%d.%d", g[12], g[13], g[14], g[15])
	}
	var parts []string
	for i := 0; i < 16; i += 2 {
		parts = append(parts, strconv.FormatUint(uint64(g[i])<<8|uint64(g[i+1]), 16))
	}
	return strings.Join(parts, ":")
}
