package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/softsync/softsync/rdma"
)

// Member is what every role but the coordinator needs to take part in a
// job: the network, the coordinator's address, who it is and the job's
// settings.
type Member struct {
	Network rdma.Network
	// Job is the job id the network stamps on every message
	// (rdma.Options.Job; 0 means 1).
	Job         uint32
	Coordinator string // the coordinator's address on Network
	Process     Process
	Settings    Settings
	// Rendezvous bounds the wait for the coordinator to answer (0: until
	// ctx ends).
	Rendezvous time.Duration
	// WaitWarn is how long the member dials a coordinator that does not
	// listen yet before it warns, and again each time it has waited as
	// long once more (0: DefaultWaitWarn); until then it says so at debug
	// level only: processes start at different times.
	WaitWarn time.Duration
	// PSTimeout bounds how long a learner or the evaluator tries to reach
	// a shard server again after its connection failed (the server may be
	// restarting), with backoff, before it fails naming the shard and the
	// address (0: it fails at once). It bounds the same way how long
	// every role dials again a listener that closes the connection during
	// the handshake, as a listener full of unauthenticated connections
	// does to some (see dial).
	PSTimeout time.Duration
	// Locate, if set, tells where the coordinator is now (a restarted
	// coordinator may listen elsewhere and publish its address, e.g. in
	// a rendezvous file): a process that lost the coordinator asks it
	// before each attempt to rejoin; "" means Coordinator.
	Locate func() string
	Logger *slog.Logger // nil: no log
}

func (m *Member) log() *slog.Logger {
	if m.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return m.Logger
}

