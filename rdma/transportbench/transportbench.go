package transportbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/internal/synth"
)

// Config selects what Run measures. Zero fields take the defaults noted.
type Config struct {
	// Transports: "inmem", "tcp", "tcp-nocrc", "shm",
	// "verbs" (the host's RDMA device), "verbs-emu" (the verbs transport
	// over its in-process emulation: rows marked Emulated) or "auto";
	// default {"inmem", "tcp", "shm"}.
	Transports []string
	Codecs     []rdma.Codec // default: every codec, topk at 0.01
	Sizes      []int        // gradient bytes, multiples of 4; default 1, 4 and 16 MiB
	// MinTime is the timed duration per row (default 1 s); at least
	// MinRounds rounds are timed (default 3), after Warmup untimed ones
	// (default 2).
	MinTime   time.Duration
	MinRounds int
	Warmup    int
	Seed      uint64
	Baseline  bool // add "tcp-raw" and "memcpy" rows per size
	// OnConnect is passed to the networks (rdma.Options.OnConnect): it
	// sees which transport each verbs or auto connection uses, and why.
	OnConnect func(local, remote string, t rdma.TransportInfo, err error)
}

// Row is one measurement.
type Row struct {
	Transport string `json:"transport"`
	// Conn is the transport the connection used (for auto, what it
	// chose), Reason why, and Emulated marks verbs over the in-process
	// emulation, whose figures say nothing about RDMA hardware.
	Conn      string  `json:"conn"`
	Reason    string  `json:"reason,omitempty"`
	Emulated  bool    `json:"emulated,omitempty"`
	Codec     string  `json:"codec"`
	Bytes     int     `json:"bytes"`
	Rounds    int     `json:"rounds"`
	RoundSec  float64 `json:"round_s"`   // median time of one push+pull
	MeanSec   float64 `json:"mean_s"`    // mean time of one push+pull
	GBps      float64 `json:"gbps"`      // 2·Bytes/RoundSec/1e9, from the median round
	GBpsMean  float64 `json:"gbps_mean"` // 2·Bytes/MeanSec/1e9
	Ratio     float64 `json:"ratio"`     // wire bytes / raw bytes, both directions
	WireBytes float64 `json:"wire_bytes"`
	// EncodeSec and DecodeSec are the codec time per round, both
	// directions summed (zero for none).
	EncodeSec float64 `json:"encode_s"`
	DecodeSec float64 `json:"decode_s"`
}

func (c *Config) defaults() error {
	if len(c.Transports) == 0 {
		c.Transports = []string{"inmem", "tcp", "shm"}
	}
	if len(c.Codecs) == 0 {
		for _, name := range []string{"none", "s2", "zstd", "shuffle+s2", "shuffle+zstd", "fp16", "bf16", "topk:0.01"} {
			codec, _ := rdma.ParseCodec(name)
			c.Codecs = append(c.Codecs, codec)
		}
	}
	if len(c.Sizes) == 0 {
		c.Sizes = []int{1 << 20, 4 << 20, 16 << 20}
	}
	if c.MinTime == 0 {
		c.MinTime = time.Second
	}
	if c.MinRounds == 0 {
		c.MinRounds = 3
	}
	if c.Warmup == 0 {
		c.Warmup = 2
	}
	for _, s := range c.Sizes {
		if s <= 0 || s%4 != 0 {
			return fmt.Errorf("transportbench: size %d is not a positive multiple of 4", s)
		}
	}
	for _, t := range c.Transports {
		if _, _, err := parseTransport(t); err != nil {
			return err
		}
	}
	for _, codec := range c.Codecs {
		if err := codec.Validate(); err != nil {
			return fmt.Errorf("transportbench: %w", err)
		}
	}
	if c.MinTime < 0 || c.MinRounds < 0 || c.Warmup < 0 {
		return errors.New("transportbench: negative MinTime, MinRounds or Warmup")
	}
	return nil
}

// Run measures every transport × codec × size (and the baseline) and
// returns the rows in that order; progress, if not nil, sees each row as
// it is done.
func Run(ctx context.Context, cfg Config, progress func(Row)) ([]Row, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	var rows []Row
	emit := func(r Row) {
		rows = append(rows, r)
		if progress != nil {
			progress(r)
		}
	}
	for _, size := range cfg.Sizes {
		if cfg.Baseline {
			for _, base := range []func(context.Context, *Config, int) (Row, error){rawTCP, rawCopy} {
				r, err := base(ctx, &cfg, size)
				if err != nil {
					return rows, err
				}
				emit(r)
			}
		}
		for _, tr := range cfg.Transports {
			for _, codec := range cfg.Codecs {
				r, err := measure(ctx, &cfg, tr, codec, size)
				if err != nil {
					return rows, err
				}
				emit(r)
			}
		}
	}
	return rows, nil
}

