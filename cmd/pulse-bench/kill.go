package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// The farm's kill mode: a flipped target dies as a crashed process does.
// Every connection open to it is reset (SetLinger(0), then Close: an RST,
// not a FIN), and until it is healed every new connection to it is
// refused. A target with a socket of its own (FarmConfig.Own) has that
// socket closed, so the kernel refuses a new connection with an RST to its
// SYN, with no process to schedule, as for a dead process's port. One
// served by the farm's wildcard socket has no socket to close: its new
// connections are reset as soon as they are accepted, which needs the farm
// to run first. A checker that keeps a connection to the target sees the
// RST at once; one that dials per check sees its next connection refused.
//
// The farm learns of a connection the kernel refused only from the
// checker: a target with its own socket has no "first refused connection"
// (FirstFail) while it is killed.

// ownListener is the socket of a target that listens on its own; l is nil
// while the target is killed.
type ownListener struct {
	mu sync.Mutex
	l  net.Listener
}

// listenOwn gives each target at indices a socket of its own, all on one
// port: the first picks a free one.
func (f *Farm) listenOwn(indices []int) error {
	if len(indices) == 0 {
		return nil
	}
	f.own = make([]*ownListener, len(f.targets))
	for _, i := range indices {
		if i < 0 || i >= len(f.targets) {
			return fmt.Errorf("own socket for target %d: the farm has %d", i, len(f.targets))
		}
		if f.own[i] != nil {
			continue
		}
		o := &ownListener{}
		f.own[i] = o
		if err := f.serveOwn(i, o); err != nil {
			return err
		}
		if f.ownPort == 0 {
			f.ownPort = o.l.Addr().(*net.TCPAddr).Port
		}
	}
	return nil
}

// serveOwn opens target i's own socket and serves it; o.mu is held or o
// not yet shared.
func (f *Farm) serveOwn(i int, o *ownListener) error {
	l, err := net.Listen("tcp4", netip.AddrPortFrom(farmAddr(f.base, i), uint16(f.ownPort)).String())
	if err != nil {
		return fmt.Errorf("target %d's own socket: %w", i, err)
	}
	o.l = l
	f.wg.Go(func() { _ = f.srv.Serve(farmListener{Listener: l, f: f}) })
	return nil
}

// closeOwn closes the own sockets of the targets at indices (nil: every
// target's).
func (f *Farm) closeOwn(indices []int) {
	if f.own == nil {
		return
	}
	each := func(o *ownListener) {
		if o == nil {
			return
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.l != nil {
			_ = o.l.Close()
			o.l = nil
		}
	}
	if indices == nil {
		for _, o := range f.own {
			each(o)
		}
		return
	}
	for _, i := range indices {
		each(f.own[i])
	}
}

// reopenOwn opens again the own sockets of the targets at indices that
// were closed by a kill, unless the farm is closed.
func (f *Farm) reopenOwn(indices []int) error {
	if f.own == nil {
		return nil
	}
	var errs []error
	for _, i := range indices {
		o := f.own[i]
		if o == nil {
			continue
		}
		o.mu.Lock()
		select {
		case <-f.done:
		default:
			if o.l == nil {
				if err := f.serveOwn(i, o); err != nil {
					errs = append(errs, err)
				}
			}
		}
		o.mu.Unlock()
	}
	return errors.Join(errs...)
}

// openConns are the connections open to one target; each target's are
// apart so that a kill of a few does not stop the others' accepts.
type openConns struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// trackConn keeps the farm's open connections per target, from the
// server's ConnState hook.
func (f *Farm) trackConn(c net.Conn, s http.ConnState) {
	ic, ok := c.(indexConn)
	if !ok {
		return
	}
	o := &f.open[ic.index]
	switch s {
	case http.StateNew:
		o.mu.Lock()
		if o.conns == nil {
			o.conns = make(map[net.Conn]struct{})
		}
		o.conns[c] = struct{}{}
		o.mu.Unlock()
	case http.StateClosed, http.StateHijacked:
		o.mu.Lock()
		delete(o.conns, c)
		o.mu.Unlock()
	}
}

// resetConns resets every connection open to the targets at indices.
func (f *Farm) resetConns(indices []int) {
	for _, i := range indices {
		o := &f.open[i]
		o.mu.Lock()
		conns := make([]net.Conn, 0, len(o.conns))
		for c := range o.conns {
			conns = append(conns, c)
		}
		o.mu.Unlock()
		for _, c := range conns {
			reset(c)
		}
	}
}

// refuses reports whether target i is killed, counting its first refused
// connection as its first failure (at now, ns since the epoch).
func (f *Farm) refuses(i int) bool {
	t := &f.targets[i]
	if Mode(t.mode.Load()) != ModeKill {
		return false
	}
	t.firstFail.CompareAndSwap(0, time.Since(f.epoch).Nanoseconds())
	return true
}

// resetRequest resets the connection of a request that reached a killed
// target before its connection was: a crashed process answers nothing.
func resetRequest(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		return
	}
	c, _, err := hj.Hijack()
	if err != nil {
		return
	}
	reset(c)
}

// reset closes c with an RST.
func reset(c net.Conn) {
	if ic, ok := c.(indexConn); ok {
		c = ic.Conn
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
