//go:build !linux

package rdma

import (
	"context"
	"fmt"
	"runtime"
	"unsafe"
)

// Shm is the shared-memory transport, which needs Linux (memfd, abstract
// unix sockets): elsewhere NewShm fails with ErrUnsupported.
type Shm struct{}

var _ Network = (*Shm)(nil)

// NewShm fails with an error matching ErrUnsupported.
func NewShm(opts Options) (*Shm, error) {
	if _, err := opts.withDefaults(); err != nil {
		return nil, err
	}
	return nil, &OpError{Op: "open", Peer: "shm", Err: fmt.Errorf("%w: no shared-memory transport on %s", ErrUnsupported, runtime.GOOS)}
}

func (s *Shm) Name() string                               { return "shm" }
func (s *Shm) NewMsg(n int) *Msg                          { return NewMsg(n) }
func (s *Shm) Listen(string) (Listener, error)            { return nil, errNoShm }
func (s *Shm) Dial(context.Context, string) (Conn, error) { return nil, errNoShm }

// lendContains reports false: there are no lend segments here.
func lendContains(unsafe.Pointer) bool { return false }

var errNoShm = fmt.Errorf("%w: no shared-memory transport on %s", ErrUnsupported, runtime.GOOS)

// shmOffers is an auto listener's shm side, which has none here.
type shmOffers struct{}

func newShmOffers(*Shm) *shmOffers { return nil }

func (o *shmOffers) close() {}

func (o *shmOffers) stats() ListenerStats { return ListenerStats{} }

// offerShm is never called: without shm, v.shm is nil and nothing is offered.
func (v *Verbs) offerShm(context.Context, Conn, *shmOffers) (Conn, string, error) {
	return nil, "", nil
}

// answerShm is never called: without shm, the hello asks for no offer.
func (v *Verbs) answerShm(_ context.Context, _ Conn, m *Msg) (Conn, string, error) {
	m.Release()
	return nil, "", nil
}
