package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is how a farm target answers GET /healthz.
type Mode int32

// The modes.
const (
	// ModeOK answers 200.
	ModeOK Mode = iota
	// ModeFail answers 503.
	ModeFail
	// ModeHang never answers: the request is held until the client gives
	// up or the farm closes.
	ModeHang
	// ModeKill is a crashed process: every open connection is reset and
	// new ones are refused (see kill.go).
	ModeKill
)

// String returns "ok", "fail", "hang" or "kill".
func (m Mode) String() string {
	switch m {
	case ModeOK:
		return "ok"
	case ModeFail:
		return "fail"
	case ModeHang:
		return "hang"
	case ModeKill:
		return "kill"
	}
	return fmt.Sprintf("Mode(%d)", int32(m))
}

// ParseMode parses "fail", "hang" or "kill" (the modes a flip can switch
// to) or "ok".
func ParseMode(s string) (Mode, error) {
	for _, m := range []Mode{ModeOK, ModeFail, ModeHang, ModeKill} {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("mode must be ok, fail, hang or kill, got %q", s)
}

// gapBucket is the width of one bucket of the gap histogram; gapBuckets of
// them cover two minutes, and longer gaps go to the last.
const (
	gapBucket  = 10 * time.Millisecond
	gapBuckets = 12000
)

// farmTarget is one target's counters; every field is atomic.
type farmTarget struct {
	probes    atomic.Uint64
	mode      atomic.Int32
	last      atomic.Int64 // when the last probe arrived, ns since the farm's epoch; 0 none
	firstFail atomic.Int64 // the first failing answer since the last SetMode, ns since epoch; 0 none
}

// Farm is N HTTP targets on loopback, each at an address of its own in
// 127.0.0.0/8 (127.1.0.1, 127.1.0.2, ...; host parts 0 and 255 are
// skipped) and one shared port, each counting the probes it answers. One
// listening socket, bound to the wildcard address, serves them all and
// tells them apart by the address a connection was made to; a connection
// to any address that is not a farm target is closed at once. So a farm of
// 100,000 targets needs one file descriptor for listening, not 100,000.
//
// Its methods are safe for concurrent use. Create it with NewFarm; Close it.
type Farm struct {
	base    uint32 // the first target's address
	port    int
	targets []farmTarget
	open    []openConns // per target, for kills
	epoch   time.Time   // monotonic base of the ns timestamps

	probes atomic.Uint64 // all probes, for Snapshot
	conns  atomic.Uint64 // connections accepted to farm targets
	late   atomic.Uint64 // probes that came later than lateNs after the previous one
	gaps   [gapBuckets]atomic.Uint64
	lateNs atomic.Int64 // 0 counts no gaps
	okBody string       // a healthy target's answer

	srv       *http.Server
	listener  net.Listener
	own       []*ownListener // per target, nil unless it has its own socket (see kill.go)
	ownPort   int            // the port of the targets with their own sockets
	wg        sync.WaitGroup
	done      chan struct{} // closed by Close: releases hanging requests
	closeOnce sync.Once
}

// FarmConfig configures NewFarm.
type FarmConfig struct {
	// N is the number of targets.
	N int
	// FirstAddr is the first target's address, in 127.0.0.0/8. If
	// invalid, 127.1.0.1.
	FirstAddr netip.Addr
	// Port is the port every target listens on; 0 picks a free one.
	Port int
	// OKBody is what a healthy target answers; "" means "ok\n".
	OKBody string
	// Own are the indices of targets that listen on a socket of their
	// own, on a second port they share, rather than on the farm's
	// wildcard socket: a kill closes that socket, so that the kernel
	// refuses new connections to the target as it does for a crashed
	// process (see kill.go). Each takes a file descriptor.
	Own []int
}

type ctxKey struct{}

// indexConn carries the index of the target it was made to.
type indexConn struct {
	net.Conn
	index int
}

// farmListener hands out connections to farm targets only.
type farmListener struct {
	net.Listener
	f *Farm
}

func (l farmListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if ap, ok := c.LocalAddr().(*net.TCPAddr); ok {
			if i := l.f.index(ap.AddrPort().Addr()); i >= 0 {
				if l.f.refuses(i) {
					reset(c)
					continue
				}
				l.f.conns.Add(1)
				return indexConn{Conn: c, index: i}, nil
			}
		}
		_ = c.Close() // not to a farm target (another address, or not loopback)
	}
}

var loopback = netip.MustParsePrefix("127.0.0.0/8")

// farmAddr returns the i-th address from base, skipping host parts 0 and
// 255.
func farmAddr(base uint32, i int) netip.Addr {
	u := base + uint32(i/254)*256 + uint32(i%254)
	return netip.AddrFrom4([4]byte{byte(u >> 24), byte(u >> 16), byte(u >> 8), byte(u)})
}

