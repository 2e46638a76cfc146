package rdma

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/softsync/softsync/rdma/internal/verbs"
)

// testPool returns a pool on a fresh emulated device, with a session
// reference held by the test.
func testPool(t *testing.T, cfg verbs.EmuConfig, regionSize int) (*regPool, *verbs.Emu) {
	t.Helper()
	emu := verbs.NewEmu(cfg)
	ctx, err := emu.Open("emu0")
	if err != nil {
		t.Fatal(err)
	}
	pd, _ := ctx.AllocPD()
	s := &session{}
	s.refs.Store(1)
	p := newRegPool(s, emu, pd, regionSize)
	t.Cleanup(p.close)
	return p, emu
}

// TestPoolBuddy allocates and frees blocks of seeded random sizes: blocks
// are of their class size, aligned to it, never overlap, and once all are
// freed the pool is back to one idle region.
func TestPoolBuddy(t *testing.T) {
	const region = 1 << 20
	p, emu := testPool(t, verbs.EmuConfig{}, region)
	rng := rand.New(rand.NewPCG(1, 2))
	type live struct {
		b    block
		size int
	}
	var out []live
	for round := range 2000 {
		if len(out) > 0 && (rng.IntN(2) == 0 || len(out) > 60) {
			i := rng.IntN(len(out))
			p.free(out[i].b)
			out = slices.Delete(out, i, i+1)
			continue
		}
		size := 1 + rng.IntN(region/4)
		if rng.IntN(8) == 0 {
			size = 1 + rng.IntN(4*minBlock)
		}
		b, err := p.alloc(size)
		if err != nil {
			t.Fatal(err)
		}
		if b.size != p.classSize(size) || b.size < size || b.off%b.size != 0 {
			t.Fatalf("round %d: %d bytes gave a block of %d at offset %d", round, size, b.size, b.off)
		}
		for _, o := range out {
			if o.b.r == b.r && o.b.off < b.off+b.size && b.off < o.b.off+o.b.size {
				t.Fatalf("round %d: block [%d, %d) overlaps [%d, %d)", round, b.off, b.off+b.size, o.b.off, o.b.off+o.b.size)
			}
		}
		out = append(out, live{b, size})
	}
	for _, o := range out {
		p.free(o.b)
	}
	if p.blocks != 0 || len(p.regions) != 1 || !p.regions[0].idle() {
		t.Fatalf("%d blocks out, %d regions after freeing everything", p.blocks, len(p.regions))
	}
	if mrs, _ := emu.Live(); mrs != 1 {
		t.Fatalf("%d registrations for one idle region", mrs)
	}
}

// TestPoolDedicated: blocks larger than a region get their own, which is
// kept for the next block of about that size.
func TestPoolDedicated(t *testing.T) {
	p, emu := testPool(t, verbs.EmuConfig{}, 1<<20)
	if b, _ := p.alloc(256 << 10); b.r.dedicated {
		t.Fatal("a quarter of a region is not carved from one")
	} else {
		p.free(b)
	}
	b, err := p.alloc(3<<20 + 5)
	if err != nil {
		t.Fatal(err)
	}
	if !b.r.dedicated || b.size != 4<<20 {
		t.Fatalf("dedicated %v, %d bytes", b.r.dedicated, b.size)
	}
	r := b.r
	p.free(b)
	if b, _ = p.alloc(3<<20 + 100); b.r != r {
		t.Fatal("a freed dedicated region was not reused for the same size")
	}
	p.free(b)
	// Beyond maxSpare, the oldest spare regions are released.
	var bs []block
	for i := range maxSpare + 3 {
		b, _ := p.alloc((2 + i) << 20)
		bs = append(bs, b)
	}
	for _, b := range bs {
		p.free(b)
	}
	if len(p.spare) != maxSpare {
		t.Fatalf("%d spare regions kept", len(p.spare))
	}
	if mrs, _ := emu.Live(); mrs != maxSpare+len(p.regions) {
		t.Fatalf("%d registrations for %d spare regions", mrs, maxSpare)
	}
}

// TestPoolMemlock: a region that would exceed the locked-memory limit is
// refused before registering, with the limit and the fix; idle memory is
// released first to make room.
func TestPoolMemlock(t *testing.T) {
	p, emu := testPool(t, verbs.EmuConfig{Memlock: verbs.Memlock{Limit: 3 << 20}}, 1<<20)
	a, err := p.alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.alloc(2 << 20)
	if !errors.Is(err, ErrMemlock) {
		t.Fatalf("allocation over the limit: %v", err)
	}
	for _, want := range []string{"RLIMIT_MEMLOCK of 3 MiB", "registering 2 MiB", "2 MiB already registered", "ulimit -l unlimited", "ulimit -l is 3072"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	// Freeing makes the regions idle; the next large allocation releases
	// one to fit.
	p.free(a)
	p.free(b)
	c, err := p.alloc(2 << 20)
	if err != nil {
		t.Fatalf("after freeing: %v", err)
	}
	p.free(c)
	if emu.Pinned() > 3<<20 {
		t.Fatalf("%d bytes pinned over a limit of 3 MiB", emu.Pinned())
	}
	// A registration the kernel refuses says the same.
	q, _ := testPool(t, verbs.EmuConfig{}, 1<<20)
	q.prov.(*verbs.Emu).SetHooks(verbs.Hooks{RegMR: func(int) error { return errors.New("ibv_reg_mr: cannot allocate memory (ENOMEM)") }})
	if _, err := q.alloc(10); !errors.Is(err, ErrVerbs) || !strings.Contains(err.Error(), "ENOMEM") {
		t.Fatalf("failed registration: %v", err)
	}
}

func TestFmtBytes(t *testing.T) {
	for n, want := range map[uint64]string{8 << 20: "8 MiB", 1536 << 10: "1536 KiB", 100: "100 bytes", verbs.Unlimited: "unlimited", 0: "0 bytes"} {
		if got := fmtBytes(n); got != want {
			t.Errorf("fmtBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestReleaseMovedPayload: a registered payload moved into another Msg
// does not join the process-wide pool.
func TestReleaseMovedPayload(t *testing.T) {
	p, _ := testPool(t, verbs.EmuConfig{}, 1<<20)
	reg, err := p.newMsg(5000)
	if err != nil {
		t.Fatal(err)
	}
	heap := &Msg{Payload: make([]float32, 8192)}
	reg.Payload, heap.Payload = heap.Payload, reg.Payload
	reg.Release()
	heap.Release()
	if heap.Payload != nil {
		t.Fatal("registered payload kept by a released Msg of the process-wide pool")
	}
}