// dial connects to addr, trying again with backoff (50 ms, doubling up
// to 1 s) after a failure that may pass: nothing listens there yet
// (rdma.ErrRefused), until ctx ends, or the listener closed the
// connection during the handshake (rdma.ErrHandshakeClosed: a listener
// whose handshake slots are full sheds connections), until PSTimeout has
// passed since the first such failure (at once without a PSTimeout). It
// gives up at once on any other error. failed, if set, is told of each
// failure before the pause.
func (m *Member) dial(ctx context.Context, addr string, failed func(error)) (rdma.Conn, error) {
	wait, closedSince := 50*time.Millisecond, time.Time{}
	for {
		conn, err := m.Network.Dial(ctx, addr)
		switch {
		case err == nil:
			return conn, nil
		case errors.Is(err, rdma.ErrHandshakeClosed):
			if closedSince.IsZero() {
				closedSince = time.Now()
			}
			switch {
			case m.PSTimeout <= 0:
				return nil, err
			case time.Since(closedSince) >= m.PSTimeout:
				return nil, fmt.Errorf("closed during the handshake again and again for --ps-timeout %v: %w", m.PSTimeout, err)
			}
		case !errors.Is(err, rdma.ErrRefused):
			return nil, err
		}
		if failed != nil {
			failed(err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (the last try: %w)", ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// shardNetwork is the member's network as learners and the evaluator use
// it to reach the shard servers: Dial tries again as dial does, for
// PSTimeout at most (only once without a PSTimeout).
type shardNetwork struct {
	rdma.Network
	m *Member
}

func (n shardNetwork) Dial(ctx context.Context, addr string) (rdma.Conn, error) {
	if n.m.PSTimeout <= 0 {
		return n.Network.Dial(ctx, addr)
	}
	ctx, cancel := context.WithTimeout(ctx, n.m.PSTimeout)
	defer cancel()
	return n.m.dial(ctx, addr, func(err error) {
		n.m.log().Info("dialing a shard server again", "addr", addr, "err", err)
	})
}

// join dials the coordinator (again while nothing listens there yet or
// its listener closes the connection during the handshake, see dial),
// says hello and waits for the welcome.
func (m *Member) join(ctx context.Context, h hello) (*ctrl, welcome, error) {
	h.Process, h.Settings = m.Process, m.Settings
	if m.Rendezvous > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.Rendezvous)
		defer cancel()
	}
	log := m.log()
	wait := waitLog{warn: m.WaitWarn}
	wait.begin(time.Now())
	conn, err := m.dial(ctx, m.Coordinator, func(err error) {
		now := time.Now()
		if level, ok := wait.next(now); ok {
			log.Log(ctx, level, "waiting for the coordinator", "addr", m.Coordinator, "me", m.Process.String(), "waited", wait.waited(now), "err", err)
		}
	})
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, welcome{}, fmt.Errorf("%w: %s: the coordinator at %s did not answer: %v", ErrRendezvous, m.Process, m.Coordinator, err)
	case err != nil:
		return nil, welcome{}, fmt.Errorf("%s: dial the coordinator at %s: %w", m.Process, m.Coordinator, err)
	}
	c := &ctrl{conn: conn}
	if err := c.send(ctx, tHello, h); err != nil {
		conn.Close()
		return nil, welcome{}, fmt.Errorf("%s: hello to the coordinator at %s: %w", m.Process, m.Coordinator, err)
	}
	log.Debug("registered; waiting for the job to start", "coordinator", m.Coordinator, "me", m.Process.String())
	t, b, err := c.recv(ctx)
	var w welcome
	switch {
	case err != nil:
		err = fmt.Errorf("%w: %s: waiting for the coordinator at %s to start the job: %v", ErrRendezvous, m.Process, m.Coordinator, err)
	case t == tStop:
		var s stop
		decode(t, b, &s)
		err = fmt.Errorf("%w: the coordinator refused %s: %w", ErrRendezvous, m.Process, s.why())
		if s.Interrupted {
			err = fmt.Errorf("%w: %s: the job was interrupted before it started", ErrInterrupted, m.Process)
		}
	case t != tWelcome:
		err = fmt.Errorf("%w: %s: message %#x from the coordinator, want a welcome", ErrProtocol, m.Process, t)
	default:
		err = decode(t, b, &w)
	}
	if err != nil {
		conn.Close()
		return nil, welcome{}, err
	}
	return c, w, nil
}

// rejoin dials the coordinator again after its connection failed with
// cause, and says hello (a Rejoin, made anew for each attempt), waiting
// for the welcome: for
// PSTimeout at most (without a PSTimeout the loss is the job's end for
// this process). The coordinator may have been restarted: it welcomes
// the process once the job has started again.
func (m *Member) rejoin(ctx context.Context, hello func() hello, cause error) (*ctrl, welcome, error) {
	if m.PSTimeout <= 0 {
		return nil, welcome{}, fmt.Errorf("%w: lost the coordinator: %v", ErrJobFailed, cause)
	}
	log := m.log()
	log.Warn("lost the coordinator; dialling it again", "addr", m.Coordinator, "for", m.PSTimeout, "err", cause)
	ctx, cancel := context.WithTimeout(ctx, m.PSTimeout)
	defer cancel()
	for {
		// What the process has is told as of each attempt.
		h := hello()
		h.Rejoin = true
		again := *m
		again.Rendezvous = 0
		if m.Locate != nil {
			if a := m.Locate(); a != "" {
				again.Coordinator = a
			}
		}
		// Where Locate may tell another address, an attempt that finds
		// nothing gives up after a while to ask again.
		actx, acancel := ctx, context.CancelFunc(func() {})
		if m.Locate != nil {
			actx, acancel = context.WithTimeout(ctx, locateEvery)
		}
		cc, w, err := again.join(actx, h)
		acancel()
		switch {
		case err == nil:
			m.Coordinator = again.Coordinator
			log.Info("rejoined the coordinator", "addr", m.Coordinator, "me", m.Process.String())
			return cc, w, nil
		case ctx.Err() != nil || actx.Err() == nil:
			return nil, welcome{}, fmt.Errorf("%w: lost the coordinator (%v) and could not rejoin it within --ps-timeout %v: %w", ErrJobFailed, cause, m.PSTimeout, err)
		}
	}
}

// locateEvery is how long one attempt to rejoin waits before it asks
// Member.Locate where the coordinator is again.
const locateEvery = 2 * time.Second

// stopErr turns the coordinator's stop message into the role's result:
// nil, the job's failure, or ErrInterrupted for a job interrupted before
// it started.
func stopErr(t rdma.Type, b []byte) error {
	var s stop
	if err := decode(t, b, &s); err != nil {
		return err
	}
	switch {
	case s.Text != "":
		return jobFailed(s.Err())
	case s.Interrupted:
		return fmt.Errorf("%w before the job started", ErrInterrupted)
	}
	return nil
}

// redialer returns the Redial of a learner's or the evaluator's
// parameter-server client: ask the coordinator where the server of the
// shard is now (it may have been restarted elsewhere), and dial it, again
// and again with backoff until PSTimeout. addrs delivers the
// coordinator's answers; calls are serialised by mu.
func (m *Member) redialer(cc func() *ctrl, addrs <-chan addr, mu *sync.Mutex) func(context.Context, int) (rdma.Conn, error) {
	return func(ctx context.Context, shard int) (rdma.Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		if m.PSTimeout <= 0 {
			return nil, fmt.Errorf("shard %d: connection lost (no --ps-timeout to wait for it)", shard)
		}
		ctx, cancel := context.WithTimeout(ctx, m.PSTimeout)
		defer cancel()
		log := m.log()
		wait, last, lastErr := 100*time.Millisecond, "", error(nil)
		for {
			if err := cc().send(ctx, tWhere, where{Shard: shard}); err != nil && rdma.Recoverable(err) {
				return nil, fmt.Errorf("shard %d: asking the coordinator where its server is: %w", shard, err)
			}
			select {
			case a := <-addrs:
				last = a.Addr
				conn, err := m.Network.Dial(ctx, a.Addr)
				if err == nil {
					log.Info("reconnected to a shard server", "shard", shard, "addr", a.Addr)
					return conn, nil
				}
				lastErr = err
				log.Warn("shard server unreachable; retrying", "shard", shard, "addr", a.Addr, "err", err, "in", wait)
			case <-ctx.Done():
			}
			select {
			case <-ctx.Done():
				if lastErr == nil {
					lastErr = errors.New("the coordinator knows no server for it")
				}
				return nil, fmt.Errorf("shard %d (server at %s) not reachable within --ps-timeout %v: %w", shard, last, m.PSTimeout, lastErr)
			case <-time.After(wait):
			}
			wait = min(2*wait, 2*time.Second)
		}
	}
}
