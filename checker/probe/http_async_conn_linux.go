//go:build linux

package probe

import (
	"container/heap"
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"
)

// The connections of the asynchronous probes (see http_async_linux.go for
// the loop): registering a kept connection with the epoll instance,
// reading and writing it by its descriptor, and the connections dialAsync
// makes without blocking, handed to Probe's code when the loop cannot
// finish a probe on them.

// asyncConn is a connection registered with the loop.
//
// Its reads and writes use the socket's descriptor directly, without
// net's reference counting: an asynchronous probe owns its connection
// from take to its end, and only the code that ends it closes it, after
// dropping it from the loop's table under the loop's mutex, so the
// descriptor stays open while the probe reads or writes and while the
// loop peeks at an idle one.
//
// A kept connection registered with the loop is no longer a net.Conn: its
// descriptor is taken out of Go's poller (see register), so that the
// kernel wakes one poller per answer, not two, and the connection holds
// none of net's per-connection state. Probe's code makes it a net.Conn
// again when it needs one (attach).
type asyncConn struct {
	loop  *asyncLoop
	id    uint64
	p     *leanProber // whose connection it is; nil for dialAsync's
	c     *leanConn
	fd    int
	probe *asyncProbe // the probe in flight on it; guarded by loop.mu
	dead  bool        // bytes or the end arrived while idle; guarded by loop.mu
	lost  string      // when dead, how the peer ended it (a Lost* reason), "" if it did not; guarded by loop.mu

	// The two ends of a kept connection, as net named them when it was
	// dialled: a reset connection no longer tells its peer.
	local, remote netip.AddrPort
}

// unasked reports whether bytes, or the end of the connection, wait on an
// idle connection (an event without either is a late one for an answer
// already read), and, when the peer has ended the connection, how: a
// LostClosed or LostReset reason, "" while it has not (bytes came). The
// loop's mutex is held: the descriptor is open.
func (ac *asyncConn) unasked() (unasked bool, lost string) {
	var b [1]byte
	n, err := rawPeek(ac.fd, b[:])
	switch {
	case err == syscall.EAGAIN:
		return false, ""
	case err != nil:
		return true, LostReset
	case n == 0:
		return true, LostClosed
	}
	return true, ""
}

// register registers p's connection c with the loop, once, and takes its
// descriptor out of Go's poller: a duplicate of it is registered, and the
// net.Conn closed, which leaves the socket open on the duplicate. On an
// error c is left as it was.
func (l *asyncLoop) register(p *leanProber, c *leanConn) (*asyncConn, error) {
	if c.async != nil {
		return c.async, nil
	}
	sc, ok := c.conn.(syscall.Conn)
	if !ok {
		return nil, errors.New("not a system connection")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var derr error
	if err := rc.Control(func(s uintptr) {
		fd, derr = dupCloexec(int(s))
	}); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	ac := &asyncConn{loop: l, p: p, c: c, fd: fd}
	if a, ok := c.conn.LocalAddr().(*net.TCPAddr); ok {
		ac.local = a.AddrPort()
	}
	if a, ok := c.conn.RemoteAddr().(*net.TCPAddr); ok {
		ac.remote = a.AddrPort()
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		rawClose(fd)
		return nil, net.ErrClosed
	}
	ac.id = l.conns.put(ac)
	ev := epollEvent(ac.id, syscall.EPOLLIN|syscall.EPOLLRDHUP|epollET)
	if err := syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		l.conns.drop(ac.id)
		l.mu.Unlock()
		rawClose(fd)
		return nil, err
	}
	l.mu.Unlock()
	_ = c.conn.Close() // out of Go's poller; the socket stays open on fd
	c.conn, c.expire, c.async = nil, nil, ac
	return ac, nil
}

// tcpAddr returns ap as net names a TCP end, or nil when it is none (a
// connection that could not tell its peer when it was registered).
func tcpAddr(ap netip.AddrPort) net.Addr {
	if !ap.IsValid() {
		return nil
	}
	return net.TCPAddrFromAddrPort(ap)
}

