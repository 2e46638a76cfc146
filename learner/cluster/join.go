package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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

// dial connects to the address addr returns (asked before each try),
// trying again after a failure that may pass (see retry) until ctx ends.
// failed, if set, is told of each failure before the pause.
func (m *Member) dial(ctx context.Context, addr func() string, failed func(error)) (rdma.Conn, error) {
	r := newRetry(m.PSTimeout)
	for {
		conn, err := m.Network.Dial(ctx, addr())
		if err == nil {
			return conn, nil
		}
		wait, final := r.failed(err, time.Now())
		if final != nil {
			return nil, final
		}
		if failed != nil {
			failed(err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (the last try: %w)", ctx.Err(), r.last)
		case <-time.After(wait):
		}
	}
}

// retry decides, dial after dial, whether a dial that failed is tried
// again and after how long: a failure that may pass is tried again with
// backoff (50 ms, doubling up to 1 s): nothing listens there yet
// (rdma.ErrRefused), for as long as the caller waits, or the listener
// closed the connection during the handshake (rdma.ErrHandshakeClosed: a
// listener whose handshake slots are full sheds connections), until
// psTimeout has passed since the first such failure (never without a
// psTimeout). Any other failure is final.
type retry struct {
	psTimeout   time.Duration
	pause       backoff
	closedSince time.Time
	last        error // the last failure
}

func newRetry(psTimeout time.Duration) retry {
	return retry{psTimeout: psTimeout, pause: backoff{first: 50 * time.Millisecond, most: time.Second}}
}

// failed takes a dial's failure at now: it returns the pause before the
// next dial, or the error to give up with.
func (r *retry) failed(err error, now time.Time) (time.Duration, error) {
	r.last = err
	switch {
	case errors.Is(err, rdma.ErrHandshakeClosed):
		if r.closedSince.IsZero() {
			r.closedSince = now
		}
		switch {
		case r.psTimeout <= 0:
			return 0, err
		case now.Sub(r.closedSince) >= r.psTimeout:
			return 0, fmt.Errorf("closed during the handshake again and again for --ps-timeout %v: %w", r.psTimeout, err)
		}
	case !errors.Is(err, rdma.ErrRefused):
		return 0, err
	}
	return r.pause.next(), nil
}

// shardNetwork is the member's network as learners and the evaluator use
// it to reach the shard servers at the addresses of their welcome (addrs,
// by shard): Dial tries again as dial does, for PSTimeout at most (only
// once without a PSTimeout); a server that is not there (the coordinator
// has lost it, and it comes back elsewhere) is found as the server of a
// lost connection is, through the coordinator (redial).
type shardNetwork struct {
	rdma.Network
	m      *Member
	addrs  []string
	redial func(context.Context, int) (rdma.Conn, error)
}

func (n shardNetwork) Dial(ctx context.Context, addr string) (rdma.Conn, error) {
	if n.m.PSTimeout <= 0 {
		return n.Network.Dial(ctx, addr)
	}
	conn, err := n.Network.Dial(ctx, addr)
	if err == nil {
		return conn, nil
	}
	if k := slices.Index(n.addrs, addr); n.redial != nil && k >= 0 && n.m.awayServer(err) {
		return n.redial(ctx, k)
	}
	ctx, cancel := context.WithTimeout(ctx, n.m.PSTimeout)
	defer cancel()
	return n.m.dial(ctx, func() string { return addr }, func(err error) {
		n.m.log().Info("dialing a shard server again", "addr", addr, "err", err)
	})
}

// awayServer reports whether the first dial of a shard server's address
// failed with err because nothing listens there: the server may have
// been lost and restarted elsewhere since the welcome named it, and the
// coordinator tells where it is once it is back.
func (m *Member) awayServer(err error) bool {
	if !errors.Is(err, rdma.ErrRefused) {
		return false
	}
	m.log().Info("no shard server at the welcome's address; asking the coordinator where it is", "err", err)
	return true
}

// join dials the coordinator (again while nothing listens there yet or
// its listener closes the connection during the handshake, see dial),
// says hello and waits for the welcome; a connection lost before the
// welcome (a coordinator that dies, or is restarted, meanwhile) is
// dialled again after a pause (retry's backoff). Rendezvous, if set,
// bounds the whole.
func (m *Member) join(ctx context.Context, h hello) (*ctrl, welcome, error) {
	if m.Rendezvous > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.Rendezvous)
		defer cancel()
	}
	pause := newRetry(m.PSTimeout).pause
	for {
		cc, w, err := m.joinOnce(ctx, h)
		if err == nil || !errors.Is(err, errJoinLost) || ctx.Err() != nil {
			return cc, w, err
		}
		select {
		case <-ctx.Done():
			return nil, welcome{}, err
		case <-time.After(pause.next()):
		}
	}
}

