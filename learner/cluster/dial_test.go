package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/errcode"
)

// flakyNetwork is an in-memory network whose first fails dials fail with
// err (all of them when fails < 0).
type flakyNetwork struct {
	rdma.Network
	err error

	mu           sync.Mutex
	fails, dials int
}

func newFlaky(t *testing.T, fails int, err error) *flakyNetwork {
	n, err2 := rdma.Open("inmem", rdma.Options{Job: 1})
	if err2 != nil {
		t.Fatal(err2)
	}
	return &flakyNetwork{Network: n, err: err, fails: fails}
}

func (n *flakyNetwork) Dial(ctx context.Context, addr string) (rdma.Conn, error) {
	n.mu.Lock()
	n.dials++
	fail := n.fails != 0
	if n.fails > 0 {
		n.fails--
	}
	n.mu.Unlock()
	if fail {
		return nil, &rdma.OpError{Op: "dial", Peer: addr, Err: n.err}
	}
	return n.Network.Dial(ctx, addr)
}

func (n *flakyNetwork) count() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.dials
}

// closedHandshake is what Dial returns when the listener sheds the
// connection during the handshake.
var closedHandshake = fmt.Errorf("%w: the peer closed the connection while reading the server's hello (%w)", rdma.ErrAuth, rdma.ErrHandshakeClosed)

// TestJoinRetriesClosedHandshake: a role whose dials to the coordinator
// are closed during the handshake (as a listener full of unauthenticated
// connections sheds some) dials again and joins.
func TestJoinRetriesClosedHandshake(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n := newFlaky(t, 3, closedHandshake)
	ln, err := n.Listen("")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // a coordinator that welcomes the first hello
		c, err := ln.Accept(ctx)
		if err != nil {
			return
		}
		defer c.Close()
		cc := &ctrl{conn: c}
		if t, _, err := cc.recv(ctx); err == nil && t == tHello {
			cc.send(ctx, tWelcome, welcome{})
		}
		<-ctx.Done()
	}()
	m := Member{Network: n, Coordinator: ln.Addr(), PSTimeout: time.Minute, Process: Process{Role: RoleLearner}}
	cc, _, err := m.join(ctx, hello{})
	if err != nil {
		t.Fatalf("join after 3 closed handshakes: %v", err)
	}
	cc.conn.Close()
	if d := n.count(); d != 4 {
		t.Errorf("%d dials, want 4", d)
	}
}

// TestJoinRetriesLostWelcome: a join whose connection the coordinator
// closes after the hello, before the welcome (it died, or was restarted,
// meanwhile), dials again and joins.
func TestJoinRetriesLostWelcome(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n := newFlaky(t, 0, nil)
	ln, err := n.Listen("")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // a coordinator that drops the first hello, welcomes the second
		for i := 0; ; i++ {
			c, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			cc := &ctrl{conn: c}
			if t, _, err := cc.recv(ctx); err == nil && t == tHello && i > 0 {
				cc.send(ctx, tWelcome, welcome{})
				defer c.Close()
				continue
			}
			c.Close()
		}
	}()
	m := Member{Network: n, Coordinator: ln.Addr(), PSTimeout: time.Minute, Process: Process{Role: RoleLearner}}
	cc, _, err := m.join(ctx, hello{})
	if err != nil {
		t.Fatalf("join after a lost welcome: %v", err)
	}
	cc.conn.Close()
	if d := n.count(); d != 2 {
		t.Errorf("%d dials, want 2", d)
	}
}

// TestRejoinRefusedEnds: a learner that rejoins a coordinator it finds
// through Locate, and is refused (the coordinator removed its life),
// gives up after that one attempt (each refused attempt was taken for
// one whose bound had passed, and tried again at once, for
// --ps-timeout).
func TestRejoinRefusedEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n := newFlaky(t, 0, nil)
	ln, err := n.Listen("")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // a coordinator that refuses every hello
		for {
			c, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			cc := &ctrl{conn: c}
			if t, _, err := cc.recv(ctx); err == nil && t == tHello {
				cc.send(ctx, tStop, stop{Wire: errcode.Encode(errors.New("incarnation 0 was removed from the job"))})
			}
			c.Close()
		}
	}()
	m := Member{Network: n, Coordinator: ln.Addr(), PSTimeout: time.Minute, Process: Process{Role: RoleLearner},
		Locate: func() string { return ln.Addr() }}
	_, _, err = m.rejoin(ctx, func() hello { return hello{} }, errors.New("lost"))
	if !errors.Is(err, ErrJobFailed) || !strings.Contains(err.Error(), "removed") {
		t.Errorf("rejoin: %v, want ErrJobFailed with the refusal", err)
	}
	if d := n.count(); d != 1 {
		t.Errorf("%d dials, want 1", d)
	}
}

