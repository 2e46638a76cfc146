// Package rdma is softsync's transport: it moves stamped messages between
// the parameter server and its learners, in memory, over TCP, through
// shared memory between processes of one host, or over InfiniBand/RoCE
// verbs, behind one interface. It knows nothing of push,
// pull or protocols: the parameter server gives its message types their
// meaning.
//
// # Messages
//
// A Msg is a header (Type, Codec, Job, Learner, Shard, Timestamp, Seq), a
// float32 Payload and a small byte payload Data. Types from TypeReserved up
// belong to the transport (TypeError carries an error report for the
// peer); the others to the application. Ownership passes with the pointer:
// after Send the sender must not touch the Msg or its slices; after Recv
// the receiver owns it and either sends it on or Releases it to the
// allocator it came from, so that steady traffic allocates nothing. The
// package's NewMsg draws from a process-wide pool; a Network's NewMsg from
// the transport's own memory (registered memory for verbs), so that a
// payload computed into it is sent without a copy (registered memory for
// verbs, the process's lend segment for shm, see below). A message may instead borrow its
// payload (Msg.Borrow): Send reads the lender's memory before it returns
// (TCP writes it to the socket from where it lies), and a receiver's
// Placement (Placer) names memory of its own for the payload of the
// frames it expects, which TCP and shm read straight into; the parameter
// server sends gradients and weights this way and receives weights into
// the learner's parameters (docs/wire.md, "Copies of a push and a pull").
//
// # Connections
//
// A Network (NewInmem, NewTCP, NewShm, NewVerbs, NewAuto, or Open by name) makes
// Listeners and Conns. A Conn is ordered and preserves message
// boundaries; Send and Recv are each safe for concurrent use and
// serialized, and proceed independently of each other. The full contract
// is on Conn; Conn.Transport says which transport carries a connection
// and why (what auto chose for that peer). Errors are *OpError values
// naming the peer and wrapping a
// sentinel (ErrClosed, ErrChecksum, ErrWrongJob, ...) or a context error;
// Recoverable says whether the connection survived: a well-framed but bad
// frame (payload checksum, unknown codec, inconsistent length, corrupt
// encoded payload, another job) is skipped and counted in Stats.Dropped,
// and the next Recv returns the next frame; a frame whose extent cannot be
// trusted (bad magic, version, header checksum, over the size limits, a
// truncated stream) ends that connection's receive side, while its send
// side can still report the error to the peer.
//
// # Authentication
//
// With Options.Secret (per job, shared by its processes), every TCP
// and shm connection runs a mutual HMAC-SHA256 challenge–response over the
// secret, the job id and fresh nonces from both ends before any frame is
// read (docs/wire.md, "Handshake"): Dial returns an error matching
// ErrAuth when the server fails to prove itself or closes, and a
// listener hands Accept only authenticated connections. It closes the
// others without a word, counts them (ListenerStats) and reports them to
// Options.OnAuthFailure, so that an accept loop never sees them.
// Handshakes run on the listener's goroutines, each bounded by
// Options.HandshakeTimeout and at most Options.MaxHandshakes at once, so
// that stalled or numerous unauthenticated connections cannot hold up
// other peers or exhaust goroutines and memory. When a connection comes
// and every slot is taken, the listener sheds the connection in its
// handshake that has been silent longest (counting from its connect, or
// from its hello once that arrived): a peer that holds the secret sends
// its hello as it connects and finishes within a round trip, so that
// however many idle or slow connections are held open, it gets in; it is
// shed only if MaxHandshakes other connections connect or send their
// hello while it is in its handshake. Its Dial then fails with an error
// matching ErrHandshakeClosed (and ErrAuth), which is worth retrying
// after a pause. Without a secret, TCP listens only on loopback
// addresses unless Options.Insecure is set (ErrInsecure). Transports
// built on TCP's Dial and Listen inherit the handshake.
//
// # Wire format
//
// Frames are described byte by byte in docs/wire.md: a 52-byte header
// with its own CRC32C, the data, the encoded payload and a CRC32C trailer
// over data and payload. The frame functions (PutHeader, ParseHeader,
// AppendFrame, ParseFrame) are pure functions over []byte; ParseHeader
// checks every size against Limits before anything is allocated. The TCP
// transport only adds sockets: it writes header, data and payload chunks
// with vectored writes straight from the message, and reads payloads
// straight into the received message, checksumming each piece while it is
// in cache. Options.NoPayloadChecksum drops the payload checksum (flag bit
// 0) for links whose own checksums are trusted: on a 2-core loopback the
// CRC32C passes cost a quarter to a third of the throughput. The shm
// transport never checksums payloads (see NewShm).
//
// # Shared memory
//
// The shm transport (NewShm; auto for peers on the same host) moves the
// same frames through two rings, one per direction, in a segment that
// the dialer creates (a memfd sealed against resizing) and passes over a
// unix socket in the abstract namespace, after the handshake
// (docs/wire.md, "Over shared memory"). A payload is copied once on each
// side: into the ring from the message (or the memory it borrows), out
// of it into the received message (or the placed memory), checksummed
// piece by piece; a received message never lies in
// shared memory, and the receiver parses and checks only its own copy.
// A large payload of the network's NewMsg lies in the process's lend
// segment, which the peer maps read-only: it is lent, not copied, the
// ring carrying only its reference, and Send waits until the receiver
// has copied it out (docs/wire.md, "Lent payloads"), or, lent held
// (Msg.BorrowHeld), only until the frame is written.
// The peer is not trusted: every ring index is checked each time it is
// read (ErrProtocol when it is out of range), and frames are validated
// as on a stream. An end that waits polls briefly, then sleeps in the
// netpoller on a socket of its own, which the peer wakes once it has
// written (read) the rest of the frame part the end waits for, and
// which reports the peer's end closed, so that a peer killed in the
// middle of a frame ends the connection with a truncated frame, never a
// hang. Auto verifies that a peer is on the same host, and in the same
// network namespace, by having it connect to such a socket with a nonce
// sent over the TCP connection; any failure keeps the connection on
// verbs or TCP, with the reason.
//
// # Verbs
//
// The verbs transport (NewVerbs; NewAuto for auto) moves the same frames
// over Reliable Connected queue pairs (docs/rdma.md; the byte layout in
// docs/wire.md): small frames by SEND into receive buffers posted ahead,
// under credit-based flow control, larger ones (gradients, weights) by
// RDMA WRITE WITH IMMEDIATE into buffers the receiver advertised, the
// frame header written with the payload. Memory is registered in a few
// large regions carved by a pool (never per message), after checking the
// locked-memory limit; a payload from the network's NewMsg, or lent
// (Msg.Borrow) from memory of it that the lender keeps (a learner's
// gradient), is written from where it lies, Send waiting for the write
// to complete when the memory is lent; a large one received stays where
// it was written. Connections are set up over a TCP connection of the TCP
// transport (its Dial and Listen, with its options), which carries the
// queue pair details, a probe, and the close. Every failure (no verbs in
// this build, no libibverbs, no kernel support, no device or active port,
// the memlock limit, a failed registration, a queue pair or completion
// error) is an error value: auto connections stay on TCP and say why
// (Conn.Transport, Options.OnConnect), verbs ones fail with an error
// matching ErrUnsupported, ErrMemlock or ErrVerbs, and a connection whose
// queue pair fails later is closed on both ends. The verbs operations sit
// behind a small interface (rdma/internal/verbs) with two
// implementations: libibverbs through cgo (build tag verbs), and an
// in-process emulation (NewEmulation) that the tests, the conformance
// suite included, run the whole protocol over on hosts without RDMA.
//
// # Codecs
//
// The payload is encoded with the codec named in Msg.Codec (ParseCodec
// reads the --compress forms: none, s2, zstd, shuffle+s2, shuffle+zstd,
// fp16, bf16, topk:FRACTION). Lossless codecs restore the payload bit for
// bit; fp16 and bf16 round to nearest even (see half.go for NaN, Inf and
// range); topk sends the largest magnitudes, with error feedback when the
// message carries a Feedback: the residual of its stream, which the sender
// owns, so that it survives a change of connection (without one, topk
// sends the largest magnitudes of the payload alone). Decoding knows the element count from the header and fails on
// anything that would decode to more or less (no decompression bombs).
// On amd64 the element-wise passes (fp16 and bf16 conversions, byte
// planes) run in assembly, AVX-512 or AVX2 with F16C after the CPU (the
// level isa.Best reports; LimitISA lowers it), bit for bit the same as
// the Go loops used elsewhere or with the purego build tag.
// Stats report raw and wire bytes and codec time per codec, so users see
// whether compression pays: on float32 gradients, lossless codecs save
// little and cost much more CPU time than a fast link.
//
// FirstNonFinite helps a receiver reject NaN or Inf values cheaply.
package rdma
