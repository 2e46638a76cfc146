package rdma

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/softsync/softsync/rdma/internal/synth"
	"github.com/softsync/softsync/rdma/internal/verbs"
)

// emulation returns an Emulation over a configured emulated host.
func emulation(cfg verbs.EmuConfig) *Emulation { return &Emulation{verbs.NewEmu(cfg)} }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// vpair connects a dialer of network dn to a listener of network ln; both
// ends are closed at cleanup. It returns the dial and accept errors.
func vpair(t *testing.T, dn, ln Network) (client, server Conn, dialErr error) {
	t.Helper()
	l, err := ln.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ch := make(chan Conn, 1)
	actx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	go func() {
		c, _ := l.Accept(actx)
		ch <- c
	}()
	client, dialErr = dn.Dial(testCtx(t), l.Addr())
	if dialErr != nil {
		cancel()
		if c := <-ch; c != nil {
			c.Close()
		}
		return nil, nil, dialErr
	}
	server = <-ch
	if server == nil {
		client.Close()
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server, nil
}

// emuPair returns two verbs networks on one fresh emulation, and a
// connection between them.
func emuPair(t *testing.T, opts Options) (client, server *verbsConn, emu *verbs.Emu) {
	t.Helper()
	e := NewEmulation()
	opts.Verbs.Emulation = e
	a, err := NewVerbs(opts)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewVerbs(opts)
	c, s, err := vpair(t, a, b)
	if err != nil {
		t.Fatal(err)
	}
	return c.(*verbsConn), s.(*verbsConn), e.emu
}

// recordOps records the opcode and payload SGE of every send work request
// posted on emu.
type recordOps struct {
	mu  sync.Mutex
	ops []verbs.Opcode
	wrs []verbs.SendWR
}

func (r *recordOps) hook(qpn uint32, wr *verbs.SendWR) verbs.Status {
	r.mu.Lock()
	r.ops = append(r.ops, wr.Op)
	r.wrs = append(r.wrs, *wr)
	r.mu.Unlock()
	return verbs.StatusSuccess
}

func (r *recordOps) count(op verbs.Opcode) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, o := range r.ops {
		if o == op {
			n++
		}
	}
	return n
}

// firstDiff returns the first index where a and b differ bit for bit,
// or -1.
func firstDiff(a, b []float32) int {
	for j := range a {
		if math.Float32bits(a[j]) != math.Float32bits(b[j]) {
			return j
		}
	}
	return -1
}

func fill(m *Msg, i int) *Msg {
	synth.Gradient(m.Payload, 1e-3, uint64(i))
	m.Seq, m.Type, m.Shard = uint64(i), Type(i%7), uint32(i)
	return m
}

