package rdma

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/softsync/softsync/rdma/internal/verbs"
)

// handshake sets a connection up over ctl, a fresh TCP connection, on
// the dialer (l nil) or on listener l:
//
//  1. The dialer creates its queue pair (INIT, receives posted) and sends
//     typeHello: its device, port, GID, LID, QP number, PSN, receive depth
//     and slot size, or why it has no usable device (ok unset), and
//     whether it takes shm (an auto dialer on a host with shm).
//  2. If both ends run auto and the dialer takes shm, the listener offers
//     it (shm_auto.go); when the dialer sets shm up, the connection is
//     shm, and ctl is closed. Otherwise the handshake goes on, and why
//     there is no shm is added to a fallback's reason.
//  3. The listener, if the dialer is ok and the two are compatible,
//     creates its queue pair and moves it to RTR and RTS towards the
//     dialer, and answers with its own typeHello (or why not).
//  4. If either end is not ok, both know it from the two hellos: an auto
//     connection stays on TCP (ctl is the connection, its Transport says
//     why), a verbs one fails.
//  5. The dialer moves its queue pair to RTR and RTS and sends a probe
//     packet over it; the listener answers the probe with its own. Each
//     end then sends typeReady: Seq 1 when its probe completed and the
//     peer's arrived, else Seq 0 and why (within half the handshake
//     time). Both ready: the connection uses verbs; otherwise as in 4.
//
// Errors of the exchange itself (ctl fails, the peer answers with
// anything but the handshake) end the connection in either mode; the
// caller closes ctl.
func (v *Verbs) handshake(ctx context.Context, ctl Conn, l *verbsListener) (conn Conn, err error) {
	dialer := l == nil
	ctx, cancel := context.WithTimeout(ctx, v.opts.Verbs.HandshakeTimeout)
	defer cancel()
	defer func() {
		if f := v.opts.OnConnect; f != nil {
			var t TransportInfo
			if conn != nil {
				t = conn.Transport()
			}
			f(ctl.LocalAddr(), ctl.RemoteAddr(), t, err)
		}
	}()
	local := verbsHello{auto: v.auto, shm: v.shm != nil}
	var c *verbsConn
	var localErr error // why this end cannot use verbs
	create := func() {
		if v.prov == nil {
			localErr = v.provErr
			local.text = localErr.Error()
			return
		}
		if c, localErr = v.newVerbsConn(ctl, dialer); localErr != nil {
			local.text = localErr.Error()
			return
		}
		s := c.s
		local = verbsHello{auto: v.auto, ok: true, shm: v.shm != nil, link: s.pattr.LinkLayer, gidType: s.gid.Type, mtu: s.pattr.ActiveMTU,
			lid: s.pattr.LID, qpn: c.qp.Num(), psn: rand.Uint32() & 0xffffff, gid: s.gid.GID,
			recvDepth: c.R, slotSize: c.S, fabric: s.prov.Fabric(), text: s.name()}
	}
	// abandon releases the queue pair when the connection will not use it.
	abandon := func(why string) {
		if c != nil {
			if c.started {
				c.stop()
			}
			c.release()
			c = nil
		}
		local.ok, local.text = false, why
	}
	var peer verbsHello
	var shmWhy string // why the connection is not shm, if shm was tried
	if dialer {
		create()
		if err := sendHandshake(ctx, ctl, typeHello, 0, local.marshal(nil)); err != nil {
			abandon("")
			return nil, err
		}
		m, err := ctl.Recv(ctx)
		if err == nil && m.Type == typeShmOffer {
			var sc Conn
			if sc, shmWhy, err = v.answerShm(ctx, ctl, m); sc != nil {
				abandon("")
				ctl.Close()
				return sc, nil
			}
			if err == nil {
				m, err = ctl.Recv(ctx)
			}
		}
		if err != nil {
			abandon("")
			return nil, fmt.Errorf("verbs handshake: %w", err)
		}
		if peer, err = helloOf(m); err != nil {
			abandon("")
			return nil, err
		}
	} else {
		if peer, err = recvHello(ctx, ctl); err != nil {
			return nil, err
		}
		if v.auto && peer.auto && peer.shm && l.offers != nil {
			var sc Conn
			if sc, shmWhy, err = v.offerShm(ctx, ctl, l.offers); sc != nil {
				ctl.Close()
				return sc, nil
			}
			if err != nil {
				return nil, err
			}
		}
		if peer.ok {
			create()
		} else if localErr = v.status(); localErr != nil { // say our own reason too
			local.text = localErr.Error()
		} else {
			local.text = "not tried: the dialer cannot use verbs"
		}
		if local.ok {
			if localErr = compatible(&local, &peer); localErr != nil {
				abandon(localErr.Error())
			} else if localErr = c.connect(&local, &peer); localErr != nil {
				abandon(localErr.Error())
			}
		}
		if err := sendHandshake(ctx, ctl, typeHello, 0, local.marshal(nil)); err != nil {
			abandon("")
			return nil, err
		}
	}
	if !local.ok || !peer.ok {
		why := "peer: " + peer.text
		if localErr != nil {
			why = "local: " + localErr.Error()
		}
		abandon("")
		return v.fallback(ctl, local.auto && peer.auto, withShm(why, shmWhy), localErr)
	}

	// Both ends have a queue pair: connect the dialer's, probe both ways.
	var failed string
	if dialer {
		if err := compatible(&local, &peer); err != nil {
			failed = "local: " + err.Error()
		} else if localErr = c.connect(&local, &peer); localErr != nil {
			failed = "local: " + localErr.Error()
		}
	}
	ready := make(chan *Msg, 1)
	readyErr := make(chan error, 1)
	go func() {
		m, err := ctl.Recv(ctx)
		if err != nil {
			readyErr <- err
			return
		}
		ready <- m
	}()
	var peerReady *Msg
	if failed == "" {
		c.start()
		pctx, pcancel := context.WithTimeout(ctx, v.opts.Verbs.HandshakeTimeout/2)
		failed, peerReady = c.waitProbeOr(pctx, ready)
		pcancel()
	}
	var seq uint64
	if failed == "" {
		seq = 1
	}
	if err := sendHandshake(ctx, ctl, typeReady, seq, []byte(failed)); err != nil {
		abandon("")
		cancel() // ends the reader
		select {
		case m := <-ready:
			m.Release()
		case <-readyErr:
		}
		return nil, err
	}
	if peerReady == nil {
		select {
		case peerReady = <-ready:
		case err := <-readyErr:
			abandon("")
			return nil, err
		}
	}
	defer peerReady.Release()
	if peerReady.Type != typeReady {
		abandon("")
		return nil, fmt.Errorf("%w: verbs handshake: message of type %#x instead of ready", ErrBadVersion, peerReady.Type)
	}
	if failed == "" && peerReady.Seq != 1 {
		failed = "peer: " + string(peerReady.Data)
	}
	if failed != "" {
		abandon("")
		return v.fallback(ctl, local.auto && peer.auto, withShm(failed, shmWhy), localErr)
	}
	c.info = TransportInfo{Name: "verbs", Device: c.s.name(), Emulated: c.s.emulated,
		Reason: fmt.Sprintf("both ends have a usable RDMA device (local %s, peer %s)", local.text, peer.text)}
	c.mu.Lock()
	c.live = true
	c.mu.Unlock()
	go c.readControl()
	return c, nil
}