// TestDialRetry: which dial failures are tried again, and for how long.
func TestDialRetry(t *testing.T) {
	errOther := fmt.Errorf("%w: the server's proof does not match (another secret)", rdma.ErrAuth)
	for _, tc := range []struct {
		name      string
		fails     int // -1: every dial
		err       error
		psTimeout time.Duration
		ctxTime   time.Duration // 0: 20 s
		shard     bool          // through shardNetwork
		wantDials int           // 0: more than one
		wantErr   []error       // nil: success
		wantText  string
	}{
		{name: "closed then through", fails: 3, err: closedHandshake, psTimeout: time.Minute, wantDials: 4},
		{name: "refused then through", fails: 2, err: rdma.ErrRefused, psTimeout: time.Minute, wantDials: 3},
		{name: "closed past PSTimeout", fails: -1, err: closedHandshake, psTimeout: 300 * time.Millisecond,
			wantErr: []error{rdma.ErrHandshakeClosed, rdma.ErrAuth}, wantText: "--ps-timeout 300ms"},
		{name: "closed without PSTimeout", fails: -1, err: closedHandshake, wantDials: 1,
			wantErr: []error{rdma.ErrHandshakeClosed}},
		{name: "refused until ctx ends", fails: -1, err: rdma.ErrRefused, ctxTime: 300 * time.Millisecond,
			wantErr: []error{context.DeadlineExceeded, rdma.ErrRefused}},
		{name: "another secret", fails: -1, err: errOther, psTimeout: time.Minute, wantDials: 1, wantErr: []error{rdma.ErrAuth}},
		{name: "shard: closed then through", fails: 2, err: closedHandshake, psTimeout: time.Minute, shard: true, wantDials: 3},
		{name: "shard: refused for PSTimeout", fails: -1, err: rdma.ErrRefused, psTimeout: 300 * time.Millisecond, shard: true,
			wantErr: []error{context.DeadlineExceeded, rdma.ErrRefused}},
		{name: "shard: refused without PSTimeout", fails: -1, err: rdma.ErrRefused, shard: true, wantDials: 1,
			wantErr: []error{rdma.ErrRefused}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(tc.ctxTime, 20*time.Second))
			defer cancel()
			n := newFlaky(t, tc.fails, tc.err)
			ln, err := n.Listen("")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				for {
					c, err := ln.Accept(context.Background())
					if err != nil {
						return
					}
					c.Close()
				}
			}()
			m := &Member{Network: n, PSTimeout: tc.psTimeout}
			failed := 0
			var c rdma.Conn
			if tc.shard {
				c, err = shardNetwork{Network: n, m: m}.Dial(ctx, ln.Addr())
			} else {
				c, err = m.dial(ctx, ln.Addr, func(error) { failed++ })
			}
			if c != nil {
				c.Close()
			}
			dials := n.count()
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("dial: %v", err)
			case tc.wantErr != nil && err == nil:
				t.Fatalf("dial succeeded after %d tries, want %v", dials, tc.wantErr)
			case tc.wantDials != 0 && dials != tc.wantDials, tc.wantDials == 0 && dials < 2:
				t.Errorf("%d dials, want %d (0: several)", dials, tc.wantDials)
			case !tc.shard && err == nil && failed != dials-1:
				t.Errorf("told of %d failures in %d dials", failed, dials)
			}
			for _, want := range tc.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("error %v does not match %v", err, want)
				}
			}
			if !strings.Contains(fmt.Sprint(err), tc.wantText) {
				t.Errorf("error %v does not mention %q", err, tc.wantText)
			}
			if tc.ctxTime == 0 && errors.Is(err, context.DeadlineExceeded) && !tc.shard {
				t.Errorf("the dial went on until the test's deadline: %v", err)
			}
		})
	}
}

