package rdma

import "github.com/softsync/softsync/rdma/errcode"

// The codes of this package's sentinels, for errors that cross processes
// (package errcode; docs/wire.md lists every code).
func init() {
	errcode.Register("rdma.closed", ErrClosed)
	errcode.Register("rdma.refused", ErrRefused)
	errcode.Register("rdma.unsupported", ErrUnsupported)
	errcode.Register("rdma.auth", ErrAuth)
	errcode.Register("rdma.handshake_closed", ErrHandshakeClosed)
	errcode.Register("rdma.insecure", ErrInsecure)
	errcode.Register("rdma.verbs", ErrVerbs)
	errcode.Register("rdma.protocol", ErrProtocol)
	errcode.Register("rdma.memlock", ErrMemlock)
	errcode.Register("rdma.bad_magic", ErrBadMagic)
	errcode.Register("rdma.bad_version", ErrBadVersion)
	errcode.Register("rdma.header_checksum", ErrHeaderChecksum)
	errcode.Register("rdma.frame_too_large", ErrFrameTooLarge)
	errcode.Register("rdma.truncated", ErrTruncated)
	errcode.Register("rdma.checksum", ErrChecksum)
	errcode.Register("rdma.unknown_codec", ErrUnknownCodec)
	errcode.Register("rdma.bad_codec_param", ErrBadCodecParam)
	errcode.Register("rdma.bad_length", ErrBadLength)
	errcode.Register("rdma.corrupt", ErrCorrupt)
	errcode.Register("rdma.wrong_job", ErrWrongJob)
	errcode.Register("rdma.remote", ErrRemote)
}