// joinOnce is one attempt of join.
func (m *Member) joinOnce(ctx context.Context, h hello) (*ctrl, welcome, error) {
	h.Process, h.Settings = m.Process, m.Settings
	log := m.log()
	wait := waitLog{warn: m.WaitWarn}
	wait.begin(time.Now())
	conn, err := m.dial(ctx, m.coordinatorNow, func(err error) {
		now := time.Now()
		if level, ok := wait.next(now); ok {
			log.Log(ctx, level, "waiting for the coordinator", "addr", m.Coordinator, "me", m.Process.String(), "waited", wait.waited(now), "err", err)
		}
	})
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, welcome{}, m.joinFailed(joinExpired, err)
	case err != nil:
		return nil, welcome{}, m.joinFailed(joinDial, err)
	}
	c := &ctrl{conn: conn}
	if err := c.send(ctx, tHello, h); err != nil {
		conn.Close()
		return nil, welcome{}, m.joinFailed(joinHello, err)
	}
	log.Debug("registered; waiting for the job to start", "coordinator", m.Coordinator, "me", m.Process.String())
	t, b, err := c.recv(ctx)
	var w welcome
	if err == nil {
		w, err = m.welcomed(t, b)
	} else {
		err = m.joinFailed(joinWelcome, err)
	}
	if err != nil {
		conn.Close()
		return nil, welcome{}, err
	}
	return c, w, nil
}

// joinStep is where an attempt to join failed.
type joinStep int

const (
	joinExpired joinStep = iota // the dial, when the join's bound passed
	joinDial                    // the dial, for another reason
	joinHello                   // sending the hello
	joinWelcome                 // waiting for the welcome
)

// joinFailed is the error of an attempt to join that failed at step with
// err. A hello or a welcome lost with the connection is errJoinLost: the
// join tries again.
func (m *Member) joinFailed(step joinStep, err error) error {
	switch step {
	case joinExpired:
		return fmt.Errorf("%w: %s: the coordinator at %s did not answer: %v", ErrRendezvous, m.Process, m.Coordinator, err)
	case joinDial:
		return fmt.Errorf("%s: dial the coordinator at %s: %w", m.Process, m.Coordinator, err)
	case joinHello:
		return fmt.Errorf("%s: hello to the coordinator at %s: %w (%w)", m.Process, m.Coordinator, errJoinLost, err)
	}
	return fmt.Errorf("%w: %s: waiting for the coordinator at %s to start the job: %w (%v)", ErrRendezvous, m.Process, m.Coordinator, errJoinLost, err)
}

// coordinatorNow returns where the coordinator is now: where Locate
// says, if set (a process that starts while a restarted head moves
// finds it), else Coordinator.
func (m *Member) coordinatorNow() string {
	if m.Locate != nil {
		if a := m.Locate(); a != "" {
			m.Coordinator = a
		}
	}
	return m.Coordinator
}

// welcomed reads the coordinator's answer to the member's hello, message
// t with data b: its welcome, or why the member may not take part.
func (m *Member) welcomed(t rdma.Type, b []byte) (welcome, error) {
	var w welcome
	switch t {
	case tStop:
		var s stop
		decode(t, b, &s)
		if s.Interrupted {
			return w, fmt.Errorf("%w: %s: the job was interrupted before this process took part", ErrInterrupted, m.Process)
		}
		return w, fmt.Errorf("%w: the coordinator refused %s: %w", ErrRendezvous, m.Process, s.why())
	case tWelcome:
		return w, decode(t, b, &w)
	}
	return w, fmt.Errorf("%w: %s: message %#x from the coordinator, want a welcome", ErrProtocol, m.Process, t)
}