// index returns the target at a, or -1.
func (f *Farm) index(a netip.Addr) int {
	a = a.Unmap()
	if !a.Is4() {
		return -1
	}
	b := a.As4()
	u := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	if u < f.base || b[3] == 0 || b[3] == 255 {
		return -1
	}
	d := u - f.base
	i := int(d/256)*254 + int(d%256)
	if d%256 >= 254 || i >= len(f.targets) {
		return -1
	}
	return i
}

// NewFarm starts serving cfg.N targets until Close.
func NewFarm(cfg FarmConfig) (*Farm, error) {
	if cfg.N < 1 {
		return nil, fmt.Errorf("a farm needs at least one target, got %d", cfg.N)
	}
	first := cfg.FirstAddr
	if !first.IsValid() {
		first = netip.MustParseAddr("127.1.0.1")
	}
	if !first.Is4() || !loopback.Contains(first) {
		return nil, fmt.Errorf("farm addresses must be in 127.0.0.0/8, got %v", first)
	}
	if b := first.As4(); b[3] != 1 {
		return nil, fmt.Errorf("the first farm address must end in .1, got %v", first)
	}
	b := first.As4()
	f := &Farm{
		base:    uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]),
		targets: make([]farmTarget, cfg.N),
		open:    make([]openConns, cfg.N),
		epoch:   time.Now(),
		done:    make(chan struct{}),
		okBody:  cfg.OKBody,
	}
	if f.okBody == "" {
		f.okBody = "ok\n"
	}
	if last := farmAddr(f.base, cfg.N-1); !loopback.Contains(last) {
		return nil, fmt.Errorf("%d targets from %v run past 127.255.255.255", cfg.N, first)
	}
	// The wildcard address: the only way one socket takes connections to
	// many loopback addresses. Connections to anything but a farm target
	// are closed unread (farmListener).
	l, err := net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", cfg.Port))
	if err != nil {
		return nil, fmt.Errorf("farm listener: %w", err)
	}
	f.listener = l
	f.port = l.Addr().(*net.TCPAddr).Port
	f.srv = &http.Server{
		Handler:           f,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
		ConnState:         f.trackConn,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if ic, ok := c.(indexConn); ok {
				return context.WithValue(ctx, ctxKey{}, ic.index)
			}
			return ctx
		},
	}
	f.wg.Go(func() { _ = f.srv.Serve(farmListener{Listener: l, f: f}) })
	if err := f.listenOwn(cfg.Own); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Len returns the number of targets.
func (f *Farm) Len() int { return len(f.targets) }

// Addr returns target i's "ip:port".
func (f *Farm) Addr(i int) string {
	port := f.port
	if f.own != nil && f.own[i] != nil {
		port = f.ownPort
	}
	return netip.AddrPortFrom(farmAddr(f.base, i), uint16(port)).String()
}

// URL returns target i's health URL.
func (f *Farm) URL(i int) string { return "http://" + f.Addr(i) + "/healthz" }

// ServeHTTP answers a probe of the target whose listener accepted the
// connection.
func (f *Farm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	i, ok := r.Context().Value(ctxKey{}).(int)
	if !ok || r.URL.Path != "/healthz" {
		http.NotFound(w, r)
		return
	}
	f.record(i, time.Since(f.epoch).Nanoseconds())
	t := &f.targets[i]
	switch Mode(t.mode.Load()) {
	case ModeFail:
		t.firstFail.CompareAndSwap(0, time.Since(f.epoch).Nanoseconds())
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "failing\n")
	case ModeKill:
		t.firstFail.CompareAndSwap(0, time.Since(f.epoch).Nanoseconds())
		resetRequest(w)
	case ModeHang:
		t.firstFail.CompareAndSwap(0, time.Since(f.epoch).Nanoseconds())
		select {
		case <-r.Context().Done():
		case <-f.done:
		}
	default:
		_, _ = io.WriteString(w, f.okBody)
	}
}

// record counts one probe of target i arriving at now (ns since epoch).
func (f *Farm) record(i int, now int64) {
	t := &f.targets[i]
	t.probes.Add(1)
	f.probes.Add(1)
	prev := t.last.Swap(now)
	if prev == 0 {
		return
	}
	gap := now - prev
	b := min(gap/int64(gapBucket), gapBuckets-1)
	f.gaps[b].Add(1)
	if late := f.lateNs.Load(); late > 0 && gap > late {
		f.late.Add(1)
	}
}

// SetLateAfter sets the gap between two probes of one target past which the
// second counts as late; 0 counts none.
func (f *Farm) SetLateAfter(d time.Duration) { f.lateNs.Store(int64(d)) }

