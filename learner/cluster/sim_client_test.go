package cluster

import (
	"fmt"
	"slices"
	"time"

	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/rdma"
)

// simClient runs a learner's or the evaluator's client core
// (ps.ClientCore) over the simulated network, as ps.Client runs it over
// its connections: one connection per shard server (ps.Dial), the
// core's messages sent on the connection of their generation, what
// arrives stepped into the core, a broken connection reported and
// replaced through the coordinator (Member.redialer's shardRedial: ask
// where the server is, dial, again after a pause, until PSTimeout), one
// replacement at a time.
type simClient struct {
	p         *simProc
	mem       *simMember
	core      *ps.ClientCore
	job       uint32
	codec     rdma.Codec // of the pushes
	ranges    []ps.Range // of the shards
	links     []*simEnd  // per link, its connection (nil: down)
	broken    []error    // per link, the loss of its connection, not noticed yet
	ctrl      func() *simEnd
	done      func(ps.Call, error)
	delivered func(uint64)
	redials   []int // links to replace, in order
	redial    *simRedial
	closed    bool
	// restore, if set, filters what the core sends on a replaced
	// connection (a defect test puts an old client's behaviour back).
	restore func(ps.ClientReady) ps.ClientReady
}

// simRedial is the replacement in progress of a link's connection.
type simRedial struct {
	link     int
	r        *shardRedial
	deadline time.Duration
	waiting  bool // for the coordinator's answer
	asked    int  // questions asked
}

// simLinks groups shards by their server's address as ps.Dial does: the
// link of each shard, and each link's address.
func simLinks(addrs []string) (links []int, linkAddrs []string) {
	for _, a := range addrs {
		i := slices.Index(linkAddrs, a)
		if i < 0 {
			linkAddrs = append(linkAddrs, a)
			i = len(linkAddrs) - 1
		}
		links = append(links, i)
	}
	return links, linkAddrs
}

// connect dials every server at the welcome's addresses one after the
// other and makes the client (ps.Dial over shardNetwork): a server not
// there is found through the coordinator (its link starts down, and is
// replaced as a lost one is), another failure is tried again as
// Member.dial does, for PSTimeout. then runs with the client, or the
// first error.
func (s *simMember) connect(addrs []string, cfg ps.ClientCoreConfig, then func(*simClient, error)) {
	links, linkAddrs := simLinks(addrs)
	cfg.Links, cfg.Reconnect = links, true
	core, err := ps.NewClientCore(cfg)
	if err != nil {
		then(nil, err)
		return
	}
	ranges, err := ps.Ranges(cfg.Total, len(addrs))
	if err != nil {
		then(nil, err)
		return
	}
	c := &simClient{p: s.p, mem: s, core: core, codec: cfg.Codec, ranges: ranges,
		links: make([]*simEnd, len(linkAddrs)), broken: make([]error, len(linkAddrs))}
	var away []int
	var next func(i int)
	next = func(i int) {
		if i == len(linkAddrs) {
			then(c, nil)
			for _, li := range away {
				c.carry(c.core.LinkDown(li, 0, errPeerGone))
			}
			return
		}
		s.p.dial(linkAddrs[i], func(e *simEnd, err error) {
			if err == nil {
				c.attach(i, e)
				next(i + 1)
				return
			}
			if s.m.PSTimeout > 0 && s.m.awayServer(err) {
				away = append(away, i)
				next(i + 1)
				return
			}
			until := time.Duration(0)
			if s.m.PSTimeout > 0 {
				until = s.p.w.now + s.m.PSTimeout
			}
			if s.m.PSTimeout <= 0 {
				c.fail(fmt.Errorf("ps client %d: shard %d: %w", cfg.Learner, slices.Index(links, i), err), then)
				return
			}
			s.dial(func() string { return linkAddrs[i] }, until, func(e *simEnd, err error) {
				if err != nil {
					c.fail(fmt.Errorf("ps client %d: shard %d: %w", cfg.Learner, slices.Index(links, i), err), then)
					return
				}
				c.attach(i, e)
				next(i + 1)
			})
		})
	}
	next(0)
}

// fail ends a connect that failed with err: the connections made close.
func (c *simClient) fail(err error, then func(*simClient, error)) {
	for _, e := range c.links {
		if e != nil {
			e.close(c.p.w.now, errPeerGone)
		}
	}
	then(nil, err)
}

// attach makes e link li's connection of the core's current generation.
// Its loss is noticed as a runtime notices it: at once while a call
// awaits an answer on it (a receiver reads it), else at the next message
// sent on it.
func (c *simClient) attach(li int, e *simEnd) {
	gen := c.core.Gen(li)
	c.links[li] = e
	e.recv = func(m any) {
		r := m.(simReply)
		c.carry(c.core.Recv(li, gen, r.shard, r.r))
	}
	e.lost = func(err error) {
		if c.links[li] != e {
			return
		}
		if c.core.Awaits(li) {
			c.notice(li, err)
			return
		}
		c.broken[li] = err
	}
}

