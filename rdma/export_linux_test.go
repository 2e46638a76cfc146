package rdma

// NewShmRing returns the shm transport dialing connections with rings of
// ring bytes, for tests of wrap-around and of frames many times the ring.
func NewShmRing(opts Options, ring int) (*Shm, error) {
	s, err := NewShm(opts)
	if err == nil {
		s.ring = ring
	}
	return s, err
}
