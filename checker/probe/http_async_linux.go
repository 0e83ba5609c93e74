//go:build linux

package probe

import (
	"container/heap"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Asynchronous probes: the lean prober's answer to "a goroutine per probe
// in flight". ProbeAsync writes the request on the kept connection from
// the caller's goroutine and returns; one loop per Factory waits for the
// answers of every probe in flight on an epoll instance of its own, reads
// them with plain system calls and hands each result to its callback. A
// probe costs a write and a read or two, and the loop wakes once for all
// the answers that arrived together, where a blocking Probe parks and
// wakes a goroutine for each.
//
// Only the common case stays on the loop: a whole response head the lean
// parser takes (parseHead), a final status in 200-599 and a body that is
// empty or framed by a Content-Length and already read. Anything else (a
// head larger than the read buffer, 1xx, a chunked body, an error or the
// end of the connection before the answer is whole) hands the connection,
// with the bytes read so far and the error met, to Probe's own code in a
// goroutine, which finishes the probe exactly as Probe would have: the
// same result, the same error text, the same retry of a kept connection
// that failed before any byte of an answer.
//
// The connections stay registered (edge-triggered) while they are kept
// between probes, and so does a connection Probe's code keeps once its
// prober watches its connection (WatchConn). An event on a connection no
// probe waits on is bytes or the end of the connection arriving unasked
// for: the connection is marked dead and the next probe dials instead of
// trying it; when the peer closed or reset the kept connection, it is
// closed at once and the prober's watcher told.

// asyncState is a Factory's async loop, started by the first asynchronous
// probe.
type asyncState struct {
	loop atomic.Pointer[asyncLoop]
	mu   sync.Mutex // serialises starting and stopping the loop
	off  bool       // Close ran, or the loop could not start: probes block
}

// asyncLoop waits for the answers of the asynchronous probes in flight.
type asyncLoop struct {
	file *os.File // the epoll instance, in Go's poller
	rc   syscall.RawConn
	done chan struct{} // closed when run returns
	ends []asyncEnd    // handle's, kept between calls; only run uses it
	lost []lostIdle    // handle's, kept between calls; only run uses it

	mu      sync.Mutex
	epfd    int
	closed  bool
	conns   connTable   // registered connections, by id
	waiting probeHeap   // probes waiting for an answer, by deadline
	timer   *time.Timer // fires at waiting's first deadline
	timerAt time.Time   // when timer fires; zero when it is stopped

	handOvers atomic.Uint64 // probes handed over to Probe's code, for tests and benchmarks
}

// asyncProbe is one asynchronous probe in flight. Its fields are guarded
// by the loop's mutex.
type asyncProbe struct {
	p        *leanProber
	ac       *asyncConn
	deadline time.Time
	done     func(error)
	buf      *[leanBufferSize]byte // the answer so far
	n        int
	index    int // in loop.waiting; -1 when not there

	writing   bool  // ProbeAsync is writing the request
	event     bool  // an event arrived while writing
	cancelled bool  // CancelAsync came while writing
	ended     bool  // its end has been decided
	endErr    error // the result decided while writing, for ProbeAsync to deliver

	connecting bool // dialAsync's connection is being established

	// Set once handed over to Probe's code, which runs under ctx: the
	// bytes read and the error met, or redial when the connection could
	// not be made.
	ctx        context.Context
	cancel     context.CancelFunc
	pending    []byte
	pendingErr error
	redial     bool
}

// asyncEnd is what becomes of a probe, carried out outside the loop's
// mutex by finish.
type asyncEnd struct {
	ap       *asyncProbe
	err      error // the probe's result
	keep     bool  // the connection may serve the next probe
	handOver bool  // Probe's code finishes the probe
}

var asyncBufs = sync.Pool{New: func() any { return new([leanBufferSize]byte) }}

// asyncProbes and dialConns recycle what a probe on the loop is: past the
// open-file limit a fleet dials thousands of times a second, and each dial
// made both anew, most of the probe path's garbage.
var (
	asyncProbes = sync.Pool{New: func() any { return new(asyncProbe) }}
	dialConns   = sync.Pool{New: func() any { return new(asyncConn) }}
)

// newAsyncProbe returns a probe of p's on ac (nil for dialAsync's, which
// sets it), with a buffer.
func newAsyncProbe(p *leanProber, ac *asyncConn, deadline time.Time, done func(error)) *asyncProbe {
	ap := asyncProbes.Get().(*asyncProbe)
	*ap = asyncProbe{p: p, ac: ac, deadline: deadline, done: done, buf: asyncBufs.Get().(*[leanBufferSize]byte), index: -1}
	return ap
}

// free gives back ap, and its connection when it was dialAsync's and is
// closed. It is called once the loop has let go of ap (endLocked: out of
// the heap, its connection and its prober) or never held it, and, for a
// probe that ends on the loop, after its callback (finish); a closed
// dialAsync connection is forgotten by then. A probe handed over to
// Probe's code is not given back.
func (ap *asyncProbe) free(dialConnClosed bool) {
	if dialConnClosed {
		*ap.ac = asyncConn{}
		dialConns.Put(ap.ac)
	}
	if ap.buf != nil {
		asyncBufs.Put(ap.buf)
	}
	*ap = asyncProbe{}
	asyncProbes.Put(ap)
}

// epollET is EPOLLET as the uint32 the event mask is.
const epollET = 1 << 31

// epollEvent is an event registration for the connection numbered id: the
// number rides in the event's data, in place of a descriptor, so that an
// event is never taken for a later connection's that got the same
// descriptor.
func epollEvent(id uint64, events uint32) syscall.EpollEvent {
	return syscall.EpollEvent{Events: events, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
}

// eventID returns the connection number epollEvent put in ev.
func eventID(ev syscall.EpollEvent) uint64 {
	return uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
}

// loop returns the Factory's async loop, starting it on first use, or nil
// when probes cannot be asynchronous.
func (f *Factory) loop() *asyncLoop {
	if l := f.async.loop.Load(); l != nil {
		return l
	}
	f.async.mu.Lock()
	defer f.async.mu.Unlock()
	if f.async.off {
		return nil
	}
	if l := f.async.loop.Load(); l != nil {
		return l
	}
	l, err := newAsyncLoop()
	if err != nil {
		f.async.off = true // probes block, as they did before
		return nil
	}
	f.async.loop.Store(l)
	return l
}

// closeAsync stops the async loop: probes in flight end with a
// cancellation, later probes block.
func (f *Factory) closeAsync() {
	f.async.mu.Lock()
	f.async.off = true
	l := f.async.loop.Swap(nil)
	f.async.mu.Unlock()
	if l != nil {
		l.close()
	}
}

func newAsyncLoop() (*asyncLoop, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if err := syscall.SetNonblock(epfd, true); err != nil {
		_ = syscall.Close(epfd)
		return nil, err
	}
	file := os.NewFile(uintptr(epfd), "probe-epoll") // non-blocking: in Go's poller
	rc, err := file.SyscallConn()
	if err != nil {
		_ = file.Close()
		return nil, err
	}
	l := &asyncLoop{file: file, rc: rc, epfd: epfd, done: make(chan struct{})}
	go l.run()
	return l, nil
}

// run takes the events of the epoll instance until it is closed. Go's
// poller wakes it when the instance has events. (A thread of its own
// blocked in epoll_wait cost more CPU per probe here: the runtime hands
// its P off and back around every wait.)
func (l *asyncLoop) run() {
	defer close(l.done)
	events := make([]syscall.EpollEvent, 256)
	_ = l.rc.Read(func(fd uintptr) bool {
		for {
			n, err := rawEpollPoll(int(fd), events)
			switch {
			case err == syscall.EINTR:
				continue
			case err != nil:
				return true
			}
			if n > 0 {
				l.handle(events[:n])
			}
			if n < len(events) {
				return false // drained: wait for the next events
			}
		}
	})
}

func (l *asyncLoop) handle(events []syscall.EpollEvent) {
	ends, lost := l.ends[:0], l.lost[:0]
	l.mu.Lock()
	for _, ev := range events {
		ac := l.conns.get(eventID(ev))
		if ac == nil {
			continue
		}
		switch ap := ac.probe; {
		case ap == nil && ac.c == nil:
			// dialAsync's connection, about to be closed.
		case ap == nil:
			if ac.dead {
				break
			}
			if unasked, why := ac.unasked(); unasked {
				ac.dead, ac.lost = true, why
				if why != "" && ac.p != nil {
					lost = append(lost, lostIdle{p: ac.p, c: ac.c, reason: why})
				}
			}
		case ap.writing:
			ap.event = true
		case ap.cancel != nil:
			// Probe's code reads the connection now.
		case ap.connecting:
			if end, ok := l.connectedLocked(ap, ev.Events); ok {
				ends = append(ends, end)
			}
		default:
			if end, ok := l.serviceLocked(ap); ok {
				ends = append(ends, end)
			}
		}
	}
	l.mu.Unlock()
	l.finish(ends)
	clear(ends)
	l.ends = ends
	for _, li := range lost {
		li.p.lostIdle(li.c, li.reason)
	}
	clear(lost)
	l.lost = lost
}

// lostIdle is a kept connection the peer ended while it was idle.
type lostIdle struct {
	p      *leanProber
	c      *leanConn
	reason string
}

// ProbeAsync runs the probe on the kept connection without waiting for
// the answer (see checker.AsyncProber). It returns false when there is no
// kept connection to use, the deadline has passed, the Factory's loop is
// not running (Close, or not Linux) or writing the request failed; Probe
// then does it all, dialling.
func (p *leanProber) ProbeAsync(deadline time.Time, done func(error)) bool {
	now := time.Now()
	if !now.Before(deadline) {
		return false
	}
	p.period.started(&p.factory.rank, now)
	l := p.factory.loop()
	if l == nil {
		return false
	}
	c := p.take()
	if c == nil {
		if p.factory.kept.Load() < p.factory.keptMax && p.factory.rank.mayKeep(&p.period, p.factory.keptMax, now) {
			return false // Probe dials a connection to keep
		}
		return p.dialAsync(l, deadline, done)
	}
	ac, err := l.register(p, c)
	if err != nil {
		p.putBack(c)
		return false
	}
	ap := newAsyncProbe(p, ac, deadline, done)
	ap.writing = true
	l.mu.Lock()
	if l.closed || ac.dead || p.async != nil {
		lost := ""
		if ac.dead {
			lost = ac.lost
		}
		l.mu.Unlock()
		ap.free(false)
		c.close()
		// The loop saw the peer end the connection, but this probe took
		// it before the loop could tell (lostIdle leaves a connection a
		// probe took to that probe): the probe tells, before Probe dials.
		if lost != "" {
			p.tellLost(lost)
		}
		return false
	}
	ac.probe, p.async = ap, ap
	heap.Push(&l.waiting, ap)
	l.armLocked()
	l.mu.Unlock()

	c.readLimit = maxResponseHeaderBytes
	n, err := ac.writeRequest(p)

	l.mu.Lock()
	ap.writing = false
	var end asyncEnd
	switch {
	case ap.ended: // timed out, or the loop closed, during the write
		end = asyncEnd{ap: ap, err: ap.endErr}
	case err != nil || n < p.requestLen():
		// Nothing, or part of the request, went out: Probe sends it
		// afresh on a new connection, as it would after a failed write
		// on a kept one.
		l.endLocked(ap)
		l.mu.Unlock()
		ap.free(false)
		c.close()
		// A write fails on a kept connection its peer ended (reset, or
		// closed and then reset by the write) before the loop saw it: a
		// loss found under a probe, as in probeOn.
		if err != nil && err != syscall.EAGAIN {
			p.lostInUse(err)
		}
		return false
	case ap.cancelled:
		l.endLocked(ap)
		end = asyncEnd{ap: ap, err: p.urlError(context.Canceled)}
	case ap.event:
		var ok bool
		if end, ok = l.serviceLocked(ap); !ok {
			l.mu.Unlock()
			return true
		}
	default:
		l.mu.Unlock()
		return true
	}
	l.mu.Unlock()
	l.finish([]asyncEnd{end})
	return true
}

// CancelAsync ends the asynchronous probe in flight, if any: its callback
// gets a cancellation error, on another goroutine.
func (p *leanProber) CancelAsync() {
	l := p.factory.async.loop.Load()
	if l == nil {
		return
	}
	l.mu.Lock()
	ap := p.async
	switch {
	case ap == nil:
		l.mu.Unlock()
	case ap.cancel != nil: // Probe's code has it
		cancel := ap.cancel
		l.mu.Unlock()
		cancel()
	case ap.ended:
		l.mu.Unlock()
	case ap.writing:
		ap.cancelled = true
		l.mu.Unlock()
	default:
		l.endLocked(ap)
		l.mu.Unlock()
		// On a goroutine of its own: the caller may hold a lock the
		// callback takes (a checker closes probers under its mutex).
		go l.finish([]asyncEnd{{ap: ap, err: p.urlError(context.Canceled)}})
	}
}

// serviceLocked reads what has arrived for ap and reports its end when
// the probe is over, on the loop or by handing over to Probe's code.
func (l *asyncLoop) serviceLocked(ap *asyncProbe) (asyncEnd, bool) {
	for {
		if ap.n == len(ap.buf) {
			return l.handOverLocked(ap, nil), true // a head over the buffer
		}
		n, err := rawRead(ap.ac.fd, ap.buf[ap.n:])
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return asyncEnd{}, false // the rest is on its way
		case err != nil:
			local, remote := ap.ac.addrs()
			return l.handOverLocked(ap, &net.OpError{Op: "read", Net: "tcp", Source: local, Addr: remote, Err: os.NewSyscallError("read", err)}), true
		case n == 0:
			return l.handOverLocked(ap, io.EOF), true
		}
		ap.n += n
		if end, over := l.answerLocked(ap); over {
			return end, true
		}
	}
}

// answerLocked decides ap from the bytes read so far when the loop can:
// over is false while more bytes are needed, and the end hands over what
// the loop leaves to Probe's code.
func (l *asyncLoop) answerLocked(ap *asyncProbe) (end asyncEnd, over bool) {
	resp, body, complete, ok := ap.head()
	switch {
	case !complete:
		return asyncEnd{}, false
	case !ok:
		return l.handOverLocked(ap, nil), true
	}
	// From here on the result is the status and, when the prober checks
	// them, the header and the body, which is then whole in the buffer:
	// otherwise the body only decides whether the connection is kept, as
	// in readBody.
	p := ap.p
	keep := resp.keepAlive
	noBody := p.head || resp.code == http.StatusNoContent || resp.code == http.StatusNotModified
	switch {
	case noBody:
		keep = keep && body == 0
	case resp.chunked || resp.length < 0:
		return l.handOverLocked(ap, nil), true
	case body < resp.length:
		return asyncEnd{}, false
	default:
		keep = keep && body == resp.length
	}
	l.endLocked(ap)
	if p.expect == nil {
		return asyncEnd{ap: ap, keep: keep, err: p.verdict(resp.code, nil, nil, nil)}, true
	}
	// Checked here, on the loop: copying is needless, the buffer stays
	// ap's until finish.
	head := ap.buf[:ap.n-int(body)]
	var bodyBytes []byte
	if !noBody {
		bodyBytes = ap.buf[len(head) : len(head)+int(min(resp.length, int64(p.expect.limit)))]
	}
	var values func(string) []string
	if len(p.expect.headers) > 0 {
		values = headValues(head)
	}
	return asyncEnd{ap: ap, keep: keep, err: p.verdict(resp.code, values, bodyBytes, nil)}, true
}

// head parses the answer read so far: complete once its head has arrived
// whole, ok when that head is one the loop finishes (parseHead takes it and
// its status is final, 200-599), and body the bytes read after it.
func (ap *asyncProbe) head() (resp leanResponse, body int64, complete, ok bool) {
	buf := ap.buf[:ap.n]
	i := headEnd(buf, 0)
	if i < 0 {
		return resp, 0, false, false
	}
	resp, ok = parseHead(buf[:i])
	return resp, int64(len(buf) - i), true, ok && resp.code >= 200 && resp.code <= 599
}

// handOverLocked gives ap's connection to Probe's code, with the bytes
// read so far and the error that ended reading (nil: none yet).
func (l *asyncLoop) handOverLocked(ap *asyncProbe, err error) asyncEnd {
	l.removeLocked(ap)
	l.handOvers.Add(1)
	ap.pending = append([]byte(nil), ap.buf[:ap.n]...)
	ap.pendingErr = err
	ap.ctx, ap.cancel = context.WithDeadline(context.Background(), ap.deadline)
	ap.ended = true
	return asyncEnd{ap: ap, handOver: true}
}

// endLocked takes ap out of the loop: its connection and its prober are
// free for the next probe.
func (l *asyncLoop) endLocked(ap *asyncProbe) {
	l.removeLocked(ap)
	ap.ended = true
	if ap.ac.probe == ap {
		ap.ac.probe = nil
	}
	if ap.p.async == ap {
		ap.p.async = nil
	}
}

func (l *asyncLoop) removeLocked(ap *asyncProbe) {
	if ap.index >= 0 {
		heap.Remove(&l.waiting, ap.index)
	}
}

// finish carries out ends outside the loop's mutex: keeps or closes each
// connection and calls each callback, or starts Probe's code on a handed
// over one.
func (l *asyncLoop) finish(ends []asyncEnd) {
	for _, e := range ends {
		ap := e.ap
		if e.handOver {
			go l.finishHandedOver(ap)
			continue
		}
		raw := ap.ac.c == nil
		switch {
		case raw:
			ap.ac.closeRaw()
		case e.keep:
			ap.p.putBack(ap.ac.c)
		default:
			ap.ac.c.close()
		}
		ap.done(e.err)
		ap.free(raw)
	}
}

// finishHandedOver finishes ap with Probe's code, on its connection.
func (l *asyncLoop) finishHandedOver(ap *asyncProbe) {
	asyncBufs.Put(ap.buf)
	ap.buf = nil
	// ctx, cancel and what was read are set before the hand-over and
	// never change.
	c, reused := ap.ac.c, true
	switch {
	case ap.redial: // the connection failed: Probe dials afresh and says why
		ap.ac.closeRaw()
		c = nil
	case c == nil: // a connection of dialAsync's, made a net.Conn now
		c, reused = ap.ac.leanConn(), false
	}
	if c != nil {
		c.pending, c.pendingErr = ap.pending, ap.pendingErr
	}
	err := ap.p.probeOn(ap.ctx, c, c != nil, reused)
	ap.cancel()
	l.mu.Lock()
	l.endLocked(ap)
	l.mu.Unlock()
	ap.done(err)
}

// close ends every probe in flight with a cancellation and stops the
// loop.
func (l *asyncLoop) close() {
	var (
		ends    []asyncEnd
		cancels []context.CancelFunc
	)
	l.mu.Lock()
	l.closed = true
	for len(l.waiting) > 0 {
		ap := l.waiting[0]
		l.endLocked(ap)
		err := ap.p.urlError(context.Canceled)
		if ap.writing {
			ap.endErr = err // ProbeAsync delivers it once written
			continue
		}
		ends = append(ends, asyncEnd{ap: ap, err: err})
	}
	for _, ac := range l.conns.slots {
		if ac == nil {
			continue
		}
		if ap := ac.probe; ap != nil && ap.cancel != nil {
			cancels = append(cancels, ap.cancel)
		}
	}
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()
	l.finish(ends)
	for _, cancel := range cancels {
		cancel()
	}
	_ = l.file.Close()
	<-l.done
}