func measure(ctx context.Context, cfg *Config, transport string, codec rdma.Codec, size int) (Row, error) {
	s, err := open(ctx, transport, codec, size, cfg.Seed, cfg.OnConnect)
	if err != nil {
		return Row{}, err
	}
	defer s.Close()
	for range cfg.Warmup {
		if _, err := s.Round(ctx); err != nil {
			return Row{}, err
		}
	}
	c0, s0 := s.client.Stats(), s.server.Stats()
	row, err := timeRounds(cfg, func() (time.Duration, error) { return s.Round(ctx) })
	if err != nil {
		return Row{}, err
	}
	c1, s1 := s.client.Stats(), s.server.Stats()
	// Bytes come from the client alone (what it sent and what it received
	// before each round ended), so they are exact; the server's codec time
	// may lag by the message it is just finishing.
	wire := c1.Sent[codec.ID].Sub(c0.Sent[codec.ID])
	wire.Add(c1.Recv[codec.ID].Sub(c0.Recv[codec.ID]))
	enc := c1.Sent[codec.ID].Time - c0.Sent[codec.ID].Time + s1.Sent[codec.ID].Time - s0.Sent[codec.ID].Time
	dec := c1.Recv[codec.ID].Time - c0.Recv[codec.ID].Time + s1.Recv[codec.ID].Time - s0.Recv[codec.ID].Time
	n := float64(row.Rounds)
	row.Transport, row.Codec, row.Bytes = transport, codec.String(), size
	ti := s.client.Transport()
	row.Conn, row.Reason, row.Emulated = ti.Name, ti.Reason, ti.Emulated
	row.GBps, row.GBpsMean = 2*float64(size)/row.RoundSec/1e9, 2*float64(size)/row.MeanSec/1e9
	row.Ratio, row.WireBytes = wire.Ratio(), float64(wire.WireBytes)/n
	row.EncodeSec, row.DecodeSec = enc.Seconds()/n, dec.Seconds()/n
	return row, nil
}

// timeRounds times rounds until MinTime has passed and MinRounds are done
// and returns their count, median and mean time.
func timeRounds(cfg *Config, round func() (time.Duration, error)) (Row, error) {
	var times []time.Duration
	var total time.Duration
	for len(times) < cfg.MinRounds || total < cfg.MinTime {
		d, err := round()
		if err != nil {
			return Row{}, err
		}
		times = append(times, d)
		total += d
	}
	slices.Sort(times)
	n := len(times)
	median := (times[(n-1)/2] + times[n/2]) / 2
	return Row{Rounds: n, RoundSec: median.Seconds(), MeanSec: total.Seconds() / float64(n)}, nil
}

// Session is one client connection to an echo server, ready for rounds.
type Session struct {
	client, server rdma.Conn
	codec          rdma.Codec
	grad           []float32 // refill source for lossy codecs
	msg            *rdma.Msg
	fb             rdma.Feedback // the pushed stream's topk residual
	done           chan error
}

// Open starts an echo server on transport ("inmem"; "tcp" on loopback;
// "tcp-nocrc": TCP with Options.NoPayloadChecksum; "shm"; "verbs",
// "verbs-emu", "auto": see Config.Transports) and
// connects a client that pushes size bytes per round with codec, from a
// message of the network's allocator.
func Open(ctx context.Context, transport string, codec rdma.Codec, size int, seed uint64) (*Session, error) {
	return open(ctx, transport, codec, size, seed, nil)
}

func open(ctx context.Context, transport string, codec rdma.Codec, size int, seed uint64,
	onConnect func(string, string, rdma.TransportInfo, error)) (*Session, error) {
	kind, opts, err := parseTransport(transport)
	if err != nil {
		return nil, err
	}
	opts.OnConnect = onConnect
	opts.MaxElems = uint32(max(size/4, 1))
	n, err := rdma.Open(kind, opts)
	if err != nil {
		if kind == "verbs" && errors.Is(err, rdma.ErrUnsupported) {
			err = fmt.Errorf("%w (verbs-emu runs the verbs transport over its in-process emulation)", err)
		}
		return nil, err
	}
	addr := ""
	if kind != "inmem" && kind != "shm" {
		addr = "127.0.0.1:0"
	}
	ln, err := n.Listen(addr)
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	accepted := make(chan rdma.Conn, 1)
	go func() {
		c, _ := ln.Accept(ctx)
		accepted <- c
	}()
	client, err := n.Dial(ctx, ln.Addr())
	if err != nil {
		return nil, err
	}
	server := <-accepted
	if server == nil {
		client.Close()
		return nil, fmt.Errorf("transportbench: accept on %s failed", transport)
	}
	s := &Session{client: client, server: server, codec: codec, done: make(chan error, 1)}
	s.grad = synth.Gradient(make([]float32, size/4), 1e-3, seed)
	s.msg = n.NewMsg(size / 4)
	copy(s.msg.Payload, s.grad)
	go func() { s.done <- echo(server, codec) }()
	return s, nil
}

// TransportNames lists the transports Open accepts.
func TransportNames() []string {
	return []string{"inmem", "tcp", "tcp-nocrc", "shm", "verbs", "verbs-emu", "auto"}
}

