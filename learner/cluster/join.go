package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/softsync/softsync/rdma"
)

// Member is what every role but the coordinator needs to take part in a
// job: the network, the coordinator's address, who it is and the job's
// settings.
type Member struct {
	Network rdma.Network
	// Job is the job id the network stamps on every message
	// (rdma.Options.Job; 0 means 1).
	Job         uint32
	Coordinator string // the coordinator's address on Network
	Process     Process
	Settings    Settings
	// Rendezvous bounds the wait for the coordinator to answer (0: until
	// ctx ends).
	Rendezvous time.Duration
	Logger     *slog.Logger // nil: no log
}

func (m *Member) log() *slog.Logger {
	if m.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return m.Logger
}

// join dials the coordinator (again and again while nothing listens
// there yet), says hello and waits for the welcome.
func (m *Member) join(ctx context.Context, h hello) (*ctrl, welcome, error) {
	h.Process, h.Settings = m.Process, m.Settings
	if m.Rendezvous > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.Rendezvous)
		defer cancel()
	}
	log := m.log()
	var conn rdma.Conn
	wait, lastLog := 50*time.Millisecond, time.Time{}
	for {
		var err error
		conn, err = m.Network.Dial(ctx, m.Coordinator)
		if err == nil {
			break
		}
		if !errors.Is(err, rdma.ErrRefused) {
			return nil, welcome{}, fmt.Errorf("%s: dial the coordinator at %s: %w", m.Process, m.Coordinator, err)
		}
		if time.Since(lastLog) > 5*time.Second {
			log.Info("waiting for the coordinator", "addr", m.Coordinator, "me", m.Process.String())
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil, welcome{}, fmt.Errorf("%w: %s: the coordinator at %s did not answer: %v", ErrRendezvous, m.Process, m.Coordinator, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
	c := &ctrl{conn: conn}
	if err := c.send(ctx, tHello, h); err != nil {
		conn.Close()
		return nil, welcome{}, fmt.Errorf("%s: hello to the coordinator at %s: %w", m.Process, m.Coordinator, err)
	}
	log.Debug("registered; waiting for the job to start", "coordinator", m.Coordinator, "me", m.Process.String())
	t, b, err := c.recv(ctx)
	var w welcome
	switch {
	case err != nil:
		err = fmt.Errorf("%w: %s: waiting for the coordinator at %s to start the job: %v", ErrRendezvous, m.Process, m.Coordinator, err)
	case t == tStop:
		var s stop
		decode(t, b, &s)
		err = fmt.Errorf("%w: the coordinator refused %s: %s", ErrRendezvous, m.Process, s.Err)
	case t != tWelcome:
		err = fmt.Errorf("%w: %s: message %#x from the coordinator, want a welcome", ErrProtocol, m.Process, t)
	default:
		err = decode(t, b, &w)
	}
	if err != nil {
		conn.Close()
		return nil, welcome{}, err
	}
	return c, w, nil
}

// stopped turns the coordinator's stop message into the role's result:
// nil, or the job's failure.
func stopped(t rdma.Type, b []byte) error {
	var s stop
	if err := decode(t, b, &s); err != nil {
		return err
	}
	if s.Err != "" {
		return fmt.Errorf("%w: %s", ErrJobFailed, s.Err)
	}
	return nil
}
