package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/internal/synth"
)

// Factory returns a fresh Network built with opts and an address to
// listen on ("127.0.0.1:0" for TCP, "" for in-memory).
type Factory func(t *testing.T, opts rdma.Options) (n rdma.Network, listenAddr string)

// Run runs the suite as subtests of t. Subtests run one after another; the
// last checks that no goroutine started by the suite is left.
func Run(t *testing.T, f Factory) {
	before := runtime.NumGoroutine()
	tests := []struct {
		name string
		fn   func(*testing.T, Factory)
	}{
		{"OrderAndFields", testOrderAndFields},
		{"ConcurrentConns", testConcurrentConns},
		{"ConcurrentSenders", testConcurrentSenders},
		{"FullDuplex", testFullDuplex},
		{"Large", testLarge},
		{"Codecs", testCodecs},
		{"TopKErrorFeedback", testTopKErrorFeedback},
		{"TopKFailedSend", testTopKFailedSend},
		{"ErrorMsg", testErrorMsg},
		{"Limits", testLimits},
		{"PeerClose", testPeerClose},
		{"LocalClose", testLocalClose},
		{"ListenerClose", testListenerClose},
		{"Cancel", testCancel},
		{"SteadyStateAllocs", testAllocs},
		{"BorrowAndPlace", testBorrowAndPlace},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, f) })
	}
	t.Run("NoGoroutineLeak", func(t *testing.T) {
		WaitGoroutines(t, before+1, 30*time.Second) // +1: this subtest's own goroutine
	})
}

// WaitGoroutines waits, polling for up to within, until at most limit
// goroutines run, and otherwise fails t with the stacks of all of them:
// the goroutine-leak check of this suite and of the tests of the
// transports' users.
func WaitGoroutines(t testing.TB, limit int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for runtime.NumGoroutine() > limit && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > limit {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines left running, at most %d expected:\n%s", n, limit, buf[:runtime.Stack(buf, true)])
	}
}

// pair returns two connected ends of a fresh network, closed at cleanup.
func pair(t *testing.T, f Factory, opts rdma.Options) (client, server rdma.Conn) {
	t.Helper()
	n, addr := f(t, opts)
	ln, err := n.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type res struct {
		c   rdma.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept(ctx)
		ch <- res{c, err}
	}()
	client, err = n.Dial(ctx, ln.Addr())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		client.Close()
		t.Fatal(r.err)
	}
	t.Cleanup(func() { client.Close(); r.c.Close() })
	return client, r.c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// msg builds a message with every header field derived from i and a
// payload of n seeded values.
func msg(i, n int, codec rdma.Codec) *rdma.Msg {
	m := rdma.NewMsg(n)
	synth.Gradient(m.Payload, 1e-3, uint64(i))
	m.Type, m.Codec = rdma.Type(i%200), codec
	m.Learner, m.Shard = uint32(i*7+1), uint32(i%5)
	m.Timestamp, m.Seq = uint64(i)*1e9+3, uint64(i)
	if i%3 == 0 {
		m.Data = append(m.Data, fmt.Sprintf("control %d", i)...)
	}
	return m
}

// check compares a received message with msg(i, n, codec) sent with a
// lossless codec.
func check(t *testing.T, got *rdma.Msg, i, n int, codec rdma.Codec) {
	t.Helper()
	want := msg(i, n, codec)
	defer want.Release()
	checkAgainst(t, got, want, i)
}

// checkAgainst compares every header field, Data and the payload bits.
func checkAgainst(t *testing.T, got, want *rdma.Msg, i int) {
	t.Helper()
	n := len(want.Payload)
	if got.Type != want.Type || got.Codec.ID != want.Codec.ID || got.Learner != want.Learner ||
		got.Shard != want.Shard || got.Timestamp != want.Timestamp || got.Seq != want.Seq ||
		string(got.Data) != string(want.Data) {
		t.Fatalf("message %d: header %+v, want %+v", i, hdr(got), hdr(want))
	}
	if len(got.Payload) != n {
		t.Fatalf("message %d: %d elements, want %d", i, len(got.Payload), n)
	}
	if j := firstDiff(got.Payload, want.Payload); j >= 0 {
		t.Fatalf("message %d: element %d = %v, want %v", i, j, got.Payload[j], want.Payload[j])
	}
}

