//go:build linux

package rdma

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// How auto moves a connection to shm (docs/rdma.md), on its TCP control
// connection, after the TCP handshake: the dialer's hello says it can use
// shm; the listener answers with typeShmOffer, the name of an abstract
// unix socket of its own and a fresh 32-byte nonce (or why it cannot);
// the dialer connects there, authenticates as on TCP, sets a segment up
// with the nonce in its set-up message, and says how it went with
// typeShmResult. Reaching the socket proves that the dialer is on this
// host, in this network namespace: the abstract namespace belongs to the
// network namespace, and a peer elsewhere finds nothing (or another
// host's socket, which has no such nonce). The nonce ties the unix
// connection to this TCP connection. Any failure leaves both ends on the
// verbs handshake, which goes on as if shm had not been tried, and the
// reason ends up in the connection's Transport.

// shmAutoPrefix starts the names of auto listeners' unix sockets.
const shmAutoPrefix = "@softsync-auto/"

// shmOffers is an auto listener's unix socket, where peers that were
// offered shm connect, and the offers outstanding, by nonce.
type shmOffers struct {
	ln   Listener
	err  error // why this listener cannot offer shm (ln nil)
	wg   sync.WaitGroup
	mu   sync.Mutex
	open map[[nonceSize]byte]chan Conn
}

// newShmOffers starts the shm side of an auto listener; on failure the
// returned value says why in its offers.
func newShmOffers(s *Shm) *shmOffers {
	if s == nil {
		return nil
	}
	o := &shmOffers{open: map[[nonceSize]byte]chan Conn{}}
	ln, err := s.listen(shmAutoPrefix + randomName())
	if err != nil {
		o.err = fmt.Errorf("no unix socket for shared memory: %w", err)
		return o
	}
	o.ln = newAuthListener(ln, s.opts, shmServer{s: s, nonceOK: o.known})
	o.wg.Go(o.dispatch)
	return o
}

// known reports whether nonce belongs to an outstanding offer.
func (o *shmOffers) known(nonce [nonceSize]byte) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.open[nonce]
	return ok
}

// dispatch hands every connection set up on the socket to the offer its
// nonce names, until the socket is closed.
func (o *shmOffers) dispatch() {
	for {
		c, err := o.ln.Accept(context.Background())
		if err != nil {
			if errors.Is(err, ErrClosed) {
				return
			}
			continue
		}
		sc := c.(*shmConn)
		o.mu.Lock()
		ch := o.open[sc.nonce]
		delete(o.open, sc.nonce)
		if ch != nil {
			ch <- sc // room for one, and the offer is taken once
		}
		o.mu.Unlock()
		if ch == nil {
			sc.Close()
		}
	}
}

// offer opens an offer: a fresh nonce, and where its connection will come.
func (o *shmOffers) offer() ([nonceSize]byte, chan Conn) {
	var nonce [nonceSize]byte
	rand.Read(nonce[:])
	ch := make(chan Conn, 1)
	o.mu.Lock()
	o.open[nonce] = ch
	o.mu.Unlock()
	return nonce, ch
}

// withdraw ends an offer, closing a connection that came for it and was
// not taken.
func (o *shmOffers) withdraw(nonce [nonceSize]byte, ch chan Conn) {
	o.mu.Lock()
	delete(o.open, nonce)
	o.mu.Unlock()
	select {
	case c := <-ch:
		c.Close()
	default:
	}
}

// stats returns the counters of the socket's listener.
func (o *shmOffers) stats() ListenerStats {
	if o.ln == nil {
		return ListenerStats{}
	}
	return o.ln.Stats()
}

// close stops the socket and waits for dispatch.
func (o *shmOffers) close() {
	if o == nil || o.ln == nil {
		return
	}
	o.ln.Close()
	o.wg.Wait()
}

// offerShm is the listener's side: it offers shm to the dialer on ctl
// and returns the shm connection, or why there is none ("local: ..." or
// "peer: ..."), or an error of the control connection.
func (v *Verbs) offerShm(ctx context.Context, ctl Conn, o *shmOffers) (Conn, string, error) {
	if o.ln == nil {
		why := o.err.Error()
		return nil, "local: " + why, sendHandshake(ctx, ctl, typeShmOffer, 0, []byte(why))
	}
	nonce, ch := o.offer()
	defer o.withdraw(nonce, ch)
	name := o.ln.Addr()
	if err := sendHandshake(ctx, ctl, typeShmOffer, 1, append(nonce[:], name...)); err != nil {
		return nil, "", err
	}
	m, err := ctl.Recv(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("shm offer: %w", err)
	}
	defer m.Release()
	switch {
	case m.Type != typeShmResult:
		return nil, "", fmt.Errorf("%w: shm offer answered by a message of type %#x", ErrBadVersion, m.Type)
	case m.Seq != 1:
		return nil, "peer: " + string(m.Data), nil
	}
	select {
	case c := <-ch:
		sc := c.(*shmConn)
		sc.local, sc.remote = ctl.LocalAddr(), ctl.RemoteAddr()
		sc.info = TransportInfo{Name: "shm", Reason: "same host: the peer connected to unix socket " + name + " in this network namespace"}
		return sc, "", nil
	case <-ctx.Done():
		return nil, "", fmt.Errorf("shm offer: the peer's connection to %s did not come: %w", name, ctx.Err())
	}
}

// answerShm is the dialer's side: m is the listener's typeShmOffer
// (released here). It returns the shm connection, or why there is none,
// or an error of the control connection.
func (v *Verbs) answerShm(ctx context.Context, ctl Conn, m *Msg) (Conn, string, error) {
	defer m.Release()
	if m.Seq != 1 {
		return nil, "peer: " + string(m.Data), nil
	}
	var nonce [nonceSize]byte
	name := ""
	if len(m.Data) > nonceSize {
		copy(nonce[:], m.Data)
		name = string(m.Data[nonceSize:])
	}
	if !strings.HasPrefix(name, "@") {
		return nil, "", fmt.Errorf("%w: shm offer of %d bytes without a nonce and a socket name", ErrBadVersion, len(m.Data))
	}
	c, err := v.shm.dial(ctx, name, nonce, ctl.LocalAddr(), ctl.RemoteAddr())
	if err != nil {
		why := fmt.Sprintf("cannot set up shared memory through unix socket %s: %v", name, err)
		if errors.Is(err, ErrRefused) {
			why = fmt.Sprintf("unix socket %s is not reachable: another host or network namespace", name)
		}
		return nil, "local: " + why, sendHandshake(ctx, ctl, typeShmResult, 0, []byte(why))
	}
	if err := sendHandshake(ctx, ctl, typeShmResult, 1, nil); err != nil {
		c.Close()
		return nil, "", err
	}
	c.info = TransportInfo{Name: "shm", Reason: "same host: connected to the peer's unix socket " + name + " in this network namespace"}
	return c, "", nil
}
