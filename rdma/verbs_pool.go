package rdma

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/softsync/softsync/rdma/internal/verbs"
)

// regPool hands out registered memory for one verbs session: blocks
// carved from a few large regions, so that nothing is registered per
// message. Each region is mapped outside the Go heap (anonymous mmap) and
// registered once (local and remote write access). Blocks up to a quarter
// of the region size come from buddy allocation in power-of-two sizes
// from minBlock up, aligned to their size; a larger block gets a dedicated
// region of its size rounded up to a MiB, kept after it is freed for the
// next block of about that size (at most maxSpare such regions, oldest
// released first). A region is released (deregistered, unmapped) when the
// pool closes, when a second buddy region falls entirely free, or to make
// room under the locked-memory limit.
//
// Before each registration the region's size is compared with the
// locked-memory limit (RLIMIT_MEMLOCK) minus what the process has
// registered; beyond it the allocation fails with ErrMemlock and the fix,
// rather than with the kernel's "Cannot allocate memory".
//
// Every block handed out holds a reference on the session (see
// session.unref), so the device stays open while messages point into its
// memory. The pool is safe for concurrent use.
type regPool struct {
	s          *session
	prov       verbs.Provider
	pd         verbs.PD
	regionSize int

	mu      sync.Mutex
	regions []*region // buddy regions
	spare   []*region // free dedicated regions, oldest first
	blocks  int       // handed out
}

const (
	minBlockShift = 12 // 4 KiB
	minBlock      = 1 << minBlockShift
	maxOrders     = 31 - minBlockShift // regions up to 1 GiB
	maxSpare      = 8
	dedicatedUnit = 1 << 20
)

// region is one registered mapping.
type region struct {
	mem       []byte
	mr        verbs.MR
	lkey      uint32
	rkey      uint32
	base      uint64 // address of mem[0]
	dedicated bool
	pool      *regPool

	// Buddy state (not dedicated), in units of minBlock: head[o] is the
	// first free block of order o (size minBlock<<o) or -1, next and prev
	// link the free blocks of an order, ord[i] is the order of the free
	// block starting at unit i or -1.
	top  int
	head [maxOrders]int32
	next []int32
	prev []int32
	ord  []int8
}

// block is a piece of a region.
type block struct {
	r    *region
	off  int
	size int
}

func (b block) valid() bool   { return b.r != nil }
func (b block) bytes() []byte { return b.r.mem[b.off : b.off+b.size : b.off+b.size] }
func (b block) addr() uint64  { return b.r.base + uint64(b.off) }
func (b block) sge(off, n int) verbs.SGE {
	return verbs.SGE{Addr: b.addr() + uint64(off), Len: uint32(n), LKey: b.r.lkey}
}

// contains reports whether p[:n] lies inside b.
func (b block) contains(p unsafe.Pointer, n int) bool {
	a := uint64(uintptr(p))
	return b.valid() && a >= b.addr() && a-b.addr()+uint64(n) <= uint64(b.size)
}

func newRegPool(s *session, prov verbs.Provider, pd verbs.PD, regionSize int) *regPool {
	return &regPool{s: s, prov: prov, pd: pd, regionSize: regionSize}
}

// order returns the buddy order that holds size bytes.
func order(size int) int {
	units := (size + minBlock - 1) >> minBlockShift
	if units <= 1 {
		return 0
	}
	return bits.Len(uint(units - 1))
}

// classSize is the size of the block alloc hands out for size bytes: what
// a receiver advertises for a frame of that size, so that frames of
// nearly the same size share buffers.
func (p *regPool) classSize(size int) int {
	if p.dedicated(size) {
		return (size + dedicatedUnit - 1) / dedicatedUnit * dedicatedUnit
	}
	return minBlock << order(size)
}

// alloc returns a block of at least size bytes (classSize(size) exactly).
// The caller must hold a reference on the session; the block takes one of
// its own.
func (p *regPool) alloc(size int) (block, error) {
	if size <= 0 {
		size = 1
	}
	p.mu.Lock()
	b, err := p.allocLocked(size)
	if err == nil {
		p.blocks++
		p.s.refs.Add(1)
	}
	p.mu.Unlock()
	return b, err
}

// dedicated reports whether a block of size bytes gets a region of its
// own: beyond a quarter of a region, rounding up to a power of two would
// waste too much (a 16 MiB gradient plus its frame header would take 32).
func (p *regPool) dedicated(size int) bool { return size > p.regionSize/4 }

func (p *regPool) allocLocked(size int) (block, error) {
	if p.dedicated(size) {
		need := p.classSize(size)
		for i, r := range p.spare {
			if len(r.mem) >= need && len(r.mem) <= need+need/4 {
				p.spare = append(p.spare[:i], p.spare[i+1:]...)
				return block{r: r, size: len(r.mem)}, nil
			}
		}
		r, err := p.newRegion(need, true)
		if err != nil {
			return block{}, err
		}
		return block{r: r, size: need}, nil
	}
	o := order(size)
	for {
		for _, r := range p.regions {
			if b, ok := r.take(o); ok {
				return b, nil
			}
		}
		r, err := p.newRegion(p.regionSize, false)
		if err != nil {
			return block{}, err
		}
		p.regions = append(p.regions, r)
	}
}

