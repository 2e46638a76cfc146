//go:build verbs && cgo

package verbs

/*
#cgo CFLAGS: -std=c99 -O2 -Wall -Wextra -I${SRCDIR}/../../../csrc/verbs
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "ssverbs.h"

#cgo noescape ssv_load
#cgo nocallback ssv_load
#cgo noescape ssv_devices
#cgo nocallback ssv_devices
#cgo noescape ssv_open
#cgo nocallback ssv_open
#cgo noescape ssv_query_device
#cgo nocallback ssv_query_device
#cgo noescape ssv_query_port
#cgo nocallback ssv_query_port
#cgo noescape ssv_query_gid
#cgo nocallback ssv_query_gid
#cgo noescape ssv_alloc_pd
#cgo nocallback ssv_alloc_pd
#cgo noescape ssv_reg_mr
#cgo nocallback ssv_reg_mr
#cgo noescape ssv_create_cq
#cgo nocallback ssv_create_cq
#cgo noescape ssv_cq_poll
#cgo nocallback ssv_cq_poll
#cgo noescape ssv_create_qp
#cgo nocallback ssv_create_qp
#cgo noescape ssv_qp_rtr
#cgo nocallback ssv_qp_rtr
#cgo noescape ssv_post_send
#cgo nocallback ssv_post_send
#cgo noescape ssv_post_recv
#cgo nocallback ssv_post_recv
*/
import "C"

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Built reports whether this build has the cgo binding to libibverbs.
const Built = true

var loadOnce struct {
	sync.Once
	err error
}

// Host returns the host's libibverbs, loaded on first use (dlopen of
// libibverbs.so.1). It fails with ErrNoLibrary if the library cannot be
// loaded.
func Host() (Provider, error) {
	loadOnce.Do(func() {
		var buf [256]C.char
		if C.ssv_load(&buf[0], C.size_t(len(buf))) != 0 {
			loadOnce.err = fmt.Errorf("%w: %s", ErrNoLibrary, C.GoString(&buf[0]))
		}
	})
	if loadOnce.err != nil {
		return nil, loadOnce.err
	}
	return hostProvider{}, nil
}

type hostProvider struct{}

// pinned counts the bytes registered through the host provider.
var pinned atomic.Uint64

func (hostProvider) Pinned() uint64   { return pinned.Load() }
func (hostProvider) Name() string     { return "libibverbs.so.1" }
func (hostProvider) Fabric() uint64   { return 0 }
func (hostProvider) Memlock() Memlock { return HostMemlock() }

func errnoErr(op string, rc C.int) error {
	if rc == 0 {
		return nil
	}
	return fmt.Errorf("%s: %w", op, syscall.Errno(rc))
}

func (hostProvider) Devices() ([]Device, error) {
	const max = 64
	var names [max * C.SSV_NAME_LEN]C.char
	var guids [max]C.uint64_t
	var n C.int
	if err := errnoErr("ibv_get_device_list", C.ssv_devices(&names[0], &guids[0], max, &n)); err != nil {
		return nil, err
	}
	ds := make([]Device, int(n))
	for i := range ds {
		ds[i] = Device{Name: C.GoString(&names[i*C.SSV_NAME_LEN]), GUID: uint64(guids[i])}
	}
	return ds, nil
}

func (hostProvider) Open(name string) (Context, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var e C.int
	ctx := C.ssv_open(cname, &e)
	if ctx == nil {
		return nil, errnoErr("ibv_open_device "+name, e)
	}
	return &hostCtx{ctx: ctx, name: name}, nil
}

type hostCtx struct {
	ctx  *C.struct_ibv_context
	name string
}

func (c *hostCtx) Attr() (DeviceAttr, error) {
	var a C.struct_ssv_device_attr
	if err := errnoErr("ibv_query_device "+c.name, C.ssv_query_device(c.ctx, &a)); err != nil {
		return DeviceAttr{}, err
	}
	return DeviceAttr{Firmware: C.GoString(&a.fw_ver[0]), Ports: int(a.ports), MaxQPWR: int(a.max_qp_wr),
		MaxSGE: int(a.max_sge), MaxCQE: int(a.max_cqe), MaxMRSize: uint64(a.max_mr_size)}, nil
}

