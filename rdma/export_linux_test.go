package rdma

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"time"
	"unsafe"
)

// ShmVersion is the version byte of shm set-ups and segments.
const ShmVersion = shmVersion

// NewShmRing returns the shm transport dialing connections with rings of
// ring bytes, for tests of wrap-around and of frames many times the ring.
func NewShmRing(opts Options, ring int) (*Shm, error) {
	s, err := NewShm(opts)
	if err == nil {
		s.ring = ring
	}
	return s, err
}

// ShmUnread returns how many bytes the peer of c, a shm connection, has
// published and c has not read, and the ring's size.
func ShmUnread(c Conn) (unread uint64, ring int) {
	sc := c.(*shmConn)
	return sc.rx.ring.tail.Load() - sc.rx.ring.head.Load(), len(sc.rx.ring.data)
}

// ShmInLend reports whether p lies in this process's shm lend segment.
func ShmInLend(p []float32) bool { return len(p) > 0 && lendContains(unsafe.Pointer(&p[0])) }

// ShmChildRing is the ring size of the connections ShmChild dials.
const ShmChildRing = 64 << 10

// ShmChild is the body of a child process of the shm tests: it dials the
// shm listener addr with rings of ShmChildRing bytes, does what mode
// says, prints "ready" on a line of its own, and waits, until killed, or
// until its standard input closes:
//
//	frames: sends messages 0, 1 and 2 of ShmChildElems(i) elements,
//	        each element i+1.
//	full:   prints ready, then sends a message of 1 Mi elements, which
//	        fills the ring (but for less than a piece) and waits for room.
//	lent:   sends a message of ShmChildLentElems elements, each 5, from
//	        its lend segment, and prints ready once its reference is in
//	        the ring (the send waits for the parent to read it).
//	torn:   writes into the ring, and publishes, the header of a frame of
//	        1 Mi elements and its first 1000 payload bytes, and writes
//	        500 more without publishing them: a process dead in the
//	        middle of a frame.
func ShmChild(mode, addr string) int {
	fail := func(err error) int {
		fmt.Println("child:", err)
		return 1
	}
	s, err := NewShmRing(Options{}, ShmChildRing)
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := s.Dial(ctx, addr)
	if err != nil {
		return fail(err)
	}
	c := conn.(*shmConn)
	switch mode {
	case "frames":
		for i := range 3 {
			m := NewMsg(ShmChildElems(i))
			for j := range m.Payload {
				m.Payload[j] = float32(i + 1)
			}
			m.Seq = uint64(i)
			if err := c.Send(ctx, m); err != nil {
				return fail(err)
			}
		}
		fmt.Println("ready")
	case "full":
		fmt.Println("ready")
		if err := c.Send(context.Background(), NewMsg(1<<20)); err != nil {
			return fail(err)
		}
		return fail(fmt.Errorf("a send of 4 MiB through a ring of %d bytes that nobody reads returned", ShmChildRing))
	case "lent":
		m := s.NewMsg(ShmChildLentElems)
		for j := range m.Payload {
			m.Payload[j] = 5
		}
		go c.Send(context.Background(), m) // waits for the parent, which never reads before the kill
		for c.tx.ring.tail.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		fmt.Println("ready")
	case "torn":
		h := Header{Job: 0, Elems: 1 << 20, PayloadLen: 4 << 20}
		var hb [HeaderSize]byte
		PutHeader(hb[:], &h)
		c.tx.copyIn(hb[:])
		c.tx.copyIn(make([]byte, 1000))
		c.tx.publish()
		copy(c.tx.ring.data[c.tx.tail&c.tx.ring.mask:], make([]byte, 500))
		fmt.Println("ready")
	default:
		return fail(fmt.Errorf("unknown mode %q", mode))
	}
	bufio.NewReader(os.Stdin).ReadString('\n') // until the parent goes
	return 0
}

// ShmChildLentElems is the size of ShmChild's lent message.
const ShmChildLentElems = 1 << 18

// ShmChildElems is the size of message i of ShmChild's frames mode.
func ShmChildElems(i int) int { return 1000 * (i + 1) }