// SetMode switches the targets at the given indices to m, and forgets
// their first failing answer, so FirstFail reports the first one after this
// call. It returns when the switch is made: with ModeKill, the time of the
// kill, taken before their sockets are closed and their open connections
// reset. A target with a socket of its own that leaves ModeKill listens
// again; the error says which could not.
func (f *Farm) SetMode(indices []int, m Mode) (time.Time, error) {
	for _, i := range indices {
		f.targets[i].firstFail.Store(0)
		f.targets[i].mode.Store(int32(m))
	}
	at := time.Now()
	if m == ModeKill {
		f.closeOwn(indices)
		f.resetConns(indices)
		return at, nil
	}
	return at, f.reopenOwn(indices)
}

// Probes returns how many probes target i has answered.
func (f *Farm) Probes(i int) uint64 { return f.targets[i].probes.Load() }

// FirstFail returns when target i first answered a failure (or started to
// hang) since its last SetMode, and whether it has.
func (f *Farm) FirstFail(i int) (time.Time, bool) {
	ns := f.targets[i].firstFail.Load()
	if ns == 0 {
		return time.Time{}, false
	}
	return f.epoch.Add(time.Duration(ns)), true
}

// Forget clears every target's last probe time, so the gaps of the next
// client are not measured from the previous client's probes.
func (f *Farm) Forget() {
	for i := range f.targets {
		f.targets[i].last.Store(0)
	}
}

// FarmSnapshot is the farm's counters at one moment; subtract two with
// Sub to get a window's.
type FarmSnapshot struct {
	Probes uint64
	Conns  uint64 // connections accepted
	Late   uint64
	Gaps   []uint64 // the gap histogram, gapBucket wide buckets
}

// Snapshot reads the counters.
func (f *Farm) Snapshot() FarmSnapshot {
	s := FarmSnapshot{Probes: f.probes.Load(), Conns: f.conns.Load(), Late: f.late.Load(), Gaps: make([]uint64, gapBuckets)}
	for i := range f.gaps {
		s.Gaps[i] = f.gaps[i].Load()
	}
	return s
}

// Sub returns the counts between earlier and s.
func (s FarmSnapshot) Sub(earlier FarmSnapshot) FarmSnapshot {
	out := FarmSnapshot{Probes: s.Probes - earlier.Probes, Conns: s.Conns - earlier.Conns, Late: s.Late - earlier.Late, Gaps: make([]uint64, len(s.Gaps))}
	for i := range s.Gaps {
		var e uint64
		if i < len(earlier.Gaps) {
			e = earlier.Gaps[i]
		}
		out.Gaps[i] = s.Gaps[i] - e
	}
	return out
}

// GapQuantile returns the q-quantile (0 < q <= 1) of the gaps between two
// probes of one target, to the bucket's upper edge; 0 if no gap was seen.
func (s FarmSnapshot) GapQuantile(q float64) time.Duration {
	var total uint64
	for _, n := range s.Gaps {
		total += n
	}
	if total == 0 {
		return 0
	}
	rank := uint64(q*float64(total) + 0.999999)
	rank = max(1, min(rank, total))
	var seen uint64
	for i, n := range s.Gaps {
		seen += n
		if seen >= rank {
			return time.Duration(i+1) * gapBucket
		}
	}
	return time.Duration(len(s.Gaps)) * gapBucket
}

// Close stops every listener, releases hanging requests and waits for the
// servers to stop. It is idempotent.
func (f *Farm) Close() {
	f.closeOnce.Do(func() {
		close(f.done)
		f.closeOwn(nil)
		_ = f.srv.Close()
		_ = f.listener.Close()
		f.wg.Wait()
	})
}

// stamps keeps one time per target, on the monotonic clock, so that a step
// of the wall clock cannot skew a latency. Its methods are safe for
// concurrent use.
type stamps struct {
	base time.Time // with its monotonic reading
	ns   []atomic.Int64
}

func newStamps(n int) *stamps {
	return &stamps{base: time.Now(), ns: make([]atomic.Int64, n)}
}

// enc turns at into the stored form; 0 means unset.
func (s *stamps) enc(at time.Time) int64 { return int64(at.Sub(s.base)) + 1 }

// set records at for target i.
func (s *stamps) set(i int, at time.Time) { s.ns[i].Store(s.enc(at)) }

// setFirst records at for target i unless it already has a time.
func (s *stamps) setFirst(i int, at time.Time) { s.ns[i].CompareAndSwap(0, s.enc(at)) }

// get returns target i's time and whether it has one.
func (s *stamps) get(i int) (time.Time, bool) {
	v := s.ns[i].Load()
	if v == 0 {
		return time.Time{}, false
	}
	return s.base.Add(time.Duration(v - 1)), true
}

// clear forgets target i's time.
func (s *stamps) clear(i int) { s.ns[i].Store(0) }

// len returns the number of targets.
func (s *stamps) len() int { return len(s.ns) }

// okBody returns a body of n bytes that ends in "ready", or "" (the
// farm's default) when n is not positive.
func okBody(n int) string {
	if n <= 0 {
		return ""
	}
	const end = "ready"
	if n <= len(end) {
		return end[len(end)-n:]
	}
	return strings.Repeat("x", n-len(end)) + end
}
