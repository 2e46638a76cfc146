package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/rdma"
)

// The control protocol: every role keeps one connection to the
// coordinator over the job's rdma.Network, and exchanges small messages
// whose rdma type is one of the values below (the application range, above
// the parameter server's) and whose Data is the JSON of the struct named
// beside it. A connection's first message is a hello. docs/cluster.md
// lists them for readers of captures.
const (
	tHello    rdma.Type = 0x20 + iota // any role → coordinator: hello
	tWelcome                          // coordinator → role: welcome
	tChunkReq                         // learner → coordinator: chunkReq
	tChunk                            // coordinator → learner: chunkReply
	tComplete                         // learner → coordinator: data.Chunk
	tProgress                         // learner → coordinator: progress (also the heartbeat)
	tEpoch                            // evaluator → coordinator: epochResult
	tEvict                            // coordinator → shard server: member
	tLost                             // shard server → coordinator: member
	tFinish                           // coordinator → shard server: (no data)
	tFinal                            // shard server → coordinator: ps.ServerStats
	tStop                             // coordinator → role: stop
	tFail                             // role → coordinator: failure
)

// Role names a process's part in a job.
type Role string

// The roles.
const (
	RoleCoordinator Role = "coordinator"
	RoleServer      Role = "server"
	RoleLearner     Role = "learner"
	RoleEvaluator   Role = "evaluator"
)

// Process identifies one process of a job, for messages and the report.
type Process struct {
	Rank int    `json:"rank"` // -1 when not launched as a rank
	Role Role   `json:"role"`
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// ID is the learner id, or the shard-server index, of the role.
	ID int `json:"id"`
}

func (p Process) String() string {
	s := fmt.Sprintf("%s %d", p.Role, p.ID)
	if p.Role == RoleEvaluator {
		s = string(p.Role)
	}
	if p.Rank >= 0 {
		s = fmt.Sprintf("rank %d (%s)", p.Rank, s)
	}
	return fmt.Sprintf("%s on %s, pid %d", s, p.Host, p.PID)
}

type hello struct {
	Process  Process  `json:"process"`
	Addr     string   `json:"addr,omitempty"`   // shard server: the address learners dial
	Shards   []int    `json:"shards,omitempty"` // shard server: the shards it runs
	Settings Settings `json:"settings"`
}

type welcome struct {
	Incarnation uint32    `json:"incarnation"` // learner: this life's incarnation
	Addrs       []string  `json:"addrs"`       // per shard: its server's address
	Plan        data.Plan `json:"plan"`
}

type chunkReq struct {
	Wait bool `json:"wait"`
}

type chunkReply struct {
	Chunk data.Chunk `json:"chunk"`
	End   bool       `json:"end,omitempty"`
	Idle  bool       `json:"idle,omitempty"`
}

// progress is a learner's report since its previous one: the mini-batches
// it pushed per epoch and their summed loss. Done marks its last report,
// with its connections' traffic.
type progress struct {
	Epochs      []epochLoss  `json:"epochs,omitempty"`
	Done        bool         `json:"done,omitempty"`
	Traffic     *rdma.Stats  `json:"traffic,omitempty"`
	Connections []Connection `json:"connections,omitempty"` // with Done
}

type epochLoss struct {
	Epoch int     `json:"epoch"` // 0-based
	Steps int64   `json:"steps"`
	Loss  float64 `json:"loss"` // sum over the steps
}

// epochResult reports the weights of an epoch end (Epoch ≥ 1) or the
// final weights (0): first that they were taken (Taken: the coordinator
// notes the time), then their test error (nil without a test set).
type epochResult struct {
	Epoch     int      `json:"epoch"`
	Taken     bool     `json:"taken,omitempty"`
	TestError *float64 `json:"test_error,omitempty"`
}

type member struct {
	Learner     uint32 `json:"learner"`
	Incarnation uint32 `json:"incarnation"`
}

type stop struct {
	Err string `json:"err,omitempty"` // the job failed: why
}

type failure struct {
	Err string `json:"err"`
}

// Settings are the flags that define a job, by flag name (without the
// dashes) and value: every process of a job must run with the same ones,
// which the coordinator checks at rendezvous.
type Settings map[string]string

// diff returns a description of the first settings that differ, naming
// the flags, or "".
func (s Settings) diff(other Settings) string {
	for k, v := range s {
		if w, ok := other[k]; !ok || w != v {
			return fmt.Sprintf("--%s %q, the coordinator has %q", k, w, v)
		}
	}
	for k, w := range other {
		if _, ok := s[k]; !ok {
			return fmt.Sprintf("--%s %q, which the coordinator does not set", k, w)
		}
	}
	return ""
}

// ctrl is one control connection: Send is safe for concurrent use, Recv
// is used by one goroutine.
type ctrl struct {
	conn rdma.Conn
	mu   sync.Mutex
}

// send sends message t with v as its JSON (v nil: no data).
func (c *ctrl) send(ctx context.Context, t rdma.Type, v any) error {
	m := rdma.NewMsg(0)
	m.Type = t
	if v != nil {
		b, err := json.Marshal(v)
		if err != nil {
			m.Release()
			return err
		}
		m.Data = append(m.Data, b...)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn.Send(ctx, m)
}

// recv receives the next message: its type and data (copied).
func (c *ctrl) recv(ctx context.Context) (rdma.Type, []byte, error) {
	m, err := c.conn.Recv(ctx)
	if err != nil {
		return 0, nil, err
	}
	defer m.Release()
	if m.Type == rdma.TypeError {
		return m.Type, nil, m.Err()
	}
	return m.Type, append([]byte(nil), m.Data...), nil
}

// decode unmarshals the data of a message of type t into v.
func decode(t rdma.Type, b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: control message %#x: %v", ErrProtocol, t, err)
	}
	return nil
}

// Errors of the roles; test with errors.Is.
var (
	// ErrProtocol: a peer sent a control message that makes no sense here.
	ErrProtocol = errors.New("control protocol error")
	// ErrRendezvous: the job's processes did not all arrive, or do not
	// agree (settings, roles, addresses).
	ErrRendezvous = errors.New("rendezvous failed")
	// ErrJobFailed: the coordinator stopped the job because of a failure
	// elsewhere.
	ErrJobFailed = errors.New("job failed")
)

// evaluatorID is the learner id of an evaluator's parameter-server
// requests: outside every roster, so it binds no identity.
const evaluatorID = 1<<32 - 1

// checkAdvertised refuses a loopback address advertised by a process that
// is not on the coordinator's host (its control connection comes from
// another address): nobody else could reach it.
func checkAdvertised(addr, from string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil // not an IP transport (in-memory addresses)
	}
	fromHost, _, err := net.SplitHostPort(from)
	if err != nil {
		return nil
	}
	if isLoopback(host) && !isLoopback(fromHost) {
		return fmt.Errorf("it advertises the loopback address %s, but it connected from %s: other hosts cannot reach a loopback address (listen on an address of this host, e.g. --listen %s:0)", addr, from, fromHost)
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