// dupCloexec duplicates fd, close-on-exec.
func dupCloexec(fd int) (int, error) {
	for {
		nfd, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
		switch errno {
		case 0:
			return int(nfd), nil
		case syscall.EINTR:
			continue
		}
		return -1, errno
	}
}

// attach makes c, a kept connection registered with the loop, a net.Conn
// again for Probe's code, and ends its registration. When it cannot, the
// connection is closed and the error returned.
func (c *leanConn) attach() error {
	ac := c.async
	if c.conn != nil || ac == nil {
		return nil
	}
	l := ac.loop
	l.mu.Lock()
	if !l.closed {
		_ = syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_DEL, ac.fd, nil)
	}
	l.conns.drop(ac.id)
	l.mu.Unlock()
	c.async = nil
	f := os.NewFile(uintptr(ac.fd), "")
	conn, err := net.FileConn(f) // a duplicate of the descriptor, in Go's poller
	_ = f.Close()
	if err != nil {
		return err
	}
	c.conn = conn
	c.expire = func() { _ = conn.SetDeadline(aLongTimeAgo) }
	return nil
}

// closeKept closes c, a kept connection registered with the loop, with a
// reset when reset is set.
func (c *leanConn) closeKept(reset bool) {
	ac := c.async
	ac.forget()
	if reset {
		rawCloseReset(ac.fd)
	} else {
		rawClose(ac.fd)
	}
}

// forget drops the registration of a connection about to be closed;
// closing it takes it out of the epoll instance.
func (ac *asyncConn) forget() {
	l := ac.loop
	l.mu.Lock()
	l.conns.drop(ac.id)
	l.mu.Unlock()
}

// writeRequest writes p's request on the connection without waiting: the
// request of a probe fits in an idle connection's send buffer.
func (ac *asyncConn) writeRequest(p *leanProber) (n int, err error) {
	for {
		n, err = rawWriteRequest(ac.fd, p)
		if err != syscall.EINTR {
			return max(n, 0), err
		}
	}
}

// dialAsync runs the probe on a new connection without waiting: it
// connects without blocking and the loop sends the request once the
// connection is made. It serves probes that would dial and close their
// connection anyway (the Factory's budget of kept connections is spent),
// to an IP address (a host name, a zone, or a Factory whose dialling tests
// replace take Probe's way). It returns false, having started nothing,
// when it cannot: Probe then dials.
func (p *leanProber) dialAsync(l *asyncLoop, deadline time.Time, done func(error)) bool {
	f := p.factory
	if f.dial != nil {
		return false
	}
	addr, ok := p.dialAddr()
	if !ok || f.dialer.policy.Check(addr.Addr()) != nil {
		return false
	}
	domain := syscall.AF_INET6
	if addr.Addr().Is4() {
		domain = syscall.AF_INET
	}
	fd, err := syscall.Socket(domain, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	if err := rawConnect(fd, addr); err != nil && err != syscall.EINPROGRESS {
		rawClose(fd)
		return false // refused at once: Probe dials and says so in its words
	}
	// The handshake is often done by the time connect returns (always on
	// loopback): send the request now, and the loop wakes only for the
	// answer, not for writability first. A socket still connecting says
	// EAGAIN, and the loop sends it once connected.
	events := uint32(syscall.EPOLLIN | syscall.EPOLLRDHUP | epollET)
	connecting := false
	switch n, err := rawWriteRequest(fd, p); {
	case err == nil && n == p.requestLen():
	case err == syscall.EAGAIN:
		connecting = true
		events |= syscall.EPOLLOUT
	default: // refused, reset, or a part written: Probe dials and says what it meets
		rawClose(fd)
		return false
	}
	ap := newAsyncProbe(p, nil, deadline, done)
	ap.connecting = connecting
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || p.async != nil {
		rawClose(fd)
		ap.free(false)
		return false
	}
	ac := dialConns.Get().(*asyncConn)
	*ac = asyncConn{loop: l, fd: fd, probe: ap}
	ac.id = l.conns.put(ac)
	ap.ac = ac
	ev := epollEvent(ac.id, events)
	if err := syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		l.conns.drop(ac.id)
		rawClose(fd)
		ap.free(true)
		return false
	}
	p.async = ap
	heap.Push(&l.waiting, ap)
	l.armLocked()
	return true
}

