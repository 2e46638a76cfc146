package ps

import (
	"context"
	"errors"
	"io"
	"sync"
)

// pipe is an in-memory Conn pair for the runtime tests: buffered channels
// of frames, no copies (the Conn contract hands ownership over).
type pipe struct {
	in, out      chan *Frame
	closed, peer chan struct{}
	once         *sync.Once
}

var errPipeClosed = errors.New("pipe closed")

func newPipe() (a, b *pipe) {
	ab, ba := make(chan *Frame, 16), make(chan *Frame, 16)
	ca, cb := make(chan struct{}), make(chan struct{})
	return &pipe{in: ba, out: ab, closed: ca, peer: cb, once: new(sync.Once)},
		&pipe{in: ab, out: ba, closed: cb, peer: ca, once: new(sync.Once)}
}

func (p *pipe) Send(ctx context.Context, f *Frame) error {
	select {
	case <-p.closed:
		return errPipeClosed
	case <-p.peer:
		return errPipeClosed
	default:
	}
	select {
	case p.out <- f:
		return nil
	case <-p.closed:
		return errPipeClosed
	case <-p.peer:
		return errPipeClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *pipe) Recv(ctx context.Context) (*Frame, error) {
	select {
	case f := <-p.in:
		return f, nil
	case <-p.closed:
		return nil, errPipeClosed
	case <-p.peer:
		select {
		case f := <-p.in:
			return f, nil
		default:
			return nil, io.EOF
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *pipe) Close() error {
	p.once.Do(func() { close(p.closed) })
	return nil
}

type pipeListener struct {
	conns  chan Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept(ctx context.Context) (Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, errPipeClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) dial() Conn {
	a, b := newPipe()
	select {
	case l.conns <- b:
	case <-l.closed:
		b.Close()
	}
	return a
}
