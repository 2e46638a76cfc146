// Package rdma is softsync's transport: it moves stamped messages between
// the parameter server and its learners, in memory or over TCP (verbs comes
// later behind the same interface). It knows nothing of push, pull or
// protocols: the parameter server gives its message types their meaning.
//
// # Messages
//
// A Msg is a header (Type, Codec, Job, Learner, Shard, Timestamp, Seq), a
// float32 Payload and a small byte payload Data. Types from TypeReserved up
// belong to the transport (TypeError carries an error report for the
// peer); the others to the application. Ownership passes with the pointer:
// after Send the sender must not touch the Msg or its slices; after Recv
// the receiver owns it and either sends it on or Releases it to the pool
// that NewMsg draws from, so that steady traffic allocates nothing.
//
// # Connections
//
// A Network (NewInmem, NewTCP, NewVerbs, or Open by name with a verbs→TCP
// fallback) makes Listeners and Conns. A Conn is ordered and preserves
// message boundaries; Send and Recv are each safe for concurrent use and
// serialized, and proceed independently of each other. The full contract
// is on Conn. Errors are *OpError values naming the peer and wrapping a
// sentinel (ErrClosed, ErrChecksum, ErrWrongJob, ...) or a context error;
// Recoverable says whether the connection survived: a well-framed but bad
// frame (payload checksum, unknown codec, inconsistent length, corrupt
// encoded payload, another job) is skipped and counted in Stats.Dropped,
// and the next Recv returns the next frame; a frame whose extent cannot be
// trusted (bad magic, version, header checksum, over the size limits, a
// truncated stream) ends that connection's receive side, while its send
// side can still report the error to the peer.
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
// CRC32C passes cost a quarter to a third of the throughput.
//
// # Verbs
//
// An RDMA verbs transport implements Network and Conn directly rather than
// a byte stream: pooled Msg payloads can be registered memory regions, the
// header travels as is, and the codecs apply unchanged. NewVerbs reports
// ErrUnsupported in this build, and Open("auto") then falls back to TCP.
//
// # Codecs
//
// The payload is encoded with the codec named in Msg.Codec (ParseCodec
// reads the --compress forms: none, s2, zstd, shuffle+s2, shuffle+zstd,
// fp16, bf16, topk:FRACTION). Lossless codecs restore the payload bit for
// bit; fp16 and bf16 round to nearest even (see half.go for NaN, Inf and
// range); topk sends the largest magnitudes with error feedback, the
// residual kept by the sending connection's Encoder per (Type, Shard)
// stream. Decoding knows the element count from the header and fails on
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