func mustRecv(t *testing.T, c Conn) *Msg {
	t.Helper()
	m, err := c.Recv(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestVerbsRendezvous: the first large frame of a size waits for a
// buffer (one request, answered by an advertisement); after Recv the
// receiver advertises Window buffers of that size, so the next frames go
// without asking. Small frames go by SEND, large ones by WRITE WITH
// IMMEDIATE, and a payload from the network's allocator is written from
// where it lies.
func TestVerbsRendezvous(t *testing.T) {
	c, s, emu := emuPair(t, Options{})
	var rec recordOps
	emu.SetHooks(verbs.Hooks{Send: rec.hook})
	const n = 100_000
	for i := range 5 {
		if i > 0 { // the advertisements Recv sent back have arrived
			for deadline := time.Now().Add(10 * time.Second); ; runtime.Gosched() {
				c.mu.Lock()
				k := len(c.adverts)
				c.mu.Unlock()
				if k > 0 || time.Now().After(deadline) {
					break
				}
			}
		}
		m := fill(c.v.NewMsg(n), i)
		if m.pool == nil {
			t.Fatal("NewMsg of a connected verbs network is not registered memory")
		}
		payload := uint64(uintptr(unsafe.Pointer(&m.Payload[0])))
		if err := c.Send(testCtx(t), m); err != nil {
			t.Fatal(err)
		}
		got := mustRecv(t, s)
		want := fill(NewMsg(n), i)
		if got.Seq != uint64(i) || got.Type != want.Type || firstDiff(got.Payload, want.Payload) >= 0 {
			t.Fatalf("message %d differs", i)
		}
		if got.pool == nil {
			t.Fatal("a large received payload is not the registered buffer it was written into")
		}
		got.Release()
		want.Release()
		rec.mu.Lock()
		last := rec.wrs[len(rec.wrs)-1]
		for j := len(rec.wrs) - 1; j >= 0; j-- {
			if rec.wrs[j].Op == verbs.OpWriteImm {
				last = rec.wrs[j]
				break
			}
		}
		rec.mu.Unlock()
		if last.Op != verbs.OpWriteImm || last.NumSGE != 3 || last.SGE[1].Addr != payload || last.SGE[1].Len != 4*n {
			t.Fatalf("message %d: large frame not written from its payload in place: %+v", i, last)
		}
	}
	if w := rec.count(verbs.OpWriteImm); w != 5 {
		t.Fatalf("%d RDMA writes with immediate for 5 large frames", w)
	}
	// One request for the first frame; the rest found buffers advertised.
	c.mu.Lock()
	requests := c.requests
	c.mu.Unlock()
	if requests != 1 {
		t.Fatalf("%d buffer requests for 5 frames of one size, want 1", requests)
	}
	// A small message goes inline by SEND.
	before := rec.count(verbs.OpSend)
	if err := c.Send(testCtx(t), fill(NewMsg(10), 9)); err != nil {
		t.Fatal(err)
	}
	m := mustRecv(t, s)
	if m.Seq != 9 || m.pool != nil {
		t.Fatalf("small message: seq %d, registered %v", m.Seq, m.pool != nil)
	}
	m.Release()
	if rec.count(verbs.OpSend) == before || rec.count(verbs.OpWriteImm) != 5 {
		t.Fatal("small message not sent by SEND")
	}
}

// TestVerbsCredits: a receiver that does not receive stops its sender
// once the credits run out (one kept back for returning credits), and
// the sender goes on as soon as frames are received; afterwards every
// receive is either its sender's credit or owed to it.
func TestVerbsCredits(t *testing.T) {
	const depth = 4
	c, s, _ := emuPair(t, Options{Verbs: VerbsOptions{RecvDepth: depth}})
	sent := 0
	for ; ; sent++ {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := c.Send(ctx, fill(NewMsg(3), sent))
		cancel()
		if err != nil {
			if !errors.Is(err, context.DeadlineExceeded) || !Recoverable(err) {
				t.Fatalf("send without credits: %v", err)
			}
			break
		}
		if sent == depth {
			t.Fatalf("%d frames sent to a receiver with %d receives that does not receive", sent+1, depth)
		}
	}
	if sent == 0 {
		t.Fatal("no frame went")
	}
	m := mustRecv(t, s) // returns credits: the sender goes on
	m.Release()
	if err := c.Send(testCtx(t), fill(NewMsg(3), sent)); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= sent; i++ {
		m := mustRecv(t, s)
		if m.Seq != uint64(i) {
			t.Fatalf("got %d, want %d", m.Seq, i)
		}
		m.Release()
	}
	// Ping-pong, many times the receive depth (the conformance suite's
	// FullDuplex streams both ways at once).
	for i := range 300 {
		a, b := c, s
		if i%2 == 1 {
			a, b = s, c
		}
		if err := a.Send(testCtx(t), fill(NewMsg(i%50), i)); err != nil {
			t.Fatal(err)
		}
		m := mustRecv(t, b)
		if m.Seq != uint64(i) {
			t.Fatalf("got %d, want %d", m.Seq, i)
		}
		m.Release()
	}
	// Quiet again: every receive is either the sender's credit or owed to
	// it, on both ends.
	for _, p := range [][2]*verbsConn{{c, s}, {s, c}} {
		p[0].mu.Lock()
		p[1].mu.Lock()
		credits, owed := p[0].credits, p[1].toReturn+p[1].held
		p[1].mu.Unlock()
		p[0].mu.Unlock()
		if credits+owed > depth || credits < 1 {
			t.Fatalf("credits %d + owed %d with a receive depth of %d", credits, owed, depth)
		}
	}
}

// TestVerbsOrderingMixed: small and large frames, every codec, in both
// directions, arrive in order and intact.
func TestVerbsOrderingMixed(t *testing.T) {
	c, s, _ := emuPair(t, Options{Job: 3})
	sizes := []int{0, 1, 2000, 3000, 70_001, 5, 300_000, 1000}
	codecs := []string{"none", "s2", "zstd", "shuffle+s2", "fp16", "none", "bf16", "topk:0.5"}
	const count = 64
	go func() {
		for i := range count {
			codec, _ := ParseCodec(codecs[i%len(codecs)])
			m := fill(s.v.NewMsg(sizes[i%len(sizes)]), i)
			m.Codec = codec
			if i%3 == 0 {
				m.Data = append(m.Data, strings.Repeat("d", i*50)...)
			}
			if s.Send(context.Background(), m) != nil {
				return
			}
		}
	}()
	for i := range count {
		m := mustRecv(t, c)
		n := sizes[i%len(sizes)]
		if m.Seq != uint64(i) || len(m.Payload) != n || m.Job != 3 || i%3 == 0 && len(m.Data) != i*50 {
			t.Fatalf("message %d: seq %d, %d elements, job %d, %d data bytes", i, m.Seq, len(m.Payload), m.Job, len(m.Data))
		}
		if codec := codecs[i%len(codecs)]; codec == "none" || codec == "s2" || codec == "zstd" || codec == "shuffle+s2" {
			want := fill(NewMsg(n), i)
			if j := firstDiff(m.Payload, want.Payload); j >= 0 {
				t.Fatalf("message %d (%s): element %d differs", i, codec, j)
			}
			want.Release()
		}
		m.Release()
	}
}

// TestVerbsLongData: data longer than a send slot travels in a block of
// its own.
func TestVerbsLongData(t *testing.T) {
	c, s, _ := emuPair(t, Options{})
	m := fill(NewMsg(10), 1)
	m.Data = append(m.Data, strings.Repeat("x", 100_000)...)
	if err := c.Send(testCtx(t), m); err != nil {
		t.Fatal(err)
	}
	got := mustRecv(t, s)
	defer got.Release()
	if got.Seq != 1 || string(got.Data) != strings.Repeat("x", 100_000) {
		t.Fatalf("seq %d, %d data bytes", got.Seq, len(got.Data))
	}
}

// checkClean checks that closing everything released every queue pair,
// registration and block of emu and closed the networks' sessions.
func checkClean(t *testing.T, emu *verbs.Emu, nets ...*Verbs) {
	t.Helper()
	for _, v := range nets {
		v.mu.Lock()
		s := v.sess
		v.mu.Unlock()
		if s != nil {
			t.Fatalf("session of %s still open with %d references", v.Name(), s.refs.Load())
		}
	}
	if mrs, qps := emu.Live(); mrs != 0 || qps != 0 {
		t.Fatalf("%d memory registrations and %d queue pairs left", mrs, qps)
	}
}

// TestVerbsBufferReuse: steady traffic reuses the registered blocks (the
// pool does not grow), buffers go back to the pool only when their work
// requests complete, and closing everything releases every registration
// and queue pair and closes the device.
func TestVerbsBufferReuse(t *testing.T) {
	e := NewEmulation()
	opts := Options{Verbs: VerbsOptions{Emulation: e}}
	a, _ := NewVerbs(opts)
	b, _ := NewVerbs(opts)
	ln, err := b.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		s, err := ln.Accept(testCtx(t))
		if err != nil {
			done <- err
			return
		}
		for {
			m, err := s.Recv(context.Background())
			if err != nil {
				s.Close()
				done <- nil
				return
			}
			if s.Send(context.Background(), m) != nil {
				s.Close()
				done <- nil
				return
			}
		}
	}()
	c, err := a.Dial(testCtx(t), ln.Addr())
	if err != nil {
		t.Fatal(err)
	}
	m := fill(a.NewMsg(300_000), 1)
	blocks := func() int {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.sess.pool.mu.Lock()
		defer a.sess.pool.mu.Unlock()
		return a.sess.pool.blocks
	}
	var peak int
	for i := range 200 {
		if err := c.Send(testCtx(t), m); err != nil {
			t.Fatal(err)
		}
		if m, err = c.Recv(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		if m.Seq != 1 {
			t.Fatalf("round %d: seq %d", i, m.Seq)
		}
		if i == 10 {
			peak = blocks()
		} else if i > 10 && blocks() > peak+2 {
			t.Fatalf("round %d: %d blocks out, %d after warm-up", i, blocks(), peak)
		}
	}
	pinned := e.emu.Pinned()
	m.Release()
	c.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the echo server did not end within a minute of the client's close")
	}
	ln.Close()
	if pinned == 0 || pinned > 3*32<<20 {
		t.Fatalf("%d bytes registered for one connection pair", pinned)
	}
	checkClean(t, e.emu, a, b)

	// A message of NewMsg keeps the device open until released.
	a2, _ := NewVerbs(opts)
	ln2, _ := a2.Listen("127.0.0.1:0")
	held := a2.NewMsg(1 << 20)
	ln2.Close()
	if held.pool == nil || e.emu.Pinned() == 0 {
		t.Fatal("NewMsg with a listener open did not use registered memory")
	}
	held.Release()
	checkClean(t, e.emu, a2)
	if m := a2.NewMsg(1 << 20); m.pool != nil {
		t.Fatal("NewMsg without a device open returned registered memory")
	}
}

// TestVerbsCompletionError: a work request that completes with an error
// breaks the connection, on both ends, with errors matching ErrVerbs (or
// ErrClosed on the end that learns it from the peer); nothing crashes,
// and closing releases everything.
func TestVerbsCompletionError(t *testing.T) {
	for _, op := range []verbs.Opcode{verbs.OpWriteImm, verbs.OpSend} {
		t.Run(fmt.Sprint(op), func(t *testing.T) {
			e := NewEmulation()
			opts := Options{Verbs: VerbsOptions{Emulation: e}}
			a, _ := NewVerbs(opts)
			b, _ := NewVerbs(opts)
			c, s, err := vpair(t, a, b)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			seen := 0
			e.emu.SetHooks(verbs.Hooks{Send: func(qpn uint32, wr *verbs.SendWR) verbs.Status {
				mu.Lock()
				defer mu.Unlock()
				if wr.Op == op && wr.NumSGE > 0 {
					if seen++; seen == 3 {
						return verbs.StatusGeneralErr
					}
				}
				return verbs.StatusSuccess
			}})
			n := 100_000
			if op == verbs.OpSend {
				n = 10
			}
			var sendErr error
			for i := 0; i < 50 && sendErr == nil; i++ {
				sendErr = c.Send(testCtx(t), fill(NewMsg(n), i))
			}
			if !errors.Is(sendErr, ErrVerbs) || Recoverable(sendErr) {
				t.Fatalf("send after a completion error: %v", sendErr)
			}
			// The receiver gets what arrived, then an error.
			for i := 0; ; i++ {
				m, err := s.Recv(testCtx(t))
				if err != nil {
					if !errors.Is(err, ErrVerbs) && !errors.Is(err, ErrClosed) || Recoverable(err) {
						t.Fatalf("receiver: %v", err)
					}
					break
				}
				if m.Seq != uint64(i) {
					t.Fatalf("got %d, want %d", m.Seq, i)
				}
				m.Release()
			}
			c.Close()
			s.Close()
			checkClean(t, e.emu, a, b)
		})
	}
}

// TestVerbsQPErrorMidTransfer: the receiver's queue pair fails while a
// stream of large frames is under way.
func TestVerbsQPErrorMidTransfer(t *testing.T) {
	c, s, emu := emuPair(t, Options{})
	errc := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			if err := c.Send(context.Background(), fill(NewMsg(50_000), i)); err != nil {
				errc <- err
				return
			}
		}
	}()
	for i := range 5 {
		m := mustRecv(t, s)
		if m.Seq != uint64(i) {
			t.Fatalf("got %d, want %d", m.Seq, i)
		}
		m.Release()
	}
	emu.BreakQP(s.qp.Num())
	var err error
	select {
	case err = <-errc:
	case <-time.After(time.Minute):
		t.Fatal("the sender still sends a minute after the peer's queue pair failed")
	}
	if !errors.Is(err, ErrVerbs) || Recoverable(err) {
		t.Fatalf("sender after the peer's queue pair failed: %v", err)
	}
	for {
		m, err := s.Recv(testCtx(t))
		if err != nil {
			if !errors.Is(err, ErrVerbs) || Recoverable(err) {
				t.Fatalf("receiver: %v", err)
			}
			break
		}
		m.Release()
	}
	if err := s.Send(testCtx(t), NewMsg(1)); !errors.Is(err, ErrVerbs) {
		t.Fatalf("send on a failed queue pair: %v", err)
	}
}