// rejoin dials the coordinator again after its connection failed with
// cause, and says hello (a Rejoin, made anew for each attempt), waiting
// for the welcome: for
// PSTimeout at most (without a PSTimeout the loss is the job's end for
// this process). The coordinator may have been restarted: it welcomes
// the process once the job has started again.
func (m *Member) rejoin(ctx context.Context, hello func() hello, cause error) (*ctrl, welcome, error) {
	if err := m.rejoinable(cause); err != nil {
		return nil, welcome{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, m.PSTimeout)
	defer cancel()
	pause := newRetry(m.PSTimeout).pause
	for {
		// What the process has is told as of each attempt.
		h := hello()
		h.Rejoin = true
		again, bound := m.rejoinAttempt()
		actx, acancel := ctx, context.CancelFunc(func() {})
		if bound > 0 {
			actx, acancel = context.WithTimeout(ctx, bound)
		}
		cc, w, err := again.joinOnce(actx, h)
		attemptExpired := actx.Err() != nil // before acancel, which ends actx whatever happened
		acancel()
		if err == nil {
			m.rejoined(again)
			return cc, w, nil
		}
		wait, err := m.rejoinFailed(cause, err, ctx.Err() != nil, attemptExpired, &pause)
		if err != nil {
			return nil, welcome{}, err
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// rejoinable decides whether a member that lost the coordinator with
// cause tries to rejoin it (for PSTimeout) or ends: the loss is the
// job's end for it without a PSTimeout.
func (m *Member) rejoinable(cause error) error {
	if m.PSTimeout <= 0 {
		return fmt.Errorf("%w: lost the coordinator: %v", ErrJobFailed, cause)
	}
	m.log().Warn("lost the coordinator; dialling it again", "addr", m.Coordinator, "for", m.PSTimeout, "err", cause)
	return nil
}

// rejoinAttempt returns the member as one attempt to rejoin joins: at
// the address Locate tells, if any, without a rendezvous bound; and how
// long the attempt may take (0: until PSTimeout). Where Locate may tell
// another address, an attempt that finds nothing gives up after
// locateEvery to ask again.
func (m *Member) rejoinAttempt() (again *Member, bound time.Duration) {
	a := *m
	a.Rendezvous = 0
	if m.Locate == nil {
		return &a, 0
	}
	if addr := m.Locate(); addr != "" {
		a.Coordinator = addr
	}
	return &a, locateEvery
}

// rejoined records that the attempt again rejoined the coordinator.
func (m *Member) rejoined(again *Member) {
	m.Coordinator = again.Coordinator
	m.log().Info("rejoined the coordinator", "addr", m.Coordinator, "me", m.Process.String())
}

// rejoinFailed decides after an attempt to rejoin failed with err:
// another attempt, after the pause it returns, if the attempt ended
// because its own bound passed (at once) or lost its connection to the
// coordinator (after pause: a coordinator that dies again, or sheds
// connections); else the member gives up with the error returned:
// PSTimeout passed (expired), or the coordinator refused it.
func (m *Member) rejoinFailed(cause, err error, expired, attemptExpired bool, pause *backoff) (time.Duration, error) {
	switch {
	case expired:
	case attemptExpired:
		return 0, nil
	case errors.Is(err, errJoinLost):
		return pause.next(), nil
	}
	return 0, fmt.Errorf("%w: lost the coordinator (%v) and could not rejoin it within --ps-timeout %v: %w", ErrJobFailed, cause, m.PSTimeout, err)
}

// errJoinLost is wrapped by the error of a join whose connection to the
// coordinator failed before the welcome: one that may pass.
var errJoinLost = errors.New("the connection was lost")

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
// and again with backoff until PSTimeout (see shardRedial). addrs
// delivers the coordinator's answers; calls are serialised by mu.
func (m *Member) redialer(cc func() *ctrl, addrs <-chan addr, mu waitLock) func(context.Context, int) (rdma.Conn, error) {
	return func(ctx context.Context, shard int) (rdma.Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		r, err := m.newShardRedial(shard)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(ctx, m.PSTimeout)
		defer cancel()
		for {
			if err := cc().send(ctx, tWhere, where{Shard: shard}); err != nil && rdma.Recoverable(err) {
				return nil, fmt.Errorf("shard %d: asking the coordinator where its server is: %w", shard, err)
			}
			select {
			case a := <-addrs:
				if a.Shard != shard {
					continue // the answer to a question about another shard, asked before
				}
				conn, err := m.Network.Dial(ctx, r.at(a.Addr))
				if err == nil {
					r.connected()
					return conn, nil
				}
				select {
				case <-ctx.Done():
					return nil, r.giveUp()
				case <-time.After(r.failed(err)):
				}
			case <-time.After(r.unanswered()):
			case <-ctx.Done():
				return nil, r.giveUp()
			}
		}
	}
}

// waitLock is a mutex whose waiters wait on a channel. The redials of a
// member are serialised under one, held while a redial waits (for the
// coordinator's answer, between dials: up to PSTimeout): a goroutine
// waiting for it then waits as on any channel, which testing/synctest
// counts as durably blocked (a sync.Mutex waiter is not, and virtual
// time would stop), so that the roles run in a bubble's virtual time.
type waitLock chan struct{}

func newWaitLock() waitLock { return make(waitLock, 1) }

func (w waitLock) Lock()   { w <- struct{}{} }
func (w waitLock) Unlock() { <-w }

// shardRedial is the schedule of one redial of a shard's server
// (redialer): the coordinator says where the server is, the member dials
// it, and asks again after a pause (100 ms, doubling up to 2 s) until it
// is connected or PSTimeout has passed. A question the coordinator does
// not answer within the pause is asked again: it may have been lost with
// the coordinator's connection (the coordinator answers at once where it
// knows the server, and once it is back otherwise).
type shardRedial struct {
	m       *Member
	shard   int
	pause   backoff
	last    string // the address dialled last
	lastErr error
}

// unanswered returns how long to wait for the coordinator's answer
// before asking again.
func (r *shardRedial) unanswered() time.Duration { return r.pause.next() }

// newShardRedial starts a redial of shard's server, if the member has a
// PSTimeout to wait for it.
func (m *Member) newShardRedial(shard int) (*shardRedial, error) {
	if m.PSTimeout <= 0 {
		return nil, fmt.Errorf("shard %d: connection lost (no --ps-timeout to wait for it)", shard)
	}
	return &shardRedial{m: m, shard: shard, pause: backoff{first: 100 * time.Millisecond, most: 2 * time.Second}}, nil
}

// at records the coordinator's answer, the address to dial, and returns
// it.
func (r *shardRedial) at(a string) string {
	r.last = a
	return a
}

// connected records the new connection.
func (r *shardRedial) connected() {
	r.m.log().Info("reconnected to a shard server", "shard", r.shard, "addr", r.last)
}

// failed records a failed dial and returns the pause before asking again.
func (r *shardRedial) failed(err error) time.Duration {
	r.lastErr = err
	wait := r.pause.next()
	r.m.log().Warn("shard server unreachable; retrying", "shard", r.shard, "addr", r.last, "err", err, "in", wait)
	return wait
}

// giveUp returns the error of a redial that PSTimeout ended.
func (r *shardRedial) giveUp() error {
	err := r.lastErr
	if err == nil {
		err = errors.New("the coordinator knows no server for it")
	}
	return fmt.Errorf("shard %d (server at %s) not reachable within --ps-timeout %v: %w", r.shard, r.last, r.m.PSTimeout, err)
}

// backoff is a pause that doubles at each use, from first up to most.
type backoff struct {
	first, most, wait time.Duration
}

// next returns the pause to make now.
func (b *backoff) next() time.Duration {
	w := max(b.wait, b.first)
	b.wait = min(2*w, b.most)
	return w
}