func (c *hostCtx) Port(num int) (PortAttr, error) {
	var a C.struct_ssv_port_attr
	if err := errnoErr(fmt.Sprintf("ibv_query_port %s/%d", c.name, num), C.ssv_query_port(c.ctx, C.int(num), &a)); err != nil {
		return PortAttr{}, err
	}
	return PortAttr{State: PortState(a.state), LinkLayer: LinkLayer(a.link_layer), ActiveMTU: MTU(a.active_mtu),
		LID: uint16(a.lid), GIDTableLen: int(a.gid_tbl_len)}, nil
}

func (c *hostCtx) GID(port, index int) (GIDEntry, error) {
	var gid [16]C.uint8_t
	var typ C.int
	if err := errnoErr(fmt.Sprintf("ibv_query_gid %s/%d/%d", c.name, port, index),
		C.ssv_query_gid(c.ctx, C.int(port), C.int(index), &gid[0], &typ)); err != nil {
		return GIDEntry{}, err
	}
	g := GIDEntry{Index: index, Type: GIDUnknown}
	if typ >= 0 {
		g.Type = GIDType(typ)
	}
	for i := range gid {
		g.GID[i] = byte(gid[i])
	}
	return g, nil
}

func (c *hostCtx) AllocPD() (PD, error) {
	var e C.int
	pd := C.ssv_alloc_pd(c.ctx, &e)
	if pd == nil {
		return nil, errnoErr("ibv_alloc_pd", e)
	}
	return &hostPD{pd: pd, ctx: c.ctx}, nil
}

func (c *hostCtx) Close() error { return errnoErr("ibv_close_device", C.ssv_close(c.ctx)) }

type hostPD struct {
	pd  *C.struct_ibv_pd
	ctx *C.struct_ibv_context
}

func (pd *hostPD) RegMR(mem []byte, access Access) (MR, error) {
	if len(mem) == 0 {
		return nil, fmt.Errorf("ibv_reg_mr: %w", syscall.EINVAL)
	}
	var e C.int
	// mem lies outside the Go heap (mmap), so C may keep its address.
	mr := C.ssv_reg_mr(pd.pd, unsafe.Pointer(unsafe.SliceData(mem)), C.size_t(len(mem)), C.int(access), &e)
	if mr == nil {
		return nil, errnoErr("ibv_reg_mr", e)
	}
	pinned.Add(uint64(len(mem)))
	return &hostMR{mr: mr, size: uint64(len(mem))}, nil
}

func (pd *hostPD) CreateCQ(depth int) (CQ, error) {
	var e C.int
	cq := C.ssv_create_cq(pd.ctx, C.int(depth), &e)
	if cq == nil {
		return nil, errnoErr("ibv_create_cq", e)
	}
	return &hostCQ{cq: cq}, nil
}

func (pd *hostPD) CreateQP(cq CQ, caps QPCaps) (QP, error) {
	hcq, ok := cq.(*hostCQ)
	if !ok {
		return nil, fmt.Errorf("ibv_create_qp: %w", syscall.EINVAL)
	}
	var e C.int
	qp := C.ssv_create_qp(pd.pd, hcq.cq, C.int(caps.MaxSendWR), C.int(caps.MaxRecvWR),
		C.int(caps.MaxSendSGE), C.int(caps.MaxRecvSGE), &e)
	if qp == nil {
		return nil, errnoErr("ibv_create_qp", e)
	}
	return &hostQP{qp: qp, num: uint32(C.ssv_qp_num(qp))}, nil
}

func (pd *hostPD) Close() error { return errnoErr("ibv_dealloc_pd", C.ssv_dealloc_pd(pd.pd)) }

type hostMR struct {
	mr   *C.struct_ibv_mr
	size uint64
}

func (m *hostMR) LKey() uint32 { return uint32(m.mr.lkey) }
func (m *hostMR) RKey() uint32 { return uint32(m.mr.rkey) }
func (m *hostMR) Close() error {
	if err := errnoErr("ibv_dereg_mr", C.ssv_dereg_mr(m.mr)); err != nil {
		return err
	}
	pinned.Add(-m.size)
	return nil
}

type hostCQ struct{ cq *C.struct_ssv_cq }

var wcOps = map[C.uint32_t]WCOp{C.IBV_WC_SEND: WCSend, C.IBV_WC_RDMA_WRITE: WCWrite,
	C.IBV_WC_RECV: WCRecv, C.IBV_WC_RECV_RDMA_WITH_IMM: WCRecvImm}

