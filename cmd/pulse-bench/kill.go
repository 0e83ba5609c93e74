package main

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// The farm's kill mode: a flipped target dies as a crashed process does.
// Every connection open to it is reset (SetLinger(0), then Close: an RST,
// not a FIN), and until it is healed every new connection to it is reset
// as soon as it is accepted (its address has no listener of its own to
// close: the farm's one socket serves every target). A checker that keeps
// a connection to the target sees the RST at once; one that dials per
// check sees its next connection reset.

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
