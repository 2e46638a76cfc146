package verbs

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"unsafe"
)

// end is one side of a connected emulated queue pair, with one registered
// buffer of 4 KiB.
type end struct {
	pd  PD
	cq  CQ
	qp  QP
	mem []byte
	mr  MR
}

func (e *end) addr(off int) uint64 { return uint64(uintptr(unsafe.Pointer(&e.mem[off]))) }

func newEnd(t *testing.T, emu *Emu) *end {
	t.Helper()
	ctx, err := emu.Open("emu0")
	if err != nil {
		t.Fatal(err)
	}
	e := &end{mem: make([]byte, 4096)}
	if e.pd, err = ctx.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.mr, err = e.pd.RegMR(e.mem, AccessLocalWrite|AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = e.pd.CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = e.pd.CreateQP(e.cq, QPCaps{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 3, MaxRecvSGE: 1}); err != nil {
		t.Fatal(err)
	}
	if err := e.qp.Init(1); err != nil {
		t.Fatal(err)
	}
	return e
}

// connect brings a and b to RTS, connected to each other.
func connect(t *testing.T, a, b *end, rnrRetry uint8) {
	t.Helper()
	for _, p := range [][2]*end{{a, b}, {b, a}} {
		if err := p[0].qp.ReadyToReceive(RTR{Port: 1, MTU: 5, DestQPN: p[1].qp.Num()}); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range []*end{a, b} {
		if err := e.qp.ReadyToSend(RTS{RNRRetry: rnrRetry}); err != nil {
			t.Fatal(err)
		}
	}
}

func pair(t *testing.T, rnrRetry uint8) (*Emu, *end, *end) {
	emu := NewEmu(EmuConfig{})
	a, b := newEnd(t, emu), newEnd(t, emu)
	connect(t, a, b, rnrRetry)
	return emu, a, b
}

func (e *end) recv(t *testing.T, id uint64, off, n int) {
	t.Helper()
	if err := e.qp.PostRecv(&RecvWR{ID: id, SGE: SGE{Addr: e.addr(off), Len: uint32(n), LKey: e.mr.LKey()}}); err != nil {
		t.Fatal(err)
	}
}

func (e *end) send(t *testing.T, wr SendWR) {
	t.Helper()
	wr.Signaled = true
	if err := e.qp.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
}

func (e *end) sge(off, n int) SGE { return SGE{Addr: e.addr(off), Len: uint32(n), LKey: e.mr.LKey()} }

func poll(t *testing.T, cq CQ) []WC {
	t.Helper()
	wc := make([]WC, 64)
	n, err := cq.Poll(wc)
	if err != nil {
		t.Fatal(err)
	}
	return wc[:n]
}

func TestEmuOrderAndImmediate(t *testing.T) {
	_, a, b := pair(t, 7)
	copy(a.mem, "hello, world: a SEND then a WRITE WITH IMMEDIATE")
	b.recv(t, 1, 0, 100)
	b.recv(t, 2, 100, 100)
	a.send(t, SendWR{ID: 10, Op: OpSend, SGE: [MaxSGE]SGE{a.sge(0, 5), a.sge(5, 8)}, NumSGE: 2})
	a.send(t, SendWR{ID: 11, Op: OpWriteImm, SGE: [MaxSGE]SGE{a.sge(0, 12)}, NumSGE: 1,
		Imm: 0xabcd, RemoteAddr: b.addr(1000), RKey: b.mr.RKey()})
	got := poll(t, b.cq)
	want := []WC{{ID: 1, Op: WCRecv, Len: 13, QPN: b.qp.Num()}, {ID: 2, Op: WCRecvImm, Len: 12, Imm: 0xabcd, HasImm: true, QPN: b.qp.Num()}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("receiver completions %+v, want %+v", got, want)
	}
	if string(b.mem[:13]) != "hello, world:" || string(b.mem[1000:1012]) != "hello, world" {
		t.Fatalf("received %q and %q", b.mem[:13], b.mem[1000:1012])
	}
	if s := poll(t, a.cq); len(s) != 2 || s[0].ID != 10 || s[0].Op != WCSend || s[1].ID != 11 || s[1].Op != WCWrite {
		t.Fatalf("sender completions %+v", s)
	}
}

func TestEmuRNRWaitsInOrder(t *testing.T) {
	_, a, b := pair(t, 7)
	for i := range 3 {
		a.mem[i] = byte('x' + i)
		a.send(t, SendWR{ID: uint64(i), Op: OpSend, SGE: [MaxSGE]SGE{a.sge(i, 1)}, NumSGE: 1})
	}
	if wc := poll(t, b.cq); len(wc) != 0 {
		t.Fatalf("completions without receives: %+v", wc)
	}
	if wc := poll(t, a.cq); len(wc) != 0 {
		t.Fatalf("sends completed without receives: %+v", wc)
	}
	for i := range 3 {
		b.recv(t, uint64(100+i), 10*i, 10)
	}
	wc := poll(t, b.cq)
	if len(wc) != 3 || b.mem[0] != 'x' || b.mem[10] != 'y' || b.mem[20] != 'z' {
		t.Fatalf("after posting receives: %+v, memory %q", wc, b.mem[:21])
	}
}

func TestEmuRNRFails(t *testing.T) {
	_, a, b := pair(t, 3)
	b.recv(t, 7, 0, 10)
	a.recv(t, 8, 0, 10)
	a.send(t, SendWR{ID: 1, Op: OpSend, SGE: [MaxSGE]SGE{a.sge(0, 4)}, NumSGE: 1})
	a.send(t, SendWR{ID: 2, Op: OpSend, SGE: [MaxSGE]SGE{a.sge(0, 4)}, NumSGE: 1})
	// The first uses b's receive; the second finds none and fails, which
	// flushes a's own receive.
	got := poll(t, a.cq)
	if len(got) != 3 || got[0].Status != StatusSuccess || got[1].Status != StatusRNRRetryExcErr || got[2].ID != 8 || got[2].Status != StatusFlush {
		t.Fatalf("completions %+v", got)
	}
	if err := got[1].Err(); err == nil || !bytes.Contains([]byte(err.Error()), []byte("RNR retry")) {
		t.Fatalf("error %v", err)
	}
	// Later posts are flushed.
	a.send(t, SendWR{ID: 3, Op: OpSend, SGE: [MaxSGE]SGE{a.sge(0, 4)}, NumSGE: 1})
	a.recv(t, 9, 0, 10)
	if got := poll(t, a.cq); len(got) != 2 || got[0].Status != StatusFlush || got[1].Status != StatusFlush {
		t.Fatalf("posts after the error: %+v", got)
	}
}

func TestEmuRemoteAccess(t *testing.T) {
	for _, tc := range []struct {
		name string
		wr   func(a, b *end) SendWR
	}{
		{"bad rkey", func(a, b *end) SendWR {
			return SendWR{Op: OpWriteImm, SGE: [MaxSGE]SGE{a.sge(0, 8)}, NumSGE: 1, RemoteAddr: b.addr(0), RKey: b.mr.RKey() + 100}
		}},
		{"beyond the region", func(a, b *end) SendWR {
			return SendWR{Op: OpWriteImm, SGE: [MaxSGE]SGE{a.sge(0, 8)}, NumSGE: 1, RemoteAddr: b.addr(4090), RKey: b.mr.RKey()}
		}},
		{"before the region", func(a, b *end) SendWR {
			return SendWR{Op: OpWrite, SGE: [MaxSGE]SGE{a.sge(0, 8)}, NumSGE: 1, RemoteAddr: b.addr(0) - 8, RKey: b.mr.RKey()}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, a, b := pair(t, 7)
			b.recv(t, 5, 0, 10)
			a.send(t, tc.wr(a, b))
			if got := poll(t, a.cq); len(got) != 1 || got[0].Status != StatusRemAccessErr {
				t.Fatalf("sender %+v", got)
			}
			// The responder's QP errs too: its receive is flushed.
			if got := poll(t, b.cq); len(got) != 1 || got[0].ID != 5 || got[0].Status != StatusFlush {
				t.Fatalf("responder %+v", got)
			}
		})
	}
}

func TestEmuLocalErrors(t *testing.T) {
	_, a, b := pair(t, 7)
	bad := a.sge(0, 8)
	bad.LKey = b.mr.LKey() // another PD's key
	a.send(t, SendWR{Op: OpSend, SGE: [MaxSGE]SGE{bad}, NumSGE: 1})
	if got := poll(t, a.cq); len(got) != 1 || got[0].Status != StatusLocProtErr {
		t.Fatalf("foreign lkey: %+v", got)
	}

	_, a, b = pair(t, 7)
	b.recv(t, 1, 0, 4)
	a.send(t, SendWR{Op: OpSend, SGE: [MaxSGE]SGE{a.sge(0, 8)}, NumSGE: 1})
	if got := poll(t, b.cq); len(got) != 1 || got[0].Status != StatusLocLenErr {
		t.Fatalf("receiver of a too long SEND: %+v", got)
	}
	if got := poll(t, a.cq); len(got) != 1 || got[0].Status != StatusRemInvReqErr {
		t.Fatalf("sender of a too long SEND: %+v", got)
	}
}

func TestEmuPeerGone(t *testing.T) {
	_, a, b := pair(t, 7)
	if err := b.qp.Close(); err != nil {
		t.Fatal(err)
	}
	a.send(t, SendWR{Op: OpSend, SGE: [MaxSGE]SGE{a.sge(0, 8)}, NumSGE: 1})
	if got := poll(t, a.cq); len(got) != 1 || got[0].Status != StatusRetryExcErr {
		t.Fatalf("send to a destroyed QP: %+v", got)
	}
	// BreakQP flushes outstanding receives.
	_, a, b = pair(t, 7)
	b.recv(t, 3, 0, 8)
	b.recv(t, 4, 8, 8)
	b.qp.(*emuQP).emu.BreakQP(b.qp.Num())
	if got := poll(t, b.cq); len(got) != 2 || got[0].Status != StatusFlush || got[1].ID != 4 {
		t.Fatalf("broken QP: %+v", got)
	}
	a.send(t, SendWR{Op: OpSend, SGE: [MaxSGE]SGE{a.sge(0, 8)}, NumSGE: 1})
	if got := poll(t, a.cq); len(got) != 1 || got[0].Status != StatusRetryExcErr {
		t.Fatalf("send to a broken QP: %+v", got)
	}
}

func TestEmuHooks(t *testing.T) {
	emu, a, b := pair(t, 7)
	b.recv(t, 1, 0, 64)
	b.recv(t, 2, 64, 64)
	n := 0
	emu.SetHooks(Hooks{Send: func(qpn uint32, wr *SendWR) Status {
		if n++; n == 2 {
			return StatusGeneralErr
		}
		return StatusSuccess
	}})
	a.send(t, SendWR{ID: 1, Op: OpSend, SGE: [MaxSGE]SGE{a.sge(0, 8)}, NumSGE: 1})
	a.send(t, SendWR{ID: 2, Op: OpSend, SGE: [MaxSGE]SGE{a.sge(0, 8)}, NumSGE: 1})
	if got := poll(t, a.cq); len(got) != 2 || got[0].Status != StatusSuccess || got[1].Status != StatusGeneralErr {
		t.Fatalf("completions %+v", got)
	}
	fail := errors.New("injected")
	emu.SetHooks(Hooks{RegMR: func(int) error { return fail }, CreateQP: func() error { return fail },
		Modify: func(uint32, string) error { return fail }})
	if _, err := a.pd.RegMR(make([]byte, 10), AccessLocalWrite); err != fail {
		t.Fatalf("RegMR: %v", err)
	}
	if _, err := a.pd.CreateQP(a.cq, QPCaps{MaxSendWR: 1, MaxRecvWR: 1}); err != fail {
		t.Fatalf("CreateQP: %v", err)
	}
}

func TestEmuQueueLimits(t *testing.T) {
	_, a, b := pair(t, 7)
	for i := range 16 {
		b.recv(t, uint64(i), i, 1)
	}
	if err := b.qp.PostRecv(&RecvWR{SGE: b.sge(0, 1)}); !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("17th receive: %v", err)
	}
	for range 16 {
		a.send(t, SendWR{Op: OpSend, SGE: [MaxSGE]SGE{a.sge(0, 1)}, NumSGE: 1})
	}
	wr := SendWR{Op: OpSend, SGE: [MaxSGE]SGE{a.sge(0, 1)}, NumSGE: 1}
	if err := a.qp.PostSend(&wr); !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("17th send before polling: %v", err)
	}
	if got := poll(t, a.cq); len(got) != 16 {
		t.Fatalf("%d completions", len(got))
	}
	if err := a.qp.PostSend(&wr); err != nil {
		t.Fatalf("send after polling: %v", err)
	}
	// Overflowing the completion queue fails its next poll.
	cq, _ := a.pd.CreateCQ(1)
	qp, _ := a.pd.CreateQP(cq, QPCaps{MaxSendWR: 4, MaxRecvWR: 4})
	qp.Init(1)
	for range 2 {
		qp.PostRecv(&RecvWR{SGE: a.sge(0, 1)})
	}
	qp.Fail()
	if _, err := cq.Poll(make([]WC, 4)); err == nil {
		t.Fatal("overrun completion queue polls without error")
	}
}

