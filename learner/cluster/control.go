package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/softsync/softsync/learner/data"
	"github.com/softsync/softsync/ps"
	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/errcode"
)

// The control protocol: every role keeps one connection to the
// coordinator over the job's rdma.Network, and exchanges small messages
// whose rdma type is one of the values below (the application range, above
// the parameter server's) and whose Data is the JSON of the struct named
// beside it. A connection's first message is a hello. docs/cluster.md
// lists them for readers of captures.
const (
	tHello          rdma.Type = 0x20 + iota // any role → coordinator: hello
	tWelcome                                // coordinator → role: welcome
	tChunkReq                               // learner → coordinator: chunkReq
	tChunk                                  // coordinator → learner: chunkReply
	tComplete                               // learner → coordinator: data.Chunk
	tProgress                               // learner → coordinator: progress (also the heartbeat)
	tEpoch                                  // evaluator → coordinator: epochResult
	tEvict                                  // coordinator → shard server: member
	tLost                                   // shard server → coordinator: member
	tFinish                                 // coordinator → shard server: (no data)
	tFinal                                  // shard server → coordinator: ps.ServerStats
	tStop                                   // coordinator → role: stop
	tFail                                   // role → coordinator: failure
	tWhere                                  // learner, evaluator → coordinator: where (a shard server's address, after its connection failed)
	tAddr                                   // coordinator → learner, evaluator: addr
	tInterrupt                              // coordinator → evaluator: (no data) measure the weights as they are
	tStats                                  // coordinator → shard server: (no data) report your counters now
	tServerStats                            // shard server → coordinator: ps.ServerStats (answers tStats)
	tCheckpoint                             // coordinator → shard server: ckptOrder
	tCheckpointed                           // shard server → coordinator: ckptReport
	tCheckpointReq                          // shard server → coordinator: (no data) checkpoint now, I am stopping
	tCheckpointDone                         // coordinator → shard server: (no data) the checkpoint it asked for is over
	tPart                                   // either way: the next ctrlPart bytes of a message too large for one frame
	tConsumedReq                            // coordinator → shard server: (no data) what have your shards consumed?
	tConsumed                               // shard server → coordinator: consumed (answers tConsumedReq)
)

// A control message whose JSON is longer than ctrlPart bytes travels as
// parts: frames of type tPart carrying ctrlPart bytes each, then a frame
// of the message's own type with the rest. The network must carry frames
// of ctrlPart bytes of data (rdma.Options.MaxData, 1 MiB by default), and
// a message is at most maxControl bytes in all, which bounds what a peer
// can make the receiver hold.
const (
	ctrlPart   = 64 << 10
	maxControl = 64 << 20
)

// MaxShards is the most shards a job may have (Config.Shards); a job of
// many learners may have fewer (MaxShardsFor).
const MaxShards = 2048

// MaxShardsFor returns the most shards a job of learners learners may
// have, so that every control message fits in maxControl bytes. The
// largest grows with the shards of one server: the counters of a shard
// server that runs them all (a job in one process), ps.ServerStats in
// tFinal and tServerStats, at most shardStatsBytes a shard (every counter
// at its largest, the staleness histogram full) and learnerStatsBytes
// more a shard for each learner (its refused gradients). That is 45 MB
// for 2048 shards of one learner; beyond 487 learners it takes fewer
// than 2048 shards to reach maxControl. TestControlMessagesFit builds the
// largest of each message.
func MaxShardsFor(learners int) int {
	return min(MaxShards, maxControl/(shardStatsBytes+learnerStatsBytes*max(learners, 1)))
}