func (c *hostCQ) Poll(out []WC) (int, error) {
	var wc [32]C.struct_ssv_wc
	n := C.ssv_cq_poll(c.cq, &wc[0], C.int(min(len(out), len(wc))))
	if n < 0 {
		return 0, errnoErr("ibv_poll_cq", -n)
	}
	for i := range int(n) {
		w := &wc[i]
		out[i] = WC{ID: uint64(w.wr_id), Status: Status(w.status), Op: wcOps[w.opcode], Len: uint32(w.byte_len),
			Imm: uint32(w.imm), HasImm: w.has_imm != 0, QPN: uint32(w.qp_num), VendorErr: uint32(w.vendor_err)}
	}
	return int(n), nil
}

func (c *hostCQ) Arm() error { return errnoErr("ibv_req_notify_cq", C.ssv_cq_arm(c.cq)) }

func (c *hostCQ) Wait() error {
	switch rc := C.ssv_cq_wait(c.cq); {
	case rc == -1:
		return ErrWoken
	case rc != 0:
		return errnoErr("ibv_get_cq_event", rc)
	}
	return nil
}

func (c *hostCQ) Wake()        { C.ssv_cq_wake(c.cq) }
func (c *hostCQ) Close() error { return errnoErr("ibv_destroy_cq", C.ssv_destroy_cq(c.cq)) }

type hostQP struct {
	qp  *C.struct_ibv_qp
	num uint32
}

func (q *hostQP) Num() uint32 { return q.num }

func (q *hostQP) Init(port int) error {
	return errnoErr("ibv_modify_qp to INIT", C.ssv_qp_init(q.qp, C.int(port), C.int(AccessLocalWrite|AccessRemoteWrite)))
}

func (q *hostQP) ReadyToReceive(a RTR) error {
	r := C.struct_ssv_rtr{port: C.int(a.Port), mtu: C.int(a.MTU), dest_qpn: C.uint32_t(a.DestQPN),
		rq_psn: C.uint32_t(a.PSN), lid: C.int(a.LID), sgid_index: C.int(a.SGIDIndex),
		hop_limit: C.int(a.HopLimit), min_rnr_timer: C.int(a.MinRNRTimer)}
	if a.Global {
		r.global = 1
		for i, b := range a.GID {
			r.gid[i] = C.uint8_t(b)
		}
	}
	return errnoErr("ibv_modify_qp to RTR", C.ssv_qp_rtr(q.qp, &r))
}

func (q *hostQP) ReadyToSend(a RTS) error {
	return errnoErr("ibv_modify_qp to RTS", C.ssv_qp_rts(q.qp, C.uint32_t(a.PSN), C.int(a.Timeout),
		C.int(a.RetryCount), C.int(a.RNRRetry)))
}

func (q *hostQP) Fail() error { return errnoErr("ibv_modify_qp to ERR", C.ssv_qp_error(q.qp)) }

func (q *hostQP) PostSend(wr *SendWR) error {
	w := C.struct_ssv_send_wr{wr_id: C.uint64_t(wr.ID), opcode: C.uint32_t(wr.Op), imm: C.uint32_t(wr.Imm),
		rkey: C.uint32_t(wr.RKey), remote_addr: C.uint64_t(wr.RemoteAddr), num_sge: C.int(wr.NumSGE)}
	if wr.Signaled {
		w.signaled = 1
	}
	for i := range wr.NumSGE {
		s := &wr.SGE[i]
		w.sge[i] = C.struct_ssv_sge{addr: C.uint64_t(s.Addr), len: C.uint32_t(s.Len), lkey: C.uint32_t(s.LKey)}
	}
	return errnoErr("ibv_post_send", C.ssv_post_send(q.qp, &w))
}

func (q *hostQP) PostRecv(wr *RecvWR) error {
	s := C.struct_ssv_sge{addr: C.uint64_t(wr.SGE.Addr), len: C.uint32_t(wr.SGE.Len), lkey: C.uint32_t(wr.SGE.LKey)}
	return errnoErr("ibv_post_recv", C.ssv_post_recv(q.qp, C.uint64_t(wr.ID), &s))
}

func (q *hostQP) Close() error { return errnoErr("ibv_destroy_qp", C.ssv_destroy_qp(q.qp)) }