// fallbackCase builds an auto network pair where verbs cannot be used,
// and checks both ends fall back to TCP, saying why, and work.
func checkFallback(t *testing.T, dn, ln Network, wantLocal, wantPeer string) (client, server Conn) {
	t.Helper()
	c, s, err := vpair(t, dn, ln)
	if err != nil {
		t.Fatal(err)
	}
	ct, st := c.Transport(), s.Transport()
	if ct.Name != "tcp" || st.Name != "tcp" || !strings.Contains(ct.Reason, wantLocal) || !strings.Contains(st.Reason, wantPeer) {
		t.Fatalf("dialer %+v, listener %+v; want tcp, %q and %q", ct, st, wantLocal, wantPeer)
	}
	for i, p := range [][2]Conn{{c, s}, {s, c}} {
		if err := p[0].Send(testCtx(t), fill(NewMsg(1000), i)); err != nil {
			t.Fatal(err)
		}
		m := mustRecv(t, p[1])
		if m.Seq != uint64(i) {
			t.Fatalf("got %d", m.Seq)
		}
		m.Release()
	}
	return c, s
}

func autoOn(t *testing.T, e *Emulation, opts Options) *Verbs {
	t.Helper()
	opts.Verbs.Emulation = e
	v, err := NewAuto(opts)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestAutoFallback: every reason a host cannot use verbs makes an auto
// connection stay on TCP with that reason on both ends (the end without
// verbs says "local", the other "peer"), and a verbs network fail with an
// error matching the cause.
func TestAutoFallback(t *testing.T) {
	good := NewEmulation()
	down := verbs.DefaultEmuPort
	down.State = verbs.PortDown
	small := verbs.Memlock{Limit: 8 << 20}
	cases := []struct {
		name string
		cfg  verbs.EmuConfig
		opts Options
		want string
		is   error
	}{
		{"no kernel support", verbs.EmuConfig{NoKernelSupport: true}, Options{}, "no RDMA support in this kernel", ErrUnsupported},
		{"no devices", verbs.EmuConfig{Devices: []verbs.EmuDevice{}}, Options{}, "no RDMA devices", ErrUnsupported},
		{"port down", verbs.EmuConfig{Devices: []verbs.EmuDevice{{Name: "emu0", Ports: []verbs.PortAttr{down}}}}, Options{}, "emu0 port 1 is DOWN", ErrUnsupported},
		{"no such device", verbs.EmuConfig{}, Options{Verbs: VerbsOptions{Device: "mlx5_9"}}, `no RDMA device "mlx5_9"`, ErrUnsupported},
		{"memlock", verbs.EmuConfig{Memlock: small}, Options{}, "locked-memory limit RLIMIT_MEMLOCK of 8 MiB", ErrMemlock},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bad := emulation(tc.cfg)
			// The emulations differ, but the bad one never gets as far as
			// comparing them.
			checkFallback(t, autoOn(t, bad, tc.opts), autoOn(t, good, Options{}), "local: ", "peer: ")
			c, _ := checkFallback(t, autoOn(t, good, Options{}), autoOn(t, bad, tc.opts), "peer: ", "local: ")
			if !strings.Contains(c.Transport().Reason, tc.want) {
				t.Fatalf("reason %q does not say %q", c.Transport().Reason, tc.want)
			}
			// verbs mode: Listen (or NewVerbs) fails with the cause.
			opts := tc.opts
			opts.Verbs.Emulation = bad
			v, err := NewVerbs(opts)
			if err == nil {
				_, err = v.Listen("127.0.0.1:0")
			}
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("verbs mode: %v, want %v saying %q", err, tc.is, tc.want)
			}
		})
	}
	// The memlock message names the limit and the fix.
	_, s := checkFallback(t, autoOn(t, good, Options{}), autoOn(t, emulation(verbs.EmuConfig{Memlock: small}), Options{}), "peer: ", "local: ")
	for _, want := range []string{"ulimit -l unlimited", "/etc/security/limits.conf", "PropagateResourceLimits", "32 MiB"} {
		if !strings.Contains(s.Transport().Reason, want) {
			t.Errorf("memlock reason %q does not mention %q", s.Transport().Reason, want)
		}
	}
	// Different emulations cannot talk; auto says so.
	checkFallback(t, autoOn(t, NewEmulation(), Options{}), autoOn(t, good, Options{}), "different in-process verbs emulations", "different in-process verbs emulations")
	// A registration failure at connection time, and a queue pair that
	// cannot be created.
	for name, h := range map[string]verbs.Hooks{
		"registration": {RegMR: func(int) error { return fmt.Errorf("ibv_reg_mr: injected failure") }},
		"queue pair":   {CreateQP: func() error { return fmt.Errorf("ibv_create_qp: injected failure") }},
		"RTR": {Modify: func(_ uint32, st string) error {
			if st == "RTR" {
				return fmt.Errorf("injected %s failure", st)
			}
			return nil
		}},
	} {
		t.Run(name, func(t *testing.T) {
			e := NewEmulation()
			e.emu.SetHooks(h)
			checkFallback(t, autoOn(t, e, Options{}), autoOn(t, e, Options{}), "injected", "injected")
			checkClean(t, e.emu)
			v, _ := NewVerbs(Options{Verbs: VerbsOptions{Emulation: e}})
			w, _ := NewVerbs(Options{Verbs: VerbsOptions{Emulation: e}})
			if _, _, err := vpair(t, v, w); !errors.Is(err, ErrVerbs) && !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "injected") {
				t.Fatalf("verbs mode: %v", err)
			}
		})
	}
}