// free returns b to the pool and drops its session reference.
func (p *regPool) free(b block) {
	p.mu.Lock()
	p.blocks--
	if b.r.dedicated {
		p.spare = append(p.spare, b.r)
		if len(p.spare) > maxSpare {
			p.release(p.spare[0])
			p.spare = append(p.spare[:0], p.spare[1:]...)
		}
	} else {
		b.r.put(b.off>>minBlockShift, order(b.size))
		if b.r.idle() {
			p.trimIdle(b.r)
		}
	}
	p.mu.Unlock()
	p.s.unref()
}

// trimIdle releases r, which just fell idle, if another region is idle too.
func (p *regPool) trimIdle(r *region) {
	for _, o := range p.regions {
		if o != r && o.idle() {
			p.dropRegion(r)
			return
		}
	}
}

func (p *regPool) dropRegion(r *region) {
	for i, o := range p.regions {
		if o == r {
			p.regions = append(p.regions[:i], p.regions[i+1:]...)
			break
		}
	}
	p.release(r)
}

// newRegion maps and registers a region of size bytes, first checking the
// locked-memory limit (and releasing idle memory to stay under it).
func (p *regPool) newRegion(size int, dedicated bool) (*region, error) {
	lim := p.prov.Memlock()
	if !lim.Allows(p.prov.Pinned(), uint64(size)) {
		p.releaseIdle()
		if pinned := p.prov.Pinned(); !lim.Allows(pinned, uint64(size)) {
			return nil, memlockError(lim, pinned, uint64(size))
		}
	}
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, fmt.Errorf("%w: mapping %s for RDMA buffers: %w", ErrVerbs, fmtBytes(uint64(size)), err)
	}
	mr, err := p.pd.RegMR(mem, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		syscall.Munmap(mem)
		err = fmt.Errorf("%w: registering %s of RDMA buffers: %w", ErrVerbs, fmtBytes(uint64(size)), err)
		if errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.EPERM) {
			err = fmt.Errorf("%w (%s)", err, memlockAdvice(lim))
		}
		return nil, err
	}
	r := &region{mem: mem, mr: mr, lkey: mr.LKey(), rkey: mr.RKey(), base: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(mem)))), dedicated: dedicated, pool: p}
	spans.add(r, uint64(size))
	if !dedicated {
		r.initBuddy()
	}
	return r, nil
}

// releaseIdle releases spare dedicated regions and idle buddy regions.
func (p *regPool) releaseIdle() {
	for _, r := range p.spare {
		p.release(r)
	}
	p.spare = p.spare[:0]
	for i := 0; i < len(p.regions); {
		if r := p.regions[i]; r.idle() {
			p.dropRegion(r)
			continue
		}
		i++
	}
}

func (p *regPool) release(r *region) {
	r.mr.Close()
	spans.remove(r.base)
	syscall.Munmap(r.mem)
	r.mem = nil
}

// spans lists the address ranges of every region mapped in the process,
// so that Release can tell registered memory from the Go heap: a payload
// slice moved from a registered Msg to another one must not join the
// process-wide pool, whose messages outlive the region.
var spans spanSet

type span struct {
	lo, hi uint64
	r      *region
}

type spanSet struct {
	mu   sync.Mutex
	list atomic.Pointer[[]span] // copied on write
}

func (s *spanSet) add(r *region, n uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var l []span
	if p := s.list.Load(); p != nil {
		l = append(l, *p...)
	}
	l = append(l, span{r.base, r.base + n, r})
	s.list.Store(&l)
}

func (s *spanSet) remove(lo uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var l []span
	for _, sp := range *s.list.Load() {
		if sp.lo != lo {
			l = append(l, sp)
		}
	}
	s.list.Store(&l)
}

// contains reports whether p lies in a mapped region.
func (s *spanSet) contains(p unsafe.Pointer) bool { return s.region(p, 1) != nil }

// region returns the mapped region that holds p[:n], or nil.
func (s *spanSet) region(p unsafe.Pointer, n int) *region {
	l := s.list.Load()
	if l == nil {
		return nil
	}
	a := uint64(uintptr(p))
	for _, sp := range *l {
		if a >= sp.lo && a < sp.hi {
			if a+uint64(n) <= sp.hi {
				return sp.r
			}
			return nil
		}
	}
	return nil
}

// close releases every region; the session calls it once no block is
// out (every block holds a session reference).
func (p *regPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.regions {
		p.release(r)
	}
	for _, r := range p.spare {
		p.release(r)
	}
	p.regions, p.spare = nil, nil
}

// vshells recycles the Msg structs of registered messages.
var vshells sync.Pool

// newMsg returns a message whose payload of n elements lies in a block of
// the pool.
func (p *regPool) newMsg(n int) (*Msg, error) {
	b, err := p.alloc(4 * n)
	if err != nil {
		return nil, err
	}
	return p.msgIn(b, 0, n), nil
}

