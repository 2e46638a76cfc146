package data

import "github.com/softsync/softsync/rdma/errcode"

// The codes of the data sets', the images' and the chunk dispatch's
// sentinels, for errors that cross processes (package errcode;
// docs/wire.md lists every code).
func init() {
	errcode.Register("data.config", ErrConfig)
	errcode.Register("data.missing", ErrMissing)
	errcode.Register("data.format", ErrFormat)
	errcode.Register("data.truncated", ErrTruncated)
	errcode.Register("data.label", ErrLabel)
	errcode.Register("data.shape", ErrShape)
	errcode.Register("data.image", ErrImage)
	errcode.Register("data.no_images", ErrNoImages)
	errcode.Register("data.end", ErrEnd)
	errcode.Register("data.idle", ErrIdle)
	errcode.Register("data.chunk", ErrChunk)
}