// TestAutoProbeFails: a queue pair that connects but cannot carry the
// probe (every packet fails) falls back to TCP on both ends.
func TestAutoProbeFails(t *testing.T) {
	e := NewEmulation()
	e.emu.SetHooks(verbs.Hooks{Send: func(uint32, *verbs.SendWR) verbs.Status { return verbs.StatusRetryExcErr }})
	checkFallback(t, autoOn(t, e, Options{}), autoOn(t, e, Options{}), "probe", "probe")
	checkClean(t, e.emu)
}

// TestAutoVerbs: two auto ends with devices use verbs, say so, and report
// it through OnConnect on both ends.
func TestAutoVerbs(t *testing.T) {
	e := NewEmulation()
	var mu sync.Mutex
	var seen []TransportInfo
	opts := Options{OnConnect: func(local, remote string, ti TransportInfo, err error) {
		mu.Lock()
		seen = append(seen, ti)
		mu.Unlock()
		if err != nil || local == "" || remote == "" {
			t.Errorf("OnConnect(%q, %q, %+v, %v)", local, remote, ti, err)
		}
	}}
	c, s, err := vpair(t, autoOn(t, e, opts), autoOn(t, e, opts))
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range []TransportInfo{c.Transport(), s.Transport()} {
		if ti.Name != "verbs" || !ti.Emulated || ti.Device != "emu0:1" || !strings.Contains(ti.Reason, "both ends") {
			t.Fatalf("transport %+v", ti)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0].Name != "verbs" || seen[1].Name != "verbs" {
		t.Fatalf("OnConnect saw %+v", seen)
	}
}

// TestVerbsAutoMixed: a verbs end and an auto end that cannot use verbs
// do not connect (the verbs end requires it), with errors on both sides.
func TestVerbsAutoMixed(t *testing.T) {
	good := NewEmulation()
	v, _ := NewVerbs(Options{Verbs: VerbsOptions{Emulation: good}})
	var accepted error
	done := make(chan struct{})
	ln := autoOn(t, emulation(verbs.EmuConfig{NoKernelSupport: true}), Options{OnConnect: func(_, _ string, _ TransportInfo, err error) {
		accepted = err
		close(done)
	}})
	if _, _, err := vpair(t, v, ln); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "no RDMA support in this kernel") {
		t.Fatalf("verbs dialer to an auto listener without devices: %v", err)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the auto listener did not report the refused connection within a minute")
	}
	if !errors.Is(accepted, ErrUnsupported) {
		t.Fatalf("auto listener: %v", accepted)
	}
}

