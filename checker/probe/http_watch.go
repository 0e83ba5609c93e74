package probe

import (
	"errors"
	"io"
)

// The reasons a prober gives when it tells its watcher that the
// connection it keeps to its target was lost (see WatchConn).
const (
	// LostClosed: the peer closed the kept connection (a FIN) while no
	// probe used it.
	LostClosed = "closed"
	// LostReset: the peer reset the kept connection (an RST), or it
	// failed otherwise, while no probe used it.
	LostReset = "reset"
	// LostChannel: a gRPC prober's channel left READY (its connection
	// was closed, reset or went away) while no probe used it.
	LostChannel = "channel"
)

// WatchConn makes p call lost, from a goroutine of its own and holding
// none of its locks, when the peer closes or resets the connection p keeps
// between probes: while no probe uses it (on Linux, where the async loop
// watches kept connections; elsewhere never), or when a probe finds it
// ended before any byte of an answer (then from that probe's goroutine,
// before it dials again: the checker lets that probe's failure, if it
// fails, follow the fast interval). A connection p closes itself (an
// answer with "Connection: close", an unread body, Close) is not
// reported. A second call replaces lost; lost must not block.
func (p *leanProber) WatchConn(lost func(reason string)) {
	p.lost.Store(&lost)
}

// lostInUse tells p's watcher that a probe found the kept connection
// ended by its peer (err) before any byte of an answer.
func (p *leanProber) lostInUse(err error) {
	reason := LostReset
	if errors.Is(err, io.EOF) {
		reason = LostClosed
	}
	p.tellLost(reason)
}

// tellLost tells p's watcher, if any, that the kept connection was lost
// as reason says.
func (p *leanProber) tellLost(reason string) {
	if lost := p.lost.Load(); lost != nil {
		(*lost)(reason)
	}
}

// lostIdle closes c, p's kept connection, which its peer ended as reason
// says, and tells p's watcher. When c is no longer p's idle connection (a
// probe took it meanwhile, or it was being closed), it does nothing: that
// probe sees what became of it.
func (p *leanProber) lostIdle(c *leanConn, reason string) {
	p.mu.Lock()
	idle := p.idle == c && c != nil
	if idle {
		p.setIdle(nil)
	}
	p.mu.Unlock()
	if !idle {
		return
	}
	p.factory.unkeep()
	c.close()
	p.tellLost(reason)
}