// parseTransport splits a transport name into the network kind and
// options.
func parseTransport(name string) (kind string, opts rdma.Options, err error) {
	if slices.Contains(rdma.Kinds(), name) {
		return name, opts, nil
	}
	switch name {
	case "tcp-nocrc":
		opts.NoPayloadChecksum = true
		return "tcp", opts, nil
	case "verbs-emu":
		opts.Verbs.Emulation = rdma.NewEmulation()
		return "verbs", opts, nil
	}
	return "", opts, fmt.Errorf("transportbench: unknown transport %q (%s)", name, strings.Join(TransportNames(), ", "))
}

// echo replies to every message with itself until the connection ends;
// a topk reply stream has its own error feedback.
func echo(c rdma.Conn, codec rdma.Codec) error {
	var fb rdma.Feedback
	for {
		m, err := c.Recv(context.Background())
		if err != nil {
			if errors.Is(err, rdma.ErrClosed) {
				return nil
			}
			return err
		}
		m.Codec, m.Feedback = codec, &fb
		if err := c.Send(context.Background(), m); err != nil {
			return err
		}
	}
}

// Round pushes the payload and waits for the reply, returning the time
// taken (the refill of a lossy codec's payload is not timed).
func (s *Session) Round(ctx context.Context) (time.Duration, error) {
	m := s.msg
	s.msg = nil
	if m == nil {
		return 0, errors.New("transportbench: session broken by an earlier error")
	}
	if !s.codec.ID.Lossless() {
		copy(m.Payload, s.grad)
	}
	m.Codec, m.Feedback = s.codec, &s.fb
	start := time.Now()
	if err := s.client.Send(ctx, m); err != nil {
		return 0, err
	}
	r, err := s.client.Recv(ctx)
	if err != nil {
		return 0, err
	}
	d := time.Since(start)
	s.msg = r
	return d, nil
}

// Stats returns the client's and the server's connection counters.
func (s *Session) Stats() (client, server rdma.Stats) { return s.client.Stats(), s.server.Stats() }

// Close ends the session and its server.
func (s *Session) Close() error {
	s.client.Close()
	err := <-s.done
	s.server.Close()
	if s.msg != nil {
		s.msg.Release()
		s.msg = nil
	}
	return err
}

// rawTCP measures the same round trip over a plain loopback socket: no
// framing, checksum or codec.
func rawTCP(ctx context.Context, cfg *Config, size int) (Row, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Row{}, err
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		buf := make([]byte, size)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				done <- nil
				return
			}
			if _, err := c.Write(buf); err != nil {
				done <- err
				return
			}
		}
	}()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		return Row{}, err
	}
	buf := make([]byte, size)
	round := func() (time.Duration, error) {
		start := time.Now()
		if _, err := c.Write(buf); err != nil {
			return 0, err
		}
		_, err := io.ReadFull(c, buf)
		return time.Since(start), err
	}
	for range cfg.Warmup {
		if _, err := round(); err != nil {
			c.Close()
			return Row{}, err
		}
	}
	row, err := timeRounds(cfg, round)
	c.Close()
	if serr := <-done; err == nil {
		err = serr
	}
	if err != nil {
		return Row{}, err
	}
	return baselineRow(row, "tcp-raw", "tcp", size), nil
}

// rawCopy measures the copies the shm transport makes, with nothing
// else: per round, the pushed bytes are copied into a buffer of a shm
// ring's size and out of it, piece by piece, and the pulled bytes the
// same way back, all on one goroutine. It is the ceiling of a transport
// that copies twice per direction, on one core at a time.
func rawCopy(_ context.Context, cfg *Config, size int) (Row, error) {
	const ring, piece = 2 << 20, 128 << 10
	a, b, bounce := make([]byte, size), make([]byte, size), make([]byte, ring)
	through := func(dst, src []byte) {
		for off := 0; off < len(src); off += piece {
			n := min(piece, len(src)-off)
			at := off % ring
			copy(bounce[at:at+n], src[off:off+n])
			copy(dst[off:off+n], bounce[at:at+n])
		}
	}
	round := func() (time.Duration, error) {
		start := time.Now()
		through(b, a)
		through(a, b)
		return time.Since(start), nil
	}
	for range cfg.Warmup {
		round()
	}
	row, err := timeRounds(cfg, round)
	if err != nil {
		return Row{}, err
	}
	return baselineRow(row, "memcpy", "memcpy", size), nil
}

// baselineRow completes the row of a baseline: size bytes each way per
// round, no codec.
func baselineRow(row Row, name, conn string, size int) Row {
	row.Transport, row.Conn, row.Codec, row.Bytes = name, conn, "-", size
	row.GBps, row.GBpsMean = 2*float64(size)/row.RoundSec/1e9, 2*float64(size)/row.MeanSec/1e9
	row.Ratio, row.WireBytes = 1, float64(2*size)
	return row
}