// connectedLocked goes on with a probe of dialAsync's once its connection
// is made (events has EPOLLOUT) or has failed: it writes the request, or
// hands the probe over to Probe's code to dial afresh.
func (l *asyncLoop) connectedLocked(ap *asyncProbe, events uint32) (asyncEnd, bool) {
	// Writable with no error or hang-up: the connection is made (a failed
	// connect sets EPOLLERR), and asking SO_ERROR would cost a system call
	// per dial for nothing.
	var soerr int
	var err error
	if events&(syscall.EPOLLERR|syscall.EPOLLHUP) != 0 || events&syscall.EPOLLOUT == 0 {
		soerr, err = syscall.GetsockoptInt(ap.ac.fd, syscall.SOL_SOCKET, syscall.SO_ERROR)
	}
	if err == nil && soerr == 0 && events&syscall.EPOLLOUT == 0 {
		return asyncEnd{}, false // not yet
	}
	ap.connecting = false
	if err == nil && soerr == 0 {
		n, werr := ap.ac.writeRequest(ap.p)
		if werr == nil && n == ap.p.requestLen() {
			return asyncEnd{}, false // the answer is on its way
		}
	}
	// Connecting or writing failed: Probe dials again and reports what
	// it meets, in its own words.
	end := l.handOverLocked(ap, nil)
	ap.redial = true
	return end, true
}

// closeRaw closes a connection of dialAsync's, which is never kept, with
// a reset (SO_LINGER 0), as HAProxy ends its checks: a fleet probed past
// the open-file limit dials thousands of times a second, and a graceful
// close would leave each in TIME_WAIT on this side (and in the connection
// tracker) for a minute or two, until new dials find no port or no entry
// free.
func (ac *asyncConn) closeRaw() {
	ac.forget()
	rawCloseReset(ac.fd)
}

// leanConn makes a connection of dialAsync's into a leanConn for Probe's
// code, or returns nil when it cannot (Probe then dials afresh).
func (ac *asyncConn) leanConn() *leanConn {
	l := ac.loop
	l.mu.Lock()
	if !l.closed {
		_ = syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_DEL, ac.fd, nil)
	}
	l.mu.Unlock()
	f := os.NewFile(uintptr(ac.fd), "")
	conn, err := net.FileConn(f) // a duplicate of the descriptor
	ac.forget()
	_ = f.Close()
	if err != nil {
		return nil
	}
	c := &leanConn{conn: conn, readLimit: maxResponseHeaderBytes}
	c.expire = func() { _ = conn.SetDeadline(aLongTimeAgo) }
	return c
}

// addrs returns the connection's two ends, as net's errors name them.
func (ac *asyncConn) addrs() (local, remote net.Addr) {
	if ac.c != nil {
		return tcpAddr(ac.local), tcpAddr(ac.remote)
	}
	tcp := func(sa syscall.Sockaddr, err error) net.Addr {
		switch sa := sa.(type) {
		case *syscall.SockaddrInet4:
			if err == nil {
				return &net.TCPAddr{IP: sa.Addr[:], Port: sa.Port}
			}
		case *syscall.SockaddrInet6:
			if err == nil {
				return &net.TCPAddr{IP: sa.Addr[:], Port: sa.Port}
			}
		}
		return nil
	}
	return tcp(syscall.Getsockname(ac.fd)), tcp(syscall.Getpeername(ac.fd))
}

// watchIdle registers c, about to be kept, with the Factory's loop (if it
// runs, or can), so that the loop sees the peer end it while it is idle.
func (p *leanProber) watchIdle(c *leanConn) {
	if c.async != nil {
		return
	}
	if l := p.factory.loop(); l != nil {
		_, _ = l.register(p, c) // unwatched if it cannot be: the next probe finds out
	}
}