func TestEmuEvents(t *testing.T) {
	_, a, b := pair(t, 7)
	b.recv(t, 1, 0, 8)
	b.recv(t, 2, 8, 8)
	a.send(t, SendWR{Op: OpSend, SGE: [MaxSGE]SGE{a.sge(0, 1)}, NumSGE: 1})
	// A completion before arming raises no event.
	b.cq.Arm()
	b.cq.Wake()
	if err := b.cq.Wait(); err != ErrWoken {
		t.Fatalf("Wait with a completion queued before Arm: %v", err)
	}
	a.send(t, SendWR{Op: OpSend, SGE: [MaxSGE]SGE{a.sge(0, 1)}, NumSGE: 1})
	if err := b.cq.Wait(); err != nil {
		t.Fatalf("Wait after a completion: %v", err)
	}
	if got := poll(t, b.cq); len(got) != 2 {
		t.Fatalf("%d completions", len(got))
	}
}

func TestEmuMemlockAndLifetimes(t *testing.T) {
	emu := NewEmu(EmuConfig{Memlock: Memlock{Limit: 8 << 10}})
	ctx, _ := emu.Open("emu0")
	pd, _ := ctx.AllocPD()
	mr, err := pd.RegMR(make([]byte, 8<<10), AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pd.RegMR(make([]byte, 1), AccessLocalWrite); !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("registration over the limit: %v", err)
	}
	if err := pd.Close(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("closing a PD with a live MR: %v", err)
	}
	mr.Close()
	if emu.Pinned() != 0 {
		t.Fatalf("%d bytes pinned after closing", emu.Pinned())
	}
	if err := pd.Close(); err != nil {
		t.Fatal(err)
	}
	exempt := NewEmu(EmuConfig{Memlock: Memlock{Limit: 1, Exempt: true}})
	ctx, _ = exempt.Open("emu0")
	pd, _ = ctx.AllocPD()
	if _, err := pd.RegMR(make([]byte, 4096), AccessLocalWrite); err != nil {
		t.Fatalf("CAP_IPC_LOCK: %v", err)
	}
	if _, err := NewEmu(EmuConfig{NoKernelSupport: true}).Devices(); !errors.Is(err, syscall.ENOSYS) {
		t.Fatalf("no kernel support: %v", err)
	}
	if ds, err := NewEmu(EmuConfig{Devices: []EmuDevice{}}).Devices(); err != nil || len(ds) != 0 {
		t.Fatalf("no devices: %v %v", ds, err)
	}
}