// notice takes the loss of link li's connection.
func (c *simClient) notice(li int, err error) {
	gen := c.core.Gen(li)
	c.links[li], c.broken[li] = nil, nil
	c.carry(c.core.LinkDown(li, gen, err))
}

// carry carries out what an event of the core asked for: its messages,
// each on the connection of its generation (a message of an older one is
// not sent), copied as a transport copies them; the links to replace;
// the mini-batches delivered; and, last, the end of the call.
func (c *simClient) carry(rd ps.ClientReady) {
	if c.closed {
		return
	}
	var noticed []int
	for _, s := range rd.Sends {
		e := c.links[s.Link]
		if e == nil || s.Gen != c.core.Gen(s.Link) {
			continue
		}
		// Through the wire form, as Client sends it and Server reads it.
		rm := s.Wire(rdma.NewMsg, c.codec, c.ranges)
		rm.Job = c.job
		m, err := ps.MsgOf(rm)
		if err != nil {
			panic(fmt.Sprintf("a client core's message %+v has no wire form: %v", s.Msg, err))
		}
		m.Grad = slices.Clone(m.Grad)
		if c.broken[s.Link] != nil || !e.send(m) {
			if !slices.Contains(noticed, s.Link) {
				noticed = append(noticed, s.Link) // the send fails: its loss is noticed
			}
		}
	}
	for _, li := range rd.Dial {
		c.redials = append(c.redials, li)
	}
	for _, b := range rd.Delivered {
		if c.delivered != nil {
			c.delivered(b)
		}
	}
	if len(rd.Dial) > 0 {
		c.p.after(0, c.nextRedial)
	}
	done, err := rd.Done, rd.Err
	for _, li := range noticed {
		cause := c.broken[li]
		if cause == nil {
			cause = errPeerGone
		}
		c.notice(li, cause)
	}
	if done != ps.CallNone && c.done != nil {
		c.done(done, err)
	}
}

// nextRedial starts the next replacement, unless one is in progress.
func (c *simClient) nextRedial() {
	if c.redial != nil || len(c.redials) == 0 || c.closed {
		return
	}
	li := c.redials[0]
	c.redials = c.redials[1:]
	shard := c.core.LinkShards(li)[0]
	r, err := c.mem.m.newShardRedial(shard)
	if err != nil {
		c.carry(c.core.LinkDead(li, err))
		c.nextRedial()
		return
	}
	d := &simRedial{link: li, r: r, deadline: c.p.w.now + c.mem.m.PSTimeout}
	c.redial = d
	c.p.after(c.mem.m.PSTimeout, func() {
		if c.redial == d {
			c.redialOver(c.core.LinkDead(li, r.giveUp()))
		}
	})
	c.ask()
}

// ask asks the coordinator where the server of the link being replaced
// is, and again if no answer comes within the pause (the question may
// have been lost with the coordinator's connection).
func (c *simClient) ask() {
	d := c.redial
	d.waiting = true
	d.asked++
	if c.ctrl == nil {
		return // its role has not taken it (it ended meanwhile)
	}
	if e := c.ctrl(); e != nil {
		sendCtrl(e, tWhere, where{Shard: c.core.LinkShards(d.link)[0]})
	}
	asked := d.asked
	c.p.after(d.r.unanswered(), func() {
		if c.redial == d && d.waiting && d.asked == asked {
			c.ask()
		}
	})
}

// answer takes the coordinator's answer to where (the role's reader
// hands it on, Member.redialer's addrs): dial it, or ask again after a
// pause.
func (c *simClient) answer(a addr) {
	d := c.redial
	if d == nil || !d.waiting || c.closed || a.Shard != c.core.LinkShards(d.link)[0] {
		return
	}
	d.waiting = false
	c.p.dial(d.r.at(a.Addr), func(e *simEnd, err error) {
		if c.redial != d {
			if e != nil {
				e.close(c.p.w.now, errPeerGone)
			}
			return
		}
		if err != nil {
			wait := d.r.failed(err)
			c.p.after(min(wait, max(d.deadline-c.p.w.now, 0)), func() {
				if c.redial == d {
					c.ask()
				}
			})
			return
		}
		d.r.connected()
		rd := c.core.LinkUp(d.link)
		c.attach(d.link, e)
		if c.restore != nil {
			rd = c.restore(rd)
		}
		c.redialOver(rd)
	})
}

// redialOver ends the replacement in progress with what the core said.
func (c *simClient) redialOver(rd ps.ClientReady) {
	c.redial = nil
	c.carry(rd)
	c.nextRedial()
}

// close ends the client (ps.Client.Close): nothing more is sent or
// redialled, its connections close.
func (c *simClient) close() {
	if c.closed {
		return
	}
	c.core.Close()
	c.closed = true
	for _, e := range c.links {
		if e != nil {
			e.close(c.p.w.now, errPeerGone)
		}
	}
}