// firstDiff returns the first index where a and b (same length) differ
// bit for bit, or -1; it compares memory in bulk first.
func firstDiff(a, b []float32) int {
	if len(a) == 0 || bytes.Equal(f32bytes(a), f32bytes(b)) {
		return -1
	}
	for j := range a {
		if math.Float32bits(a[j]) != math.Float32bits(b[j]) {
			return j
		}
	}
	return -1
}

func f32bytes(f []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), 4*len(f))
}

func hdr(m *rdma.Msg) string {
	return fmt.Sprintf("type %d codec %s job %d learner %d shard %d ts %d seq %d data %q",
		m.Type, m.Codec, m.Job, m.Learner, m.Shard, m.Timestamp, m.Seq, m.Data)
}

func send(t *testing.T, c rdma.Conn, m *rdma.Msg) {
	t.Helper()
	if err := c.Send(ctx(t), m); err != nil {
		t.Fatal(err)
	}
}

func recv(t *testing.T, c rdma.Conn) *rdma.Msg {
	t.Helper()
	m, err := c.Recv(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// sizes cycles through empty, tiny, odd and chunk-crossing payloads.
var sizes = []int{0, 1, 3, 1000, 65536/4 + 1, 300_000}

func testOrderAndFields(t *testing.T, f Factory) {
	c, s := pair(t, f, rdma.Options{Job: 7})
	const count = 60
	errc := make(chan error, 1)
	go func() {
		for i := range count {
			if err := c.Send(context.Background(), msg(i, sizes[i%len(sizes)], rdma.Codec{})); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for i := range count {
		m := recv(t, s)
		check(t, m, i, sizes[i%len(sizes)], rdma.Codec{})
		if m.Job != 7 {
			t.Fatalf("job %d, want 7", m.Job)
		}
		m.Release()
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	st := s.Stats().Recv[rdma.CodecNone]
	if st.Msgs != count || st.RawBytes != st.WireBytes {
		t.Fatalf("receiver stats %+v", st)
	}
}

// echo serves a connection by sending every message back until it fails.
func echo(c rdma.Conn) {
	for {
		m, err := c.Recv(context.Background())
		if err != nil {
			if rdma.Recoverable(err) {
				continue
			}
			return
		}
		if m.Codec.ID == rdma.CodecTopK { // a reply needs its own fraction
			m.Codec = rdma.Codec{}
		}
		if c.Send(context.Background(), m) != nil {
			return
		}
	}
}

func testConcurrentConns(t *testing.T, f Factory) {
	n, addr := f(t, rdma.Options{})
	ln, err := n.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			wg.Go(func() { echo(c); c.Close() })
		}
	})
	const conns, count = 6, 20
	errs := make(chan error, conns)
	var clients sync.WaitGroup
	for k := range conns {
		clients.Go(func() {
			c, err := n.Dial(ctx(t), ln.Addr())
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			for i := k * 1000; i < k*1000+count; i++ {
				size := sizes[i%len(sizes)]
				if err := c.Send(context.Background(), msg(i, size, rdma.Codec{})); err != nil {
					errs <- err
					return
				}
				m, err := c.Recv(context.Background())
				if err != nil {
					errs <- err
					return
				}
				if m.Seq != uint64(i) || len(m.Payload) != size {
					errs <- fmt.Errorf("conn %d: got seq %d with %d elements, want %d with %d", k, m.Seq, len(m.Payload), i, size)
					return
				}
				m.Release()
			}
		})
	}
	clients.Wait()
	ln.Close()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func testConcurrentSenders(t *testing.T, f Factory) {
	c, s := pair(t, f, rdma.Options{})
	const senders, count = 4, 50
	for k := range senders {
		go func() {
			for i := range count {
				m := rdma.NewMsg(k * 100)
				m.Learner, m.Seq = uint32(k), uint64(i)
				for j := range m.Payload {
					m.Payload[j] = float32(k)
				}
				if c.Send(context.Background(), m) != nil {
					return
				}
			}
		}()
	}
	next := make([]uint64, senders)
	for range senders * count {
		m := recv(t, s)
		k := m.Learner
		if m.Seq != next[k] || len(m.Payload) != int(k)*100 || slices.ContainsFunc(m.Payload, func(v float32) bool { return v != float32(k) }) {
			t.Fatalf("sender %d: got seq %d (%d elements), want seq %d", k, m.Seq, len(m.Payload), next[k])
		}
		next[k]++
		m.Release()
	}
}

// testFullDuplex streams in both directions at once: a few large
// messages, then many small ones (more than any transport buffers, so
// that flow control has to return what the receivers consume).
func testFullDuplex(t *testing.T, f Factory) {
	c, s := pair(t, f, rdma.Options{})
	for _, phase := range []struct{ count, size int }{{6, 1 << 18}, {600, 0}} {
		size := func(i int) int {
			if phase.size > 0 {
				return phase.size
			}
			return i % 50
		}
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for _, end := range []rdma.Conn{c, s} {
			wg.Go(func() {
				for i := range phase.count {
					if err := end.Send(context.Background(), msg(i, size(i), rdma.Codec{})); err != nil {
						errs <- err
						return
					}
				}
			})
			wg.Go(func() {
				for i := range phase.count {
					m, err := end.Recv(context.Background())
					if err != nil {
						errs <- err
						return
					}
					if m.Seq != uint64(i) || len(m.Payload) != size(i) {
						errs <- fmt.Errorf("got seq %d (%d elements), want %d (%d)", m.Seq, len(m.Payload), i, size(i))
					}
					m.Release()
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
}

func testLarge(t *testing.T, f Factory) {
	c, s := pair(t, f, rdma.Options{})
	const n = 4<<20 + 3 // 16 MiB + 12 bytes
	go echo(s)
	want := msg(1, n, rdma.Codec{})
	defer want.Release()
	for range 2 {
		m := rdma.NewMsg(n)
		m.Type, m.Learner, m.Shard, m.Timestamp, m.Seq = want.Type, want.Learner, want.Shard, want.Timestamp, want.Seq
		m.Data = append(m.Data, want.Data...)
		copy(m.Payload, want.Payload)
		send(t, c, m)
		got := recv(t, c)
		checkAgainst(t, got, want, 1)
		got.Release()
	}
}

// codecs covers every codec id.
var codecs = []string{"none", "s2", "zstd", "shuffle+s2", "shuffle+zstd", "fp16", "bf16", "topk:0.1"}

func testCodecs(t *testing.T, f Factory) {
	for _, name := range codecs {
		t.Run(name, func(t *testing.T) {
			codec, err := rdma.ParseCodec(name)
			if err != nil {
				t.Fatal(err)
			}
			c, s := pair(t, f, rdma.Options{})
			for i, n := range []int{0, 1, 1000, 70_001} {
				send(t, c, msg(i, n, codec))
				m := recv(t, s)
				want := msg(i, n, codec)
				checkCodec(t, codec, m.Payload, want.Payload)
				m.Payload, want.Payload = want.Payload, m.Payload // header check only
				check(t, m, i, n, codec)
				m.Release()
				want.Release()
			}
			sent, got := c.Stats().Sent[codec.ID], s.Stats().Recv[codec.ID]
			if sent != (rdma.CodecStats{Msgs: sent.Msgs, RawBytes: got.RawBytes, WireBytes: got.WireBytes, Time: sent.Time}) ||
				sent.Msgs != 4 || sent.RawBytes != 4*(1+1000+70_001) {
				t.Fatalf("stats: sent %+v, received %+v", sent, got)
			}
			var wantRatio float64
			switch codec.ID {
			case rdma.CodecNone:
				wantRatio = 1
			case rdma.CodecFP16, rdma.CodecBF16:
				wantRatio = 0.5
			case rdma.CodecTopK: // ⌈0.1·n⌉ index+value pairs
				wantRatio = float64(8*(1+100+7001)) / float64(sent.RawBytes)
			default: // lossless compressors on float noise: some gain, never much
				if r := sent.Ratio(); r <= 0.5 || r >= 1.01 {
					t.Fatalf("%s ratio %v", name, r)
				}
				return
			}
			if r := sent.Ratio(); r != wantRatio {
				t.Fatalf("%s ratio %v, want %v", name, r, wantRatio)
			}
		})
	}
}

// checkCodec checks a decoded payload against the original within what
// the codec promises.
func checkCodec(t *testing.T, codec rdma.Codec, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d elements, want %d", len(got), len(want))
	}
	switch codec.ID {
	case rdma.CodecFP16, rdma.CodecBF16:
		rel, abs := math.Ldexp(1, -11), math.Ldexp(1, -25) // half an ulp; fp16 subnormal spacing 2⁻²⁴
		if codec.ID == rdma.CodecBF16 {
			rel, abs = math.Ldexp(1, -8), 0
		}
		for i := range got {
			if d := math.Abs(float64(got[i] - want[i])); d > max(rel*math.Abs(float64(want[i])), abs) {
				t.Fatalf("element %d: %v, want %v within %v relative", i, got[i], want[i], rel)
			}
		}
	case rdma.CodecTopK:
		k := int(math.Ceil(codec.Fraction * float64(len(want))))
		sent, minSent, maxHeld := 0, math.Inf(1), 0.0
		for i := range got {
			if got[i] != 0 {
				sent++
				if got[i] != want[i] {
					t.Fatalf("element %d: %v, want %v", i, got[i], want[i])
				}
				minSent = min(minSent, math.Abs(float64(got[i])))
			} else {
				maxHeld = max(maxHeld, math.Abs(float64(want[i])))
			}
		}
		if sent != k || len(got) > 0 && minSent < maxHeld {
			t.Fatalf("topk sent %d (want %d); smallest sent %v < largest held %v", sent, k, minSent, maxHeld)
		}
	default:
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("element %d: %v, want %v", i, got[i], want[i])
			}
		}
	}
}

// testTopKErrorFeedback sends the same vector twice with topk:0.5 and one
// Feedback, the second time on a new connection: the second message
// carries each unsent element with its residual added (2g) and the
// elements sent the first time once (g), so that nothing is lost when a
// sender replaces its connection. Without a Feedback, both messages are
// the top half of g alone.
func testTopKErrorFeedback(t *testing.T, f Factory) {
	codec := rdma.Codec{ID: rdma.CodecTopK, Fraction: 0.5}
	const n = 5000
	g := msg(1, n, codec)
	defer g.Release()
	for _, withFeedback := range []bool{true, false} {
		var fb *rdma.Feedback
		if withFeedback {
			fb = new(rdma.Feedback)
		}
		var first []float32
		for round := range 2 {
			c, s := pair(t, f, rdma.Options{})
			m := msg(1, n, codec)
			m.Feedback = fb
			send(t, c, m)
			m = recv(t, s)
			if m.Feedback != nil {
				t.Fatal("a received message carries a Feedback")
			}
			c.Close()
			if round == 0 {
				first = slices.Clone(m.Payload)
				m.Release()
				continue
			}
			sent := 0
			for i, v := range m.Payload {
				if v == 0 {
					continue
				}
				sent++
				want := g.Payload[i]
				if withFeedback && first[i] == 0 {
					want = 2 * g.Payload[i]
				}
				if v != want {
					t.Fatalf("feedback %v: element %d: second message %v, want %v (first message %v)", withFeedback, i, v, want, first[i])
				}
			}
			if sent != n/2 {
				t.Fatalf("feedback %v: second message sent %d elements, want %d", withFeedback, sent, n/2)
			}
			if !withFeedback && !slices.Equal(m.Payload, first) {
				t.Fatal("without feedback, the second message differs from the first")
			}
			m.Release()
		}
	}
}

// testTopKFailedSend: a TopK Send that fails (here: cancelled while
// blocked on a peer that does not read) hands what it took back to its
// Feedback, which then holds the whole payload again. TopK messages are
// sent, each with a Feedback of its own, until one blocks. The cancel can
// also land between two Sends (a Send seen parked may still complete,
// as a verbs completion arrives), whose next then takes nothing: that run
// is tried again, as often as a loaded machine may need.
func testTopKFailedSend(t *testing.T, f Factory) {
	for range 50 {
		if topKFailedSend(t, f) {
			return
		}
	}
	t.Fatal("the cancel never reached a blocked Send")
}

// topKFailedSend runs one attempt; false if the failed Send took nothing.
func topKFailedSend(t *testing.T, f Factory) bool {
	// Small queues and socket buffers, so that modest messages block.
	c, _ := pair(t, f, rdma.Options{QueueLen: 1, SocketBuffer: 4096})
	const n = 1 << 16 // 512 KiB of indices and values
	var fb *rdma.Feedback
	var g []float32
	cctx, cancel := context.WithCancel(context.Background())
	done := WhenBlocked(t, "Send", func() error {
		for {
			m := msg(2, n, rdma.Codec{ID: rdma.CodecTopK, Fraction: 1})
			g, fb = slices.Clone(m.Payload), new(rdma.Feedback)
			m.Feedback = fb
			if err := c.Send(cctx, m); err != nil {
				return err
			}
		}
	})
	cancel()
	unblocked(t, done, context.Canceled, false, "cancelled send")
	res := fb.Residual()
	if len(res) == 0 {
		return false
	}
	if len(res) != n {
		t.Fatalf("residual of %d elements after a failed send, want %d", len(res), n)
	}
	if j := firstDiff(res, g); j >= 0 {
		t.Fatalf("residual after a failed send: element %d = %v, want %v", j, res[j], g[j])
	}
	return true
}

func testErrorMsg(t *testing.T, f Factory) {
	c, s := pair(t, f, rdma.Options{})
	send(t, c, rdma.NewErrorMsg(fmt.Errorf("%w: gradient has 3 elements, want 5", rdma.ErrBadLength)))
	m := recv(t, s)
	defer m.Release()
	// The peer's text, and the identity of its sentinel (package errcode).
	err := m.Err()
	if want := "rdma: error reported by peer: " + rdma.ErrBadLength.Error() + ": gradient has 3 elements, want 5"; m.Type != rdma.TypeError ||
		!errors.Is(err, rdma.ErrRemote) || !errors.Is(err, rdma.ErrBadLength) || errors.Is(err, rdma.ErrCorrupt) || err.Error() != want {
		t.Fatalf("type %d, error %q (want %q, matching ErrRemote and ErrBadLength)", m.Type, err, want)
	}
	ok := rdma.NewMsg(1)
	defer ok.Release()
	if ok.Err() != nil {
		t.Fatal("non-error message reports an error")
	}
}

func testLimits(t *testing.T, f Factory) {
	c, s := pair(t, f, rdma.Options{MaxElems: 1000, MaxData: 10})
	for _, m := range []*rdma.Msg{rdma.NewMsg(1001), msg(0, 10, rdma.Codec{})} {
		if len(m.Payload) == 10 {
			m.Data = append(m.Data[:0], "eleven byte"...)
		}
		err := c.Send(ctx(t), m)
		if !errors.Is(err, rdma.ErrFrameTooLarge) || !rdma.Recoverable(err) {
			t.Fatalf("oversized send: %v", err)
		}
	}
	bad := rdma.NewMsg(1)
	bad.Codec = rdma.Codec{ID: 200}
	if err := c.Send(ctx(t), bad); !errors.Is(err, rdma.ErrUnknownCodec) {
		t.Fatalf("unknown codec: %v", err)
	}
	send(t, c, msg(1, 1000, rdma.Codec{})) // the connection still works
	m := recv(t, s)
	check(t, m, 1, 1000, rdma.Codec{})
	m.Release()
}

func testPeerClose(t *testing.T, f Factory) {
	c, s := pair(t, f, rdma.Options{})
	for i := range 3 {
		send(t, c, msg(i, 5000, rdma.Codec{}))
	}
	c.Close()
	for i := range 3 {
		m := recv(t, s)
		check(t, m, i, 5000, rdma.Codec{})
		m.Release()
	}
	for range 2 {
		_, err := s.Recv(ctx(t))
		if !errors.Is(err, rdma.ErrClosed) || !errors.Is(err, io.EOF) || rdma.Recoverable(err) {
			t.Fatalf("recv after peer close: %v", err)
		}
	}
	// Sending to a closed peer fails, at the latest once the peer's close
	// has reached the sender.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := s.Send(ctx(t), rdma.NewMsg(10))
		if err != nil {
			if !errors.Is(err, rdma.ErrClosed) {
				t.Fatalf("send to closed peer: %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("send to a closed peer keeps succeeding")
		}
		time.Sleep(time.Millisecond)
	}
}

func testLocalClose(t *testing.T, f Factory) {
	c, _ := pair(t, f, rdma.Options{})
	done := WhenBlocked(t, "Recv", func() error {
		_, err := c.Recv(context.Background())
		return err
	})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	unblocked(t, done, rdma.ErrClosed, false, "blocked recv after close")
	if err := c.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := c.Recv(ctx(t)); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("recv after close: %v", err)
	}
	if err := c.Send(ctx(t), rdma.NewMsg(1)); !errors.Is(err, rdma.ErrClosed) {
		t.Fatalf("send after close: %v", err)
	}

	// A Send blocked because the peer does not read is unblocked too.
	c, _ = pair(t, f, rdma.Options{QueueLen: 1, SocketBuffer: 4096})
	done = WhenBlocked(t, "Send", func() error {
		for {
			if err := c.Send(context.Background(), rdma.NewMsg(1<<18)); err != nil {
				return err
			}
		}
	})
	c.Close()
	unblocked(t, done, rdma.ErrClosed, false, "blocked send after close")
}

func testListenerClose(t *testing.T, f Factory) {
	n, addr := f(t, rdma.Options{})
	ln, err := n.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	done := WhenBlocked(t, "Accept", func() error {
		_, err := ln.Accept(context.Background())
		return err
	})
	ln.Close()
	unblocked(t, done, rdma.ErrClosed, false, "accept after close")
	if c, err := n.Dial(ctx(t), ln.Addr()); !errors.Is(err, rdma.ErrRefused) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dial to closed listener: %v", err)
	}
	// Cancelling a blocked Accept leaves the listener usable.
	ln, err = n.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cctx, cancel := context.WithCancel(context.Background())
	done = WhenBlocked(t, "Accept", func() error {
		_, err := ln.Accept(cctx)
		return err
	})
	cancel()
	unblocked(t, done, context.Canceled, true, "cancelled accept")
	dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer dcancel()
	if _, err := ln.Accept(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("accept with deadline: %v", err)
	}
	go func() {
		if c, err := n.Dial(context.Background(), ln.Addr()); err == nil {
			c.Close()
		}
	}()
	c, err := ln.Accept(ctx(t))
	if err != nil {
		t.Fatalf("accept after a cancelled accept: %v", err)
	}
	c.Close()
}

func testCancel(t *testing.T, f Factory) {
	c, s := pair(t, f, rdma.Options{})
	cctx, cancel := context.WithCancel(context.Background())
	done := WhenBlocked(t, "Recv", func() error {
		_, err := s.Recv(cctx)
		return err
	})
	cancel()
	unblocked(t, done, context.Canceled, true, "cancelled recv")
	if _, err := s.Recv(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("recv with a cancelled context: %v", err)
	}
	if err := c.Send(cctx, rdma.NewMsg(1)); !errors.Is(err, context.Canceled) || !rdma.Recoverable(err) {
		t.Fatalf("send with a cancelled context: %v", err)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer dcancel()
	if _, err := s.Recv(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("recv past deadline: %v", err)
	}
	// Both directions still work, with a fresh context.
	for i := range 3 {
		send(t, c, msg(i, 1000, rdma.Codec{}))
		m := recv(t, s)
		check(t, m, i, 1000, rdma.Codec{})
		m.Release()
	}
}

// WhenBlocked runs call on a new goroutine and returns, with the channel
// that will carry call's result, once that goroutine is parked inside a
// method named method (Recv, Send, Accept): waiting on a channel, a lock
// or the network poller, as a blocked call of any transport does. It
// fails the test if call returns first or the goroutine is not seen
// blocked within blockTimeout.
func WhenBlocked(t *testing.T, method string, call func() error) <-chan error {
	t.Helper()
	id := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		id <- goroutineID()
		done <- call()
	}()
	g := <-id
	deadline := time.Now().Add(blockTimeout)
	for {
		state, stack := goroutineState(g)
		if parkedStates[state] && strings.Contains(stack, ")."+method+"(") {
			return done
		}
		select {
		case err := <-done:
			t.Fatalf("%s returned before blocking: %v", method, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutine %s not seen blocked in %s within %v; last seen [%s]:\n%s", g, method, blockTimeout, state, stack)
		}
		time.Sleep(time.Millisecond)
	}
}

// unblocked waits for the result of a call started with WhenBlocked, which
// an action of the test must have ended: the error must match want (and
// be recoverable, if recoverable).
func unblocked(t *testing.T, done <-chan error, want error, recoverable bool, what string) {
	t.Helper()
	select {
	case err := <-done:
		if !errors.Is(err, want) || recoverable && !rdma.Recoverable(err) {
			t.Fatalf("%s: %v, want %v", what, err, want)
		}
	case <-time.After(blockTimeout):
		t.Fatalf("%s: still blocked after %v", what, blockTimeout)
	}
}

// blockTimeout bounds the waits of WhenBlocked and unblocked: generous,
// since a loaded machine running tests under the race detector can take
// seconds to get a call to the point where it blocks.
const blockTimeout = time.Minute

// parkedStates are the goroutine states (as runtime.Stack prints them) of
// a goroutine that waits for another to wake it.
var parkedStates = map[string]bool{
	"IO wait": true, "select": true, "chan receive": true, "chan send": true,
	"sync.Mutex.Lock": true, "sync.RWMutex.Lock": true, "sync.RWMutex.RLock": true,
	"sync.Cond.Wait": true, "semacquire": true,
}

// goroutineID returns the calling goroutine's id as runtime.Stack prints
// it.
func goroutineID() string {
	var buf [64]byte
	s := string(buf[:runtime.Stack(buf[:], false)])
	s = strings.TrimPrefix(s, "goroutine ")
	id, _, _ := strings.Cut(s, " ")
	return id
}

// goroutineState returns the state of goroutine id ("IO wait", "select",
// "running", ...; "" if it is gone) and its stack.
func goroutineState(id string) (state, stack string) {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		rest, ok := strings.CutPrefix(g, "goroutine "+id+" [")
		if !ok {
			continue
		}
		state, _, _ = strings.Cut(rest, "]")
		state, _, _ = strings.Cut(state, ",") // "IO wait, 2 minutes"
		return state, g
	}
	return "", ""
}

// testAllocs checks that a round trip (send, echo, receive) allocates
// nothing once warm, for the codecs that promise it.
func testAllocs(t *testing.T, f Factory) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	for _, name := range []string{"none", "s2", "zstd", "shuffle+zstd", "bf16", "topk:0.01"} {
		t.Run(name, func(t *testing.T) {
			codec, _ := rdma.ParseCodec(name)
			c, s := pair(t, f, rdma.Options{})
			go echo(s)
			cctx := ctx(t)
			m := msg(1, 100_000, codec)
			var fb rdma.Feedback // used by topk only
			m.Feedback = &fb
			round := func() {
				if err := c.Send(cctx, m); err != nil {
					t.Fatal(err)
				}
				var err error
				if m, err = c.Recv(cctx); err != nil {
					t.Fatal(err)
				}
				m.Codec, m.Feedback = codec, &fb
			}
			for range 5 {
				round()
			}
			if a := testing.AllocsPerRun(50, round); a > 0 {
				t.Errorf("%v allocations per round trip", a)
			}
			m.Release()
		})
	}
}

// testBorrowAndPlace checks borrowed payloads and placements: a payload
// lent to Send may be overwritten once Send returns, and the receiver
// gets what it held then; a Placement receives the payload of the frames
// it names straight into the receiver's memory (every transport but
// verbs, which may ignore it), decoded there for encoded payloads, and
// Release leaves that memory alone.
func testBorrowAndPlace(t *testing.T, f Factory) {
	c, s := pair(t, f, rdma.Options{})
	const n = 50_000
	dst := make([]float32, n)
	s.(rdma.Placer).Place(func(typ rdma.Type, shard uint32, seq uint64, elems int) []float32 {
		if seq%2 == 0 {
			return nil
		}
		return dst[:elems]
	})
	for i, codec := range []rdma.Codec{{}, {}, {ID: rdma.CodecS2}, {ID: rdma.CodecS2}} {
		want := msg(i, n, codec)
		lent := slices.Clone(want.Payload)
		m := msg(i, 0, codec)
		m.Borrow(lent)
		sent := make(chan error, 1)
		go func() {
			err := c.Send(ctx(t), m)
			clear(lent) // Send is done with it
			sent <- err
		}()
		got := recv(t, s)
		if err := Receive(t, sent, 20*time.Second, "Send to return"); err != nil {
			t.Fatal(err)
		}
		checkAgainst(t, got, want, i)
		placed := &got.Payload[0] == &dst[0]
		switch {
		case i%2 == 0 && placed:
			t.Fatalf("message %d: placed, but the placement declined it", i)
		case i%2 == 1 && !placed && s.Transport().Name != "verbs":
			t.Fatalf("message %d: not received into the placed memory", i)
		case placed != got.Borrowed():
			t.Fatalf("message %d: placed %v, Borrowed %v", i, placed, got.Borrowed())
		}
		got.Release()
		if placed {
			next := rdma.NewMsg(n) // must not be handed dst
			if &next.Payload[0] == &dst[0] {
				t.Fatal("the placed memory joined the pool")
			}
			next.Release()
			if j := firstDiff(dst, want.Payload); j >= 0 {
				t.Fatalf("message %d: placed element %d changed after Release", i, j)
			}
		}
		want.Release()
	}
}
