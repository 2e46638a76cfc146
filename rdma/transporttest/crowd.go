package transporttest

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softsync/softsync/rdma"
)

// Crowd opens connections to ln that never authenticate and holds them
// open until the test ends: idle ones that send nothing, slow ones that
// send a client hello for job one byte a second, and stalled ones that
// send a whole hello and then nothing. It returns once ln has taken every
// one in: given it a handshake slot, or closed it for want of one.
func Crowd(t testing.TB, ln rdma.Listener, job uint32, idle, slow, stalled int) {
	t.Helper()
	taken := func(st rdma.ListenerStats) uint64 {
		return st.Accepted + st.AuthFailures + st.Rejected + uint64(st.Handshakes)
	}
	want := taken(ln.Stats()) + uint64(idle+slow+stalled)
	// A client hello (docs/wire.md, "Handshake") with a zero nonce.
	hello := binary.LittleEndian.AppendUint32(append([]byte(rdma.AuthMagic), rdma.AuthVersion, 1, 0, 0), job)
	hello = append(hello, make([]byte, 32)...)
	var slows []net.Conn
	for i := range idle + slow + stalled {
		c, err := net.Dial("tcp", ln.Addr())
		if errors.Is(err, syscall.ECONNRESET) { // closed at once, before the dial returned
			continue
		}
		if err != nil {
			t.Fatalf("connection %d of the crowd: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
		switch {
		case i >= idle+slow:
			c.Write(hello)
		case i >= idle:
			slows = append(slows, c)
		}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(done); wg.Wait() })
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for i := 0; ; i = (i + 1) % len(hello) {
			for _, c := range slows {
				c.SetWriteDeadline(time.Now().Add(time.Second))
				c.Write(hello[i : i+1]) // fails once the listener has closed it
			}
			select {
			case <-tick.C:
			case <-done:
				return
			}
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for st := ln.Stats(); taken(st) < want; st = ln.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("the listener took in %d of %d connections in 20 s: %+v", taken(st), want, st)
		}
		time.Sleep(time.Millisecond)
	}
}
