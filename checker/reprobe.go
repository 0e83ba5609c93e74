package checker

import (
	"fmt"
	"maps"
	"sync"
	"time"
)

// Reprobes: a prober that keeps a connection to its target between probes
// (the http:// prober's kept connection, the gRPC prober's channel) learns
// from the kernel at once when the target's process dies: the peer closes
// or resets the connection. A lost connection is not a failed probe (a
// server may close idle connections), but it is a reason to probe now
// rather than at the next slot. The scheduler brings the target's next
// probe forward to now; if that probe fails, the target is probed at its
// reprobe fast interval while it stays on its way down, so that fall
// failures take (fall-1) fast intervals instead of (fall-1) intervals.
// Only probe results count toward rise and fall.
//
// A lost connection reprobes a target at most once per Spec.Interval: a
// server that closes every idle connection soon after each answer costs at
// most one extra probe per interval, never a probe per close of the
// connection the reprobe itself opened.

// ConnWatcher is a Prober that keeps a connection to its target between
// probes and can tell when the peer ends it. A loss told while a probe of
// the target is in flight brings nothing forward, but that probe's
// failure, if it fails, follows the fast interval. The checker calls WatchConn
// once per prober, after it becomes a target's prober, unless
// ReprobePolicy.Disabled; with the checker's lock held, so WatchConn must
// only record lost (and may start what it needs to watch), never block.
type ConnWatcher interface {
	Prober
	// WatchConn makes the prober call lost, from a goroutine of its own,
	// each time the peer closes or resets the connection it keeps, with a
	// short reason (see the probe
	// package's Lost* constants). It is not called for a connection the
	// prober closes itself (an answer with "Connection: close", Close); a
	// call racing with Close may still come (the checker drops what comes
	// for a replaced prober). lost must not block; the prober calls it
	// holding none of its own locks. A second call replaces lost.
	WatchConn(lost func(reason string))
}

// Bounds and default of ReprobePolicy.FastInterval.
const (
	// DefaultReprobeFastInterval is ReprobePolicy.FastInterval's default.
	DefaultReprobeFastInterval = 100 * time.Millisecond
	// MaxReprobeFastInterval bounds ReprobePolicy.FastInterval; it is at
	// least MinInterval.
	MaxReprobeFastInterval = time.Minute
)

// ReprobePolicy says what the checker does when a ConnWatcher reports a
// lost connection. The zero value reprobes, with
// DefaultReprobeFastInterval.
type ReprobePolicy struct {
	// Disabled turns reprobes off: probers are not asked to watch their
	// connections, and targets are probed on their schedule only.
	Disabled bool
	// FastInterval is the interval of a target after a reprobe failed,
	// while it stays on its way to unhealthy, when its spec has no
	// FastInterval of its own (one that it has wins, as does a shorter
	// Interval). If 0, DefaultReprobeFastInterval; else in [MinInterval,
	// MaxReprobeFastInterval].
	FastInterval time.Duration
}

func (p *ReprobePolicy) validate() error {
	switch f := p.FastInterval; {
	case f == 0:
		p.FastInterval = DefaultReprobeFastInterval
	case f < MinInterval || f > MaxReprobeFastInterval:
		return fmt.Errorf("reprobe fast interval must be between %v and %v, got %v", MinInterval, MaxReprobeFastInterval, f)
	}
	return nil
}

// lostConns is the inbox of lost connections: ConnWatchers' callbacks
// write it without the registry's lock, and the schedule loop takes it
// with that lock held. Its lock is a leaf: nothing is taken under it. One
// entry per target at most, so it holds no more than the registry does.
type lostConns struct {
	mu sync.Mutex
	m  map[*target]lostConn
}

// lostConn is the prober generation whose connection was lost, and why.
type lostConn struct {
	gen    uint32
	reason string
}

// watchLocked asks t's prober, when it is a ConnWatcher, to tell the
// scheduler of its lost connections. The registry calls it each time t
// takes a new prober.
func (s *scheduler) watchLocked(t *target) {
	cw, ok := t.prober.(ConnWatcher)
	if !ok || s.reprobe.Disabled {
		return
	}
	gen := t.gen
	cw.WatchConn(func(reason string) { s.connLost(t, gen, reason) })
}