// TestShardNetworkAsksWhere: a shard server that is not at the address
// of the welcome (lost, and restarted elsewhere since) is found through
// the coordinator (the redialer), not dialled there again until
// PSTimeout; without a PSTimeout the dial fails at once.
func TestShardNetworkAsksWhere(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n := newFlaky(t, 1, rdma.ErrRefused)
	ln, err := n.Listen("")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var asked []int
	redial := func(ctx context.Context, shard int) (rdma.Conn, error) {
		asked = append(asked, shard)
		return n.Network.Dial(ctx, ln.Addr())
	}
	m := &Member{Network: n, PSTimeout: time.Minute}
	c, err := shardNetwork{Network: n, m: m, addrs: []string{"gone-0", "gone-1"}, redial: redial}.Dial(ctx, "gone-1")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if !slices.Equal(asked, []int{1}) || n.count() != 1 {
		t.Errorf("asked the coordinator for shards %v after %d dials, want [1] after 1", asked, n.count())
	}
	m.PSTimeout = 0
	n.fails = 1
	if _, err := (shardNetwork{Network: n, m: m, addrs: []string{"gone-0"}, redial: redial}).Dial(ctx, "gone-0"); !errors.Is(err, rdma.ErrRefused) || len(asked) != 1 {
		t.Errorf("without a PSTimeout: %v after asking for %v, want the refusal at once", err, asked)
	}
}

// TestRedialAsksAgain: the redialer asks the coordinator again where a
// shard's server is when no answer comes (a question lost with the
// coordinator's connection, which was then replaced), and connects once
// it is answered.
func TestRedialAsksAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := rdma.Open("inmem", rdma.Options{Job: 1})
	if err != nil {
		t.Fatal(err)
	}
	coord, err := n.Listen("")
	if err != nil {
		t.Fatal(err)
	}
	defer coord.Close()
	server, err := n.Listen("")
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	go func() {
		for {
			c, err := server.Accept(context.Background())
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	conn, err := n.Dial(ctx, coord.Addr())
	if err != nil {
		t.Fatal(err)
	}
	cc := &ctrl{conn: conn}
	peer, err := coord.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	addrs := make(chan addr, 1)
	questions := make(chan int, 8)
	go func() { // the coordinator: the first question is lost, the second answered
		pc := &ctrl{conn: peer}
		for i := 0; ; i++ {
			t, b, err := pc.recv(ctx)
			if err != nil {
				return
			}
			var w where
			decode(t, b, &w)
			questions <- w.Shard
			if i == 1 {
				latest(addrs, addr{Shard: w.Shard, Addr: server.Addr()})
			}
		}
	}()
	m := &Member{Network: n, PSTimeout: 10 * time.Second}
	c, err := m.redialer(func() *ctrl { return cc }, addrs, newWaitLock())(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if got := len(questions); got < 2 || <-questions != 3 {
		t.Errorf("%d questions, want the shard asked for again after the first went unanswered", got)
	}
}

// TestRedialTakesItsShard: the redialer of a shard dials the server the
// coordinator names for that shard, not another's whose answer was still
// waiting (a question asked before, answered late).
func TestRedialTakesItsShard(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := rdma.Open("inmem", rdma.Options{Job: 1})
	if err != nil {
		t.Fatal(err)
	}
	coord, err := n.Listen("")
	if err != nil {
		t.Fatal(err)
	}
	defer coord.Close()
	var servers []rdma.Listener
	for range 2 {
		ln, err := n.Listen("")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		servers = append(servers, ln)
	}
	accepted := make(chan int, 2)
	for i, ln := range servers {
		go func() {
			if c, err := ln.Accept(context.Background()); err == nil {
				accepted <- i
				c.Close()
			}
		}()
	}
	conn, err := n.Dial(ctx, coord.Addr())
	if err != nil {
		t.Fatal(err)
	}
	cc := &ctrl{conn: conn}
	peer, err := coord.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	addrs := make(chan addr, 1)
	addrs <- addr{Shard: 0, Addr: servers[0].Addr()} // late, for shard 0
	go func() {                                      // the coordinator answers where shard 1 is
		pc := &ctrl{conn: peer}
		if _, _, err := pc.recv(ctx); err == nil {
			for len(addrs) > 0 {
				time.Sleep(time.Millisecond)
			}
			addrs <- addr{Shard: 1, Addr: servers[1].Addr()}
		}
	}()
	m := &Member{Network: n, PSTimeout: 10 * time.Second}
	c, err := m.redialer(func() *ctrl { return cc }, addrs, newWaitLock())(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if got := <-accepted; got != 1 {
		t.Errorf("the redial of shard 1 reached server %d", got)
	}
}
