package verbs

import (
	"errors"
	"fmt"
	"strconv"
)

// Provider is one implementation of the verbs operations: the host's
// libibverbs (Host) or the in-process emulation (Emu).
type Provider interface {
	// Name says what implements the operations ("libibverbs.so.1",
	// "emulation").
	Name() string
	// Fabric is 0 for real hardware; an emulation returns its own non-zero
	// id, so that two ends can tell whether they share it.
	Fabric() uint64
	// Devices lists the RDMA devices. An error means the host cannot list
	// any (no kernel support: ibv_get_device_list returned NULL); an empty
	// list means there are none.
	Devices() ([]Device, error)
	// Open opens the named device.
	Open(name string) (Context, error)
	// Memlock reports the locked-memory limit that registrations count
	// against, and Pinned how many bytes this process has registered
	// through the provider.
	Memlock() Memlock
	Pinned() uint64
}

// Device names one RDMA device.
type Device struct {
	Name string
	GUID uint64 // node GUID, network byte order as read
}

// Unlimited is Memlock.Limit when there is no limit (RLIM_INFINITY).
const Unlimited = ^uint64(0)

// Memlock is the locked-memory limit (RLIMIT_MEMLOCK) that memory
// registration counts against, in bytes. Exempt is set when the process
// may lock memory beyond it (CAP_IPC_LOCK, which root usually has).
type Memlock struct {
	Limit  uint64
	Exempt bool
}

// Allows reports whether n more bytes may be registered when pinned bytes
// already are.
func (m Memlock) Allows(pinned, n uint64) bool {
	return m.Exempt || m.Limit == Unlimited || pinned+n <= m.Limit && pinned+n >= pinned
}

// Context is an open device.
type Context interface {
	Attr() (DeviceAttr, error)
	// Port returns the attributes of port num (1-based).
	Port(num int) (PortAttr, error)
	// GID returns entry index of port num's GID table.
	GID(port, index int) (GIDEntry, error)
	AllocPD() (PD, error)
	Close() error
}

// DeviceAttr holds the device limits the transport checks.
type DeviceAttr struct {
	Firmware  string
	Ports     int
	MaxQPWR   int // work requests per queue
	MaxSGE    int // scatter/gather entries per work request
	MaxCQE    int
	MaxMRSize uint64
}

// PortState is ibv_port_state.
type PortState uint8

// Port states, as in enum ibv_port_state.
const (
	PortNop PortState = iota
	PortDown
	PortInit
	PortArmed
	PortActive
	PortActiveDefer
)

