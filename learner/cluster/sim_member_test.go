package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/softsync/softsync/rdma"
)

// A role's membership in the chaos simulator: joining the coordinator,
// rejoining it, dialling shard servers and redialling them, with the
// decisions of the runtime (join.go: retry, Member.welcomed,
// rejoinable, rejoinAttempt, rejoinFailed, shardRedial) in virtual time.

// simMember is a role's Member in process p.
type simMember struct {
	p *simProc
	m *Member
}

// clock is the virtual time as the runtime's decisions take it.
func (w *simWorld) clock() time.Time { return time.Unix(1e9, 0).Add(w.now) }

// dial connects to addr as Member.dial does: again after a failure that
// may pass (retry), until the virtual time until (0: no bound), when it
// fails as a dial whose context ended.
func (s *simMember) dial(addr func() string, until time.Duration, then func(*simEnd, error)) {
	p, w := s.p, s.p.w
	r := newRetry(s.m.PSTimeout)
	var try func()
	try = func() {
		p.dial(addr(), func(e *simEnd, err error) {
			if err == nil {
				then(e, nil)
				return
			}
			wait, err := r.failed(err, w.clock())
			switch {
			case err != nil:
				then(nil, err)
			case until > 0 && w.now+wait >= until:
				p.after(until-w.now, func() {
					then(nil, fmt.Errorf("%w (the last try: %w)", context.DeadlineExceeded, r.last))
				})
			default:
				p.after(wait, try)
			}
		})
	}
	try()
}

// joined is the end of a join: the control connection and the welcome,
// or the error and whether the join's bound passed (expired).
type joined struct {
	e       *simEnd
	w       welcome
	err     error
	expired bool
}

// join joins the job as Member.join does: attempts (joinOnce), again
// after a pause while the connection is lost before the welcome; until
// the rendezvous bound.
func (s *simMember) join(m *Member, h hello, then func(joined)) {
	w := s.p.w
	until := time.Duration(0)
	if m.Rendezvous > 0 {
		until = w.now + m.Rendezvous
	}
	pause := newRetry(m.PSTimeout).pause
	var attempt func()
	attempt = func() {
		s.joinOnce(m, h, until, func(jd joined) {
			if jd.err == nil || !errors.Is(jd.err, errJoinLost) || jd.expired {
				then(jd)
				return
			}
			wait := pause.next()
			if until > 0 && w.now+wait >= until {
				then(jd)
				return
			}
			s.p.after(wait, attempt)
		})
	}
	attempt()
}

// joinOnce is one attempt to join (Member.joinOnce): dial the
// coordinator, say h, wait for the welcome; until the virtual time until
// (0: no bound).
func (s *simMember) joinOnce(m *Member, h hello, until time.Duration, then func(joined)) {
	p, w := s.p, s.p.w
	h.Process, h.Settings = m.Process, m.Settings
	over := false
	end := func(j joined) {
		if !over {
			over = true
			then(j)
		}
	}
	if until > 0 {
		p.after(until-w.now, func() {
			end(joined{err: m.joinFailed(joinExpired, context.DeadlineExceeded), expired: true})
		})
	}
	s.dial(m.coordinatorNow, until, func(e *simEnd, err error) {
		if over {
			if e != nil {
				e.close(w.now, errPeerGone)
			}
			return
		}
		if err != nil {
			end(joined{err: m.joinFailed(joinDial, err)})
			return
		}
		e.recv = func(msg any) {
			c := msg.(simCtrl)
			wel, err := m.welcomed(c.t, c.b)
			if err != nil || over {
				e.close(w.now, errPeerGone)
			}
			end(joined{e: e, w: wel, err: err})
		}
		e.lost = func(err error) {
			end(joined{err: m.joinFailed(joinWelcome, err)})
		}
		if !sendCtrl(e, tHello, h) {
			end(joined{err: m.joinFailed(joinHello, errPeerGone)})
		}
	})
}

// rejoin rejoins the coordinator as Member.rejoin does, after the
// connection failed with cause: attempts, each with a hello made anew,
// until PSTimeout.
func (s *simMember) rejoin(hello func() hello, cause error, then func(joined)) {
	w := s.p.w
	if err := s.m.rejoinable(cause); err != nil {
		then(joined{err: err})
		return
	}
	deadline := w.now + s.m.PSTimeout
	pause := newRetry(s.m.PSTimeout).pause
	var attempt func()
	attempt = func() {
		h := hello()
		h.Rejoin = true
		again, bound := s.m.rejoinAttempt()
		until := deadline
		if bound > 0 {
			until = min(deadline, w.now+bound)
		}
		s.joinOnce(again, h, until, func(j joined) {
			if j.err == nil {
				s.m.rejoined(again)
				then(j)
				return
			}
			wait, err := s.m.rejoinFailed(cause, j.err, w.now >= deadline, j.expired, &pause)
			if err != nil {
				then(joined{err: err})
				return
			}
			s.p.after(wait, attempt)
		})
	}
	attempt()
}

// sendCtrl sends control message t with v on e, as ctrl.send encodes it;
// false if e is closed.
func sendCtrl(e *simEnd, t rdma.Type, v any) bool {
	b, err := ctrlData(t, v)
	if err != nil {
		panic(err)
	}
	return e.send(simCtrl{t, b})
}