// TestHostDevicelessPath runs on hosts without a usable RDMA device (this
// build may lack verbs altogether): NewVerbs says why, and auto
// connections stay on TCP with that reason.
func TestHostDevicelessPath(t *testing.T) {
	p := ProbeVerbs(Options{})
	if p.Usable != "" {
		t.Skipf("this host has a usable RDMA device (%s): TestHostVerbsConformance covers it", p.Usable)
	}
	t.Logf("verbs: %s", p.Reason)
	_, err := NewVerbs(Options{})
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("NewVerbs without a device: %v", err)
	}
	if !verbs.Built && !strings.Contains(err.Error(), "no verbs support") {
		t.Fatalf("NewVerbs in a build without verbs: %v", err)
	}
	if verbs.Built && !verbs.KernelSupport() && !strings.Contains(err.Error(), "no RDMA support in this kernel ("+verbs.SysfsDir+" missing)") {
		t.Fatalf("NewVerbs on a kernel without RDMA: %v", err)
	}
	a, _ := NewAuto(Options{})
	b, _ := NewAuto(Options{})
	a.shm, b.shm = nil, nil // as between hosts: no shm to take
	c, s := checkFallback(t, a, b, "local: ", "local: ")
	_ = s
	if !strings.Contains(c.Transport().Reason, strings.TrimPrefix(p.Reason, "rdma: unsupported: ")) {
		t.Fatalf("fallback reason %q, probe says %q", c.Transport().Reason, p.Reason)
	}
	_ = s
}