const shardStatsBytes, learnerStatsBytes = 22 << 10, 21

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
	// Rejoin: the process took part in this job under a coordinator
	// whose connection it lost without being told the job's end (the
	// coordinator died, or the connection): it goes on where it was.
	Rejoin bool `json:"rejoin,omitempty"`
	// Shard server: per shard (in the order of Shards), the mini-batches
	// whose gradients the shard has consumed (ps.Server.Consumed; ids of
	// data.Plan.ID); nil when unknown. Final: its final counters, once
	// its shards are final.
	Consumed [][]ps.Interval `json:"consumed,omitempty"`
	Final    *ps.ServerStats `json:"final,omitempty"`
	// Shard server: per learner id, the latest incarnation its shards
	// have heard from (or restored), so that a coordinator that was
	// restarted never hands that incarnation to a new life.
	Incarnations []uint32 `json:"incarnations,omitempty"`
	// Learner, Rejoin: the incarnation it lives, and the chunks it holds
	// with the mini-batches of each already delivered.
	Incarnation uint32         `json:"incarnation,omitempty"`
	Held        []data.Holding `json:"held,omitempty"`
	// Learner, Rejoin: the coordinator it lost had told it the end of
	// the data (the data was done: every shard server told to finish),
	// so that a coordinator restarted since gives up what a shard lacks
	// once no learner is left to push it again.
	Ended bool `json:"ended,omitempty"`
}

type welcome struct {
	Incarnation uint32    `json:"incarnation"` // learner: this life's incarnation
	Addrs       []string  `json:"addrs"`       // per shard: its server's address
	Plan        data.Plan `json:"plan"`
	FirstEpoch  int       `json:"first_epoch"` // evaluator: the first epoch end to measure (a resumed job's)
	// Returning: a shard server that replaces an earlier life of its own
	// in a job that has started.
	Returning bool `json:"returning,omitempty"`
	// Norm (learner, evaluator): the job's input normalisation, which
	// the coordinator decided (CoordinatorConfig.norm).
	Norm *inputNorm `json:"normalizer,omitempty"`
}

// consumed is, per shard of a server (in the order of its shards), the
// mini-batches the shard has consumed (ps.Server.Consumed).
type consumed struct {
	Shards [][]ps.Interval `json:"shards"`
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
	Epochs []epochLoss `json:"epochs,omitempty"`
	// Delivered: chunks of which more mini-batches reached every shard
	// since the last report, with the count delivered so far.
	Delivered   []delivered  `json:"delivered,omitempty"`
	Done        bool         `json:"done,omitempty"`
	Traffic     *rdma.Stats  `json:"traffic,omitempty"`
	Connections []Connection `json:"connections,omitempty"` // with Done
	Pushes      []uint64     `json:"pushes,omitempty"`      // per shard, gradients pushed so far (ps.Client.Pushes)
	// DataWait is the time the learner waited for its data since its
	// previous report (seconds, data.Loader.Waited); Skipped the bad
	// images its process found since then (data.Set.Skips).
	DataWait float64     `json:"data_wait,omitempty"`
	Skipped  []data.Skip `json:"skipped,omitempty"`
}

type delivered struct {
	Chunk data.Chunk `json:"chunk"`
	N     int        `json:"n"`
}

type epochLoss struct {
	Epoch int     `json:"epoch"` // 0-based
	Steps int64   `json:"steps"`
	Loss  float64 `json:"loss"` // sum over the steps
}

// epochResult reports the weights of an epoch end (Epoch ≥ 1), the final
// weights (0) or, in an interrupted job, the weights reached (−1): first
// that they were taken (Taken: the coordinator notes the time), then
// their top-1 and top-5 test errors (nil without a test set).
type epochResult struct {
	Epoch         int      `json:"epoch"`
	Taken         bool     `json:"taken,omitempty"`
	TestError     *float64 `json:"test_error,omitempty"`
	TestErrorTop5 *float64 `json:"test_error_top5,omitempty"`
	// Skipped are the bad images of the test set found since the
	// evaluator's previous report.
	Skipped []data.Skip `json:"skipped,omitempty"`
}

type member struct {
	Learner     uint32 `json:"learner"`
	Incarnation uint32 `json:"incarnation"`
}

type where struct {
	Shard int `json:"shard"`
}

type addr struct {
	Shard int    `json:"shard"`
	Addr  string `json:"addr"`
}