// connLost records that the connection of t's prober of generation gen
// was lost, and wakes the schedule loop. It takes no lock but the inbox's.
func (s *scheduler) connLost(t *target, gen uint32, reason string) {
	s.lost.mu.Lock()
	if s.lost.m == nil {
		s.lost.m = make(map[*target]lostConn)
	}
	s.lost.m[t] = lostConn{gen: gen, reason: reason}
	s.lost.mu.Unlock()
	s.wakeUp()
}

// reprobesLocked brings forward the next probe of each target whose
// connection was lost since the last pass, when it may be reprobed.
func (s *scheduler) reprobesLocked(now time.Time) {
	s.lost.mu.Lock()
	lost := s.lost.m
	s.lost.m = nil
	s.lost.mu.Unlock()
	for t, l := range lost {
		s.reprobeLocked(t, l, now)
	}
}

// reprobeLocked brings t's next probe forward to now for a lost
// connection, unless the loss is stale (t removed, or its prober
// replaced), t is not probed here, or t was reprobed less than one
// interval ago. When t has a probe in flight, that probe's result tells:
// nothing is brought forward, but if it fails the target follows its
// reprobe fast interval, as after a failed reprobe.
func (s *scheduler) reprobeLocked(t *target, l lostConn, now time.Time) {
	if !s.reg.currentLocked(t) || t.gen != l.gen || t.index < 0 || !s.reg.probedLocked(t) {
		return
	}
	m := t.moreLocked()
	if !m.reprobed.IsZero() && now.Sub(m.reprobed) < t.spec.Interval {
		s.reprobeSkips++
		return
	}
	m.reprobed = now
	t.reprobing = true
	if s.reprobes == nil {
		s.reprobes = make(map[string]uint64)
	}
	s.reprobes[l.reason]++
	if !t.inFlight && s.frame.ns(now) < t.next {
		// Due now and started now: a reprobe is not batched on the
		// schedule tick (see startBy), whose end may be up to
		// ScheduleTickMax away, since the loss is news to act on.
		s.setNextLocked(t, now)
		t.startNs = s.frame.ns(now)
		s.due.fix(t)
	}
}

// settleReprobeLocked ends t's reprobe once a result passed, or left it
// not on its way to a transition (an ignored timeout included): it goes
// back to its spec's intervals.
func settleReprobeLocked(t *target, r Result) {
	if t.reprobing && (r.Pass || !t.m.Transitioning()) {
		t.reprobing = false
	}
}

// intervalLocked returns the interval t is probed at now: its spec's for
// its machine (Spec.IntervalFor) or, after a lost connection and while
// its probes fail on the way to a transition, at most its reprobe fast
// interval: the spec's FastInterval, else the policy's.
func (s *scheduler) intervalLocked(t *target) time.Duration {
	iv := t.spec.IntervalFor(t.m)
	if t.reprobing && t.m.Transitioning() {
		fast := t.spec.FastInterval
		if fast <= 0 {
			fast = s.reprobe.FastInterval
		}
		iv = min(iv, fast)
	}
	return iv
}

// ReprobeCounts is what the checker did with lost connections.
type ReprobeCounts struct {
	// Reprobes counts the lost connections acted on, by the reason the
	// prober gave (e.g. "closed", "reset", "channel"): a probe brought
	// forward, or the probe in flight made to follow the fast interval
	// if it fails.
	Reprobes map[string]uint64
	// Skipped counts lost connections that brought nothing forward because
	// their target was reprobed less than one interval before.
	Skipped uint64
}

// Reprobes returns the counts of reprobes since New. It is safe for
// concurrent use.
func (c *Checker) Reprobes() ReprobeCounts {
	c.reg.lock()
	defer c.reg.unlock()
	return ReprobeCounts{Reprobes: maps.Clone(c.sched.reprobes), Skipped: c.sched.reprobeSkips}
}
