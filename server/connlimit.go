package server

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
)

// ConnLimits bounds the connections a listener keeps open: at most Max in
// all and at most PerSource from one source IP address. Zero means no
// limit.
type ConnLimits struct {
	Max       int
	PerSource int
}

// ConnLimiter is a net.Listener that closes, at once, each connection past
// its limits, instead of holding it in the kernel's queue as
// golang.org/x/net/netutil.LimitListener does: a client over the limit
// learns it promptly, and one source cannot take every slot. It is safe for
// concurrent use; create it with LimitConns.
type ConnLimiter struct {
	net.Listener
	limits ConnLimits

	mu       sync.Mutex // protects open and bySource
	open     int
	bySource map[string]int

	rejectedMax, rejectedSource atomic.Uint64
}

// LimitConns wraps l with limits.
func LimitConns(l net.Listener, limits ConnLimits) *ConnLimiter {
	return &ConnLimiter{Listener: l, limits: limits, bySource: map[string]int{}}
}

// Accept returns the next connection within the limits, closing every
// connection past them on the way.
func (l *ConnLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := sourceOf(c.RemoteAddr())
		if l.admit(src) {
			return &limitedConn{Conn: c, l: l, src: src}, nil
		}
		c.Close()
	}
}

// admit counts a new connection from src if the limits allow it.
func (l *ConnLimiter) admit(src string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.limits.Max > 0 && l.open >= l.limits.Max:
		l.rejectedMax.Add(1)
		return false
	case l.limits.PerSource > 0 && l.bySource[src] >= l.limits.PerSource:
		l.rejectedSource.Add(1)
		return false
	}
	l.open++
	l.bySource[src]++
	return true
}

func (l *ConnLimiter) release(src string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.bySource[src]--; l.bySource[src] <= 0 {
		delete(l.bySource, src)
	}
}

// Open returns how many accepted connections are open now.
func (l *ConnLimiter) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// Rejected returns how many connections were closed at accept for each
// limit: the total (Max) and the per-source one (PerSource).
func (l *ConnLimiter) Rejected() (max, perSource uint64) {
	return l.rejectedMax.Load(), l.rejectedSource.Load()
}

// limitedConn gives its slot back once, when it is first closed.
type limitedConn struct {
	net.Conn
	l      *ConnLimiter
	src    string
	closed atomic.Bool
}

func (c *limitedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.l.release(c.src)
	}
	return c.Conn.Close()
}

// sourceOf is the IP address of a remote address, or the whole address
// when it has no IP (an in-memory or unix connection).
func sourceOf(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	if a == nil {
		return ""
	}
	return a.String()
}

// ErrConnLimits: a limit is negative.
var ErrConnLimits = errors.New("connection limits must not be negative")

// Validate reports whether the limits are usable.
func (c ConnLimits) Validate() error {
	if c.Max < 0 || c.PerSource < 0 {
		return ErrConnLimits
	}
	return nil
}