// msgIn returns a message whose payload of n elements starts off bytes
// into b, which it takes over.
func (p *regPool) msgIn(b block, off, n int) *Msg {
	m, _ := vshells.Get().(*Msg)
	if m == nil {
		m = &Msg{}
	}
	bs := b.bytes()[off:]
	m.Payload = unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(bs))), len(bs)/4)[:n]
	m.pool, m.blk, m.released = p, b, false
	return m
}

func (p *regPool) releaseMsg(m *Msg) {
	b := m.blk
	data, wire := m.Data[:0], m.wire[:0]
	*m = Msg{Data: data, wire: wire, released: true}
	vshells.Put(m)
	p.free(b)
}

// payloadBlock returns the block holding m's payload if it is registered
// memory of this pool.
// lentBlock returns, for a message whose payload is lent (Msg.Borrow)
// from memory of one of this pool's regions (a payload of its NewMsg that
// the lender keeps, such as a learner's gradient), that region as a block
// and the payload's offset in it, so that it can be written from in place.
func (p *regPool) lentBlock(m *Msg) (block, int, bool) {
	if !m.borrowed || len(m.Payload) == 0 {
		return block{}, 0, false
	}
	ptr := unsafe.Pointer(unsafe.SliceData(m.Payload))
	r := spans.region(ptr, 4*len(m.Payload))
	if r == nil || r.pool != p {
		return block{}, 0, false
	}
	return block{r: r, size: len(r.mem)}, int(uint64(uintptr(ptr)) - r.base), true
}

func (p *regPool) payloadBlock(m *Msg) (block, bool) {
	if m.pool != p || m.borrowed || len(m.Payload) == 0 {
		return block{}, false
	}
	return m.blk, m.blk.contains(unsafe.Pointer(unsafe.SliceData(m.Payload)), 4*len(m.Payload))
}

func (r *region) initBuddy() {
	units := len(r.mem) >> minBlockShift
	r.top = bits.Len(uint(units)) - 1
	r.next, r.prev, r.ord = make([]int32, units), make([]int32, units), make([]int8, units)
	for i := range r.ord {
		r.ord[i] = -1
	}
	for o := range r.head {
		r.head[o] = -1
	}
	r.push(0, r.top)
}

func (r *region) idle() bool { return !r.dedicated && r.ord[0] == int8(r.top) }

func (r *region) push(i, o int) {
	r.ord[i] = int8(o)
	h := r.head[o]
	r.next[i], r.prev[i] = h, -1
	if h >= 0 {
		r.prev[h] = int32(i)
	}
	r.head[o] = int32(i)
}

func (r *region) unlink(i int) {
	o := r.ord[i]
	n, p := r.next[i], r.prev[i]
	if p >= 0 {
		r.next[p] = n
	} else {
		r.head[o] = n
	}
	if n >= 0 {
		r.prev[n] = p
	}
	r.ord[i] = -1
}

// take returns a free block of order o, splitting a larger one if needed.
func (r *region) take(o int) (block, bool) {
	k := o
	for k <= r.top && r.head[k] < 0 {
		k++
	}
	if k > r.top {
		return block{}, false
	}
	i := int(r.head[k])
	r.unlink(i)
	for k > o { // keep the upper halves
		k--
		r.push(i+1<<k, k)
	}
	return block{r: r, off: i << minBlockShift, size: minBlock << o}, true
}

// put frees the block of order o at unit i, merging it with its free
// buddies.
func (r *region) put(i, o int) {
	for o < r.top {
		b := i ^ 1<<o
		if r.ord[b] != int8(o) {
			break
		}
		r.unlink(b)
		i = min(i, b)
		o++
	}
	r.push(i, o)
}

// memlockError explains that registering size more bytes would exceed lim.
func memlockError(lim verbs.Memlock, pinned, size uint64) error {
	return fmt.Errorf("%w: registering %s of RDMA buffers (%s already registered) would exceed this process's locked-memory limit RLIMIT_MEMLOCK of %s: %s",
		ErrMemlock, fmtBytes(size), fmtBytes(pinned), fmtBytes(lim.Limit), memlockAdvice(lim))
}

// memlockAdvice says how to raise the locked-memory limit.
func memlockAdvice(lim verbs.Memlock) string {
	s := "raise it with `ulimit -l unlimited` in the shell or batch script that starts softsync (mpirun's ranks inherit that shell's limit), " +
		"a memlock line in /etc/security/limits.conf (`* - memlock unlimited`) for logins, " +
		"or under Slurm PropagateResourceLimits=ALL (or MEMLOCK) in slurm.conf with LimitMEMLOCK=infinity for slurmd; " +
		"or choose --transport tcp"
	if lim.Limit != verbs.Unlimited {
		s = fmt.Sprintf("ulimit -l is %d; %s", lim.Limit/1024, s)
	}
	return s
}

// fmtBytes writes n in binary units ("8 MiB").
func fmtBytes(n uint64) string {
	if n == verbs.Unlimited {
		return "unlimited"
	}
	units := []string{"bytes", "KiB", "MiB", "GiB", "TiB"}
	u := 0
	for n >= 1024 && n%1024 == 0 && u < len(units)-1 {
		n /= 1024
		u++
	}
	return fmt.Sprintf("%d %s", n, units[u])
}