func (s PortState) String() string {
	names := [...]string{"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"}
	if int(s) < len(names) {
		return names[s]
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// LinkLayer is the port's link layer.
type LinkLayer uint8

// Link layers, as in IBV_LINK_LAYER_*.
const (
	LinkUnspecified LinkLayer = iota
	LinkInfiniBand
	LinkEthernet
)

func (l LinkLayer) String() string {
	switch l {
	case LinkInfiniBand:
		return "InfiniBand"
	case LinkEthernet:
		return "Ethernet (RoCE)"
	}
	return "unspecified"
}

// MTU is enum ibv_mtu: 1 = 256 bytes ... 5 = 4096 bytes.
type MTU uint8

// Bytes is the MTU in bytes (0 if invalid).
func (m MTU) Bytes() int {
	if m < 1 || m > 5 {
		return 0
	}
	return 128 << m
}

// PortAttr holds what the transport needs of a port.
type PortAttr struct {
	State       PortState
	LinkLayer   LinkLayer
	ActiveMTU   MTU
	LID         uint16
	GIDTableLen int
}

// GIDType is the type of a GID table entry.
type GIDType uint8

// GID types. GIDUnknown: the library cannot tell (no ibv_query_gid_ex).
const (
	GIDIB GIDType = iota
	GIDRoCEv1
	GIDRoCEv2
	GIDUnknown GIDType = 0xff
)

func (t GIDType) String() string {
	switch t {
	case GIDIB:
		return "IB"
	case GIDRoCEv1:
		return "RoCE v1"
	case GIDRoCEv2:
		return "RoCE v2"
	}
	return "unknown"
}

// GIDEntry is one entry of a port's GID table.
type GIDEntry struct {
	Index int
	GID   [16]byte
	Type  GIDType
}

// Access is a set of IBV_ACCESS_* flags.
type Access uint32

// Access flags, as in enum ibv_access_flags.
const (
	AccessLocalWrite  Access = 1
	AccessRemoteWrite Access = 2
	AccessRemoteRead  Access = 4
)

// PD is a protection domain: registrations, completion queues and queue
// pairs belong to it. Close fails while any of them is alive.
type PD interface {
	// RegMR registers mem, which must lie outside the Go heap (mmap) and
	// stay mapped until the MR is closed.
	RegMR(mem []byte, access Access) (MR, error)
	// CreateCQ creates a completion queue of depth entries with its own
	// completion channel.
	CreateCQ(depth int) (CQ, error)
	// CreateQP creates a Reliable Connected queue pair whose send and
	// receive completions both go to cq.
	CreateQP(cq CQ, caps QPCaps) (QP, error)
	Close() error
}

// MR is a memory registration.
type MR interface {
	LKey() uint32
	RKey() uint32
	Close() error
}

// CQ is a completion queue with a completion channel.
type CQ interface {
	// Poll moves up to len(wc) completions into wc and returns how many.
	Poll(wc []WC) (int, error)
	// Arm requests an event for the next completion (ibv_req_notify_cq);
	// completions already queued raise none, so poll once more after
	// arming.
	Arm() error
	// Wait blocks until an armed event arrives (nil) or Wake is called
	// (ErrWoken).
	Wait() error
	// Wake makes a Wait in progress, or the next one, return ErrWoken.
	Wake()
	Close() error
}

// ErrWoken is returned by CQ.Wait after Wake.
var ErrWoken = errors.New("verbs: woken")

// QPCaps sizes a queue pair.
type QPCaps struct {
	MaxSendWR, MaxRecvWR   int
	MaxSendSGE, MaxRecvSGE int
}

// QP is a Reliable Connected queue pair. Its state moves RESET → INIT
// (Init) → RTR (ReadyToReceive) → RTS (ReadyToSend), and to ERR on a
// fatal error or Fail, which flushes every outstanding work request with
// StatusFlush.
type QP interface {
	Num() uint32
	Init(port int) error
	ReadyToReceive(a RTR) error
	ReadyToSend(a RTS) error
	Fail() error
	PostSend(wr *SendWR) error
	PostRecv(wr *RecvWR) error
	Close() error
}

// RTR is what a queue pair needs to receive from its peer.
type RTR struct {
	Port        int
	MTU         MTU
	DestQPN     uint32
	PSN         uint32 // the peer's first packet sequence number
	LID         uint16
	Global      bool // route by GID (always on RoCE)
	GID         [16]byte
	SGIDIndex   int
	HopLimit    uint8
	MinRNRTimer uint8
}

// RTS is what a queue pair needs to send.
type RTS struct {
	PSN        uint32 // our first packet sequence number
	Timeout    uint8  // 4.096 µs · 2^Timeout per try
	RetryCount uint8
	RNRRetry   uint8 // 7: retry for ever
}

// Opcode is a send work request's operation.
type Opcode uint8

// Send opcodes.
const (
	OpSend Opcode = iota
	OpSendImm
	OpWrite
	OpWriteImm
)

// MaxSGE is the most scatter/gather entries a SendWR carries.
const MaxSGE = 3

// SGE is one scatter/gather entry: Len bytes at Addr, registered under LKey.
type SGE struct {
	Addr uint64
	Len  uint32
	LKey uint32
}

// SendWR is a send work request.
type SendWR struct {
	ID         uint64
	Op         Opcode
	SGE        [MaxSGE]SGE
	NumSGE     int
	Imm        uint32 // OpSendImm, OpWriteImm
	RemoteAddr uint64 // OpWrite, OpWriteImm
	RKey       uint32
	Signaled   bool
}

// RecvWR is a receive work request with one buffer.
type RecvWR struct {
	ID  uint64
	SGE SGE
}

// WCOp says what a completion completes.
type WCOp uint8

// Completion kinds.
const (
	WCSend    WCOp = iota // a SEND
	WCWrite               // an RDMA WRITE (with or without immediate)
	WCRecv                // a receive consumed by a SEND
	WCRecvImm             // a receive consumed by an RDMA WRITE WITH IMMEDIATE
)

// Status is enum ibv_wc_status.
type Status uint32

// Completion statuses, numbered as in enum ibv_wc_status.
const (
	StatusSuccess        Status = 0
	StatusLocLenErr      Status = 1
	StatusLocProtErr     Status = 4
	StatusFlush          Status = 5
	StatusRemInvReqErr   Status = 9
	StatusRemAccessErr   Status = 10
	StatusRetryExcErr    Status = 12
	StatusRNRRetryExcErr Status = 13
	StatusGeneralErr     Status = 21
)

var statusNames = map[Status]string{
	StatusSuccess: "success", StatusLocLenErr: "local length error", StatusLocProtErr: "local protection error",
	StatusFlush: "work request flushed", StatusRemInvReqErr: "remote invalid request error",
	StatusRemAccessErr: "remote access error", StatusRetryExcErr: "transport retry counter exceeded",
	StatusRNRRetryExcErr: "RNR retry counter exceeded", StatusGeneralErr: "general error",
}

func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return "status " + strconv.Itoa(int(s))
}

// WC is a work completion.
type WC struct {
	ID        uint64
	Status    Status
	Op        WCOp
	Len       uint32 // bytes received (receives)
	Imm       uint32 // WCRecvImm, or a WCRecv of OpSendImm
	HasImm    bool
	QPN       uint32
	VendorErr uint32
}

// Err returns nil for a successful completion, else an error naming the
// status.
func (wc *WC) Err() error {
	if wc.Status == StatusSuccess {
		return nil
	}
	return &CompletionError{Status: wc.Status, VendorErr: wc.VendorErr, QPN: wc.QPN}
}

// CompletionError is a work completion with an error status.
type CompletionError struct {
	Status    Status
	VendorErr uint32
	QPN       uint32
}

func (e *CompletionError) Error() string {
	return fmt.Sprintf("completion error on QP %#x: %s (status %d, vendor error %#x)", e.QPN, e.Status, uint32(e.Status), e.VendorErr)
}