// stop: the job is over. Its error (err and err_codes, package errcode:
// its text and the codes of the sentinels it matches) says why it
// failed; none: it ended well.
type stop struct {
	errcode.Wire
	Interrupted bool `json:"interrupted,omitempty"` // the job was interrupted: stop now, report what was done
}

// failure: the role failed with its error (err and err_codes).
type failure struct {
	errcode.Wire
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

// send sends message t with v as its JSON (v nil: no data), in parts if
// it is longer than ctrlPart bytes.
func (c *ctrl) send(ctx context.Context, t rdma.Type, v any) error {
	b, err := ctrlData(t, v)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(b) > ctrlPart {
		if err := c.sendFrame(ctx, tPart, b[:ctrlPart]); err != nil {
			return err
		}
		b = b[ctrlPart:]
	}
	return c.sendFrame(ctx, t, b)
}

// ctrlData returns the data of control message t with v as its JSON
// (v nil: none), at most maxControl bytes.
func ctrlData(t rdma.Type, v any) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if len(b) > maxControl {
		return nil, fmt.Errorf("%w: control message %#x of %d bytes, more than %d", ErrProtocol, t, len(b), maxControl)
	}
	return b, nil
}

// sendFrame sends one frame of type t with data b; c.mu is held.
func (c *ctrl) sendFrame(ctx context.Context, t rdma.Type, b []byte) error {
	m := rdma.NewMsg(0)
	m.Type = t
	m.Data = append(m.Data, b...)
	if err := c.conn.Send(ctx, m); err != nil {
		return fmt.Errorf("control message %#x: %w", t, err)
	}
	return nil
}

// recv receives the next message, joining its parts: its type and data
// (copied).
func (c *ctrl) recv(ctx context.Context) (rdma.Type, []byte, error) {
	var data []byte
	for {
		m, err := c.conn.Recv(ctx)
		if err != nil {
			return 0, nil, err
		}
		t := m.Type
		if t == rdma.TypeError {
			err := m.Err()
			m.Release()
			return t, nil, err
		}
		if len(data)+len(m.Data) > maxControl {
			m.Release()
			return 0, nil, fmt.Errorf("%w: a control message of more than %d bytes", ErrProtocol, maxControl)
		}
		data = append(data, m.Data...)
		m.Release()
		if t != tPart {
			return t, data, nil
		}
	}
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
	// ErrInterrupted: the job was interrupted (Coordinator.Interrupt,
	// Job.Interrupt); the result so far comes with it.
	ErrInterrupted = errors.New("job interrupted")
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

// decodeCtrl decodes the data of a message a role sends the coordinator
// into its struct (nil for a message without data, or of a type no role
// sends the coordinator: the coordinator refuses those by type).
func decodeCtrl(t rdma.Type, b []byte) (any, error) {
	var v any
	switch t {
	case tHello:
		v = new(hello)
	case tChunkReq:
		v = new(chunkReq)
	case tComplete:
		v = new(data.Chunk)
	case tProgress:
		v = new(progress)
	case tEpoch:
		v = new(epochResult)
	case tLost:
		v = new(member)
	case tFinal, tServerStats:
		v = new(ps.ServerStats)
	case tFail:
		v = new(failure)
	case tWhere:
		v = new(where)
	case tCheckpointed:
		v = new(ckptReport)
	case tConsumed:
		v = new(consumed)
	default:
		return nil, nil
	}
	return v, decode(t, b, v)
}

// why returns the reason of a stop that refuses a process: its error, or
// one that says none was given.
func (s *stop) why() error {
	if err := s.Err(); err != nil {
		return err
	}
	return errors.New("no reason given")
}

// jobFailed returns err, the job's failure as the coordinator reported
// it, as a role's error: matching ErrJobFailed (as it does already when
// the coordinator failed the job).
func jobFailed(err error) error {
	if errors.Is(err, ErrJobFailed) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrJobFailed, err)
}
