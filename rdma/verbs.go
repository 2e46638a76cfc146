package rdma

// NewVerbs returns the InfiniBand/RoCE verbs transport. This build has
// none: it always returns ErrUnsupported, and Open("auto") falls back to
// TCP.
func NewVerbs(opts Options) (Network, error) {
	if _, err := opts.withDefaults(); err != nil {
		return nil, err
	}
	return nil, &OpError{Op: "open", Peer: "verbs", Err: ErrUnsupported}
}