// TestVerbsPeerCloseBeforeReceive: frames sent before Close arrive, then
// io.EOF, even when the receiver starts reading only afterwards.
func TestVerbsPeerCloseBeforeReceive(t *testing.T) {
	for range 20 {
		c, s, _ := emuPair(t, Options{})
		for i := range 3 {
			if err := c.Send(testCtx(t), fill(NewMsg(5000*(i+1)), i)); err != nil {
				t.Fatal(err)
			}
		}
		c.Close()
		for i := range 3 {
			m := mustRecv(t, s)
			if m.Seq != uint64(i) {
				t.Fatalf("got %d", m.Seq)
			}
			m.Release()
		}
		if _, err := s.Recv(testCtx(t)); !errors.Is(err, io.EOF) {
			t.Fatalf("after the peer's close: %v", err)
		}
		s.Close()
	}
	runtime.GC()
}

// TestVerbsLentInPlace: a payload lent from memory of the network's
// allocator (a learner's gradient kept in a NewMsg of its own) is written
// from where it lies, and Send returns only once the write has completed
// (here held back by the emulation until the test lets it go), so that
// the receiver gets what was sent although the lender overwrites it right
// after Send. A payload lent from the Go heap is copied into a registered
// block first.
func TestVerbsLentInPlace(t *testing.T) {
	c, s, emu := emuPair(t, Options{})
	var rec recordOps
	var hold atomic.Bool // hold back RDMA writes
	emu.SetHooks(verbs.Hooks{Send: rec.hook, Hold: func(_ uint32, wr *verbs.SendWR) bool { return hold.Load() && wr.Op == verbs.OpWriteImm }})
	const n, lo, hi = 100_000, 1_000, 99_993
	owner := c.v.NewMsg(n)
	if owner.pool == nil {
		t.Fatal("NewMsg of a connected verbs network is not registered memory")
	}
	defer owner.Release()
	heap := make([]float32, n)
	for i, lent := range [][]float32{owner.Payload[lo:hi], heap[lo:hi], owner.Payload[lo:hi]} {
		synth.Gradient(lent, 1e-3, uint64(i))
		want := slices.Clone(lent)
		m := NewMsg(0)
		m.Borrow(lent)
		m.Seq = uint64(i)
		hold.Store(i == 2)
		sent := make(chan error, 1)
		go func() { sent <- c.Send(testCtx(t), m) }()
		if i == 2 {
			select {
			case err := <-sent:
				t.Fatalf("Send returned (%v) while its write was held back", err)
			case <-time.After(50 * time.Millisecond):
			}
			hold.Store(false)
			emu.Resume()
		}
		select {
		case err := <-sent:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("message %d: Send did not return", i)
		}
		clear(lent) // the lender's again
		got := mustRecv(t, s)
		if got.Seq != uint64(i) || firstDiff(got.Payload, want) >= 0 {
			t.Fatalf("message %d differs from what was lent (at %d)", i, firstDiff(got.Payload, want))
		}
		got.Release()
		rec.mu.Lock()
		var last verbs.SendWR
		for j := len(rec.wrs) - 1; j >= 0; j-- {
			if rec.wrs[j].Op == verbs.OpWriteImm {
				last = rec.wrs[j]
				break
			}
		}
		rec.mu.Unlock()
		addr := uint64(uintptr(unsafe.Pointer(&lent[0])))
		if inPlace := last.SGE[1].Addr == addr && last.SGE[1].Len == 4*(hi-lo); inPlace != (i != 1) {
			t.Fatalf("message %d: written in place %v, want %v: %+v", i, inPlace, i != 1, last)
		}
	}
}