// waitProbeOr waits for the probes to go through, or for the peer's
// typeReady (which it returns) saying they will not.
func (c *verbsConn) waitProbeOr(ctx context.Context, ready chan *Msg) (failed string, peer *Msg) {
	for {
		c.mu.Lock()
		err, ok := c.err, c.probeSent && c.probed && c.outstanding == 0
		c.mu.Unlock()
		switch {
		case err != nil:
			return "local: probe over the queue pair failed: " + err.Error(), peer
		case ok:
			return "", peer
		case peer != nil && (peer.Type != typeReady || peer.Seq != 1):
			return "peer: " + string(peer.Data), peer
		}
		select {
		case <-c.stateWake:
		case m := <-ready:
			peer = m
		case <-ctx.Done():
			return "local: no probe over the queue pair within half the handshake time", peer
		}
	}
}

// fallback returns ctl as the connection when both ends run auto, else
// the error: localErr when this end could not use verbs, else one naming
// why.
func (v *Verbs) fallback(ctl Conn, auto bool, why string, localErr error) (Conn, error) {
	switch {
	case auto:
		if e, ok := ctl.(interface{ handOver(Limits) }); ok {
			e.handOver(v.opts.limits())
		}
		return &tcpFallback{Conn: ctl, info: TransportInfo{Name: "tcp", Reason: why}}, nil
	case localErr != nil:
		return nil, fmt.Errorf("verbs required but not usable: %w", localErr)
	case !v.auto:
		return nil, fmt.Errorf("%w: verbs required but not usable: %s", ErrUnsupported, why)
	}
	return nil, fmt.Errorf("%w: the peer requires verbs, which is not usable: %s", ErrUnsupported, why)
}

// compatible reports why two ends that both have a queue pair cannot talk
// (the same answer on both ends).
func compatible(local, peer *verbsHello) error {
	switch {
	case local.fabric != peer.fabric && (local.fabric == 0 || peer.fabric == 0):
		return fmt.Errorf("%w: one end uses the in-process verbs emulation, the other a device", ErrUnsupported)
	case local.fabric != peer.fabric:
		return fmt.Errorf("%w: the ends use different in-process verbs emulations", ErrUnsupported)
	case local.link != peer.link:
		return fmt.Errorf("%w: link layers differ (local %s, peer %s)", ErrUnsupported, local.link, peer.link)
	case local.link == verbs.LinkEthernet && local.gidType != peer.gidType && local.gidType != verbs.GIDUnknown && peer.gidType != verbs.GIDUnknown:
		return fmt.Errorf("%w: RoCE versions differ (local %s, peer %s)", ErrUnsupported, local.gidType, peer.gidType)
	}
	return nil
}

func sendHandshake(ctx context.Context, ctl Conn, t Type, seq uint64, data []byte) error {
	m := NewMsg(0)
	m.Type, m.Seq = t, seq
	m.Data = append(m.Data, data...)
	return ctl.Send(ctx, m)
}

// withShm adds to why, the reason a connection is on TCP, why it is not
// on shm, if shm was tried.
func withShm(why, shmWhy string) string {
	if shmWhy == "" {
		return why
	}
	return why + " (shm: " + shmWhy + ")"
}

func recvHello(ctx context.Context, ctl Conn) (verbsHello, error) {
	m, err := ctl.Recv(ctx)
	if err != nil {
		return verbsHello{}, fmt.Errorf("verbs handshake: %w", err)
	}
	return helloOf(m)
}

// helloOf reads the hello m and releases it.
func helloOf(m *Msg) (verbsHello, error) {
	var h verbsHello
	var err error
	defer m.Release()
	if m.Type != typeHello {
		if e := m.Err(); e != nil {
			err = fmt.Errorf(": %w", e)
		}
		return h, fmt.Errorf("%w: verbs handshake: the peer answered with a message of type %#x (does it use --transport tcp?)%v", ErrBadVersion, m.Type, err)
	}
	return h, h.unmarshal(m.Data)
}
