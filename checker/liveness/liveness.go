// Package liveness tells whether the checker itself still makes progress:
// a health checker must notice when it is not healthy itself. Each
// long-lived part of the checker keeps a progress Stamp, an atomic that a
// Watchdog reads without taking any of the checker's locks:
//
//   - the scheduler owes a pass from when it starts one until it ends it,
//     then from the time it set its timer for; waiting with no target due
//     it owes nothing;
//   - the committer owes progress from when it takes a batch of pending
//     state changes until it has stored and published it, and from the end
//     of a retry's backoff; waiting for work it owes nothing (work queued
//     wakes it at once, so work waiting means it is busy or backing off);
//   - the write lock (a WriteLock) owes progress from when a writer takes
//     it until the writer lets go;
//   - the watch hub (the history and the watchers, under the hub's lock),
//     the checker's lock and the commit queue's are probed: the Watchdog's
//     probe goroutine takes the lock and releases it, and the probe's age
//     is the age of the oldest wait for the lock. A probe still waiting
//     past the timeout means the lock is held by something that does not
//     let go.
//
// A component whose stamp is older than the timeout is stalled. The stamps
// are on the checker's clock, so a fake clock drives them in tests.
// Package checker builds a Watchdog of a Checker (checker.NewWatchdog).
//
// SampleStalls measures the process rather than a part: how long the Go
// scheduler kept runnable goroutines waiting, which the checker's overload
// detection takes as a sign that it cannot keep up (Checker.NoteStall).
package liveness

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultTimeout is how long a component of the checker may go without
// progress before a Watchdog reports it stalled, if Config.Timeout is 0.
const DefaultTimeout = 30 * time.Second

// The components a Watchdog watches, as Stall.Component names them (and
// pulsed's pulse_stalled metric labels them).
const (
	ComponentScheduler   = "scheduler"
	ComponentCommitter   = "committer" // only with a store
	ComponentWriteLock   = "write_lock"
	ComponentWatchHub    = "watch_hub"
	ComponentLock        = "checker_lock"
	ComponentCommitQueue = "commit_queue" // only with a store
)

// Stall is a component of the checker that has made no progress for
// longer than the Watchdog's timeout.
type Stall struct {
	// Component is one of the Component names.
	Component string
	// For is how long the component has owed progress: since it was due to
	// make some; for the write lock, since its holder took it; for a
	// probed lock, since the probe started waiting for it.
	For time.Duration
}

// String says what stalled, e.g. "scheduler: no progress for 41s" or
// "checker_lock: lock held for 41s".
func (s Stall) String() string {
	d := s.For.Round(time.Second)
	if s.For < 10*time.Second {
		d = s.For.Round(10 * time.Millisecond)
	}
	switch s.Component {
	case ComponentLock, ComponentWatchHub, ComponentWriteLock, ComponentCommitQueue:
		return fmt.Sprintf("%s: lock held for %v", s.Component, d)
	}
	return fmt.Sprintf("%s: no progress for %v", s.Component, d)
}

// Stamp is a progress stamp: when its component was due to make
// progress, as one plus the nanoseconds after a base on the checker's
// clock, or 0 while it owes none. Its component writes it, a Watchdog
// reads it; no lock guards it. Start sets its base before its first use.
type Stamp struct {
	base time.Time // stamps are offsets from it (monotonic with the wall clock)
	due  atomic.Int64
}

// Start sets the time s's stamps are offsets from; call it once, before
// s is used.
func (s *Stamp) Start(base time.Time) { s.base = base }

// Set records that s's component owes progress from due on; a zero due
// means it owes none.
func (s *Stamp) Set(due time.Time) {
	if due.IsZero() {
		s.due.Store(0)
		return
	}
	s.due.Store(max(int64(due.Sub(s.base)), 0) + 1)
}

// Due returns when s's component was due to make progress; ok is false
// while it owes none.
func (s *Stamp) Due() (due time.Time, ok bool) {
	ns := s.due.Load()
	return s.base.Add(time.Duration(ns - 1)), ns != 0
}

// overdue returns how long s's component has owed progress at now; owing
// is false when it owes none.
func (s *Stamp) overdue(now time.Time) (d time.Duration, owing bool) {
	due := s.due.Load()
	if due == 0 {
		return 0, false
	}
	return now.Sub(s.base) - time.Duration(due-1), true
}

// WriteLock is a mutex whose Stamp owes progress from when a holder takes
// it until the holder lets go, so that a Watchdog reads how long the
// current holder has had it without taking the lock. Init it before use.
type WriteLock struct {
	mu   sync.Mutex
	now  func() time.Time
	held Stamp
}

// Init sets the clock of l's stamp; call it before l is used.
func (l *WriteLock) Init(now func() time.Time) {
	l.now = now
	l.held.Start(now())
}

// Lock takes the lock and stamps that its holder owes progress.
func (l *WriteLock) Lock() {
	l.mu.Lock()
	l.held.Set(l.now())
}

// Unlock clears the stamp and lets go of the lock.
func (l *WriteLock) Unlock() {
	l.held.Set(time.Time{})
	l.mu.Unlock()
}

// Held returns l's stamp.
func (l *WriteLock) Held() *Stamp { return &l.held }

// Parts are what a Watchdog watches, and the clock their stamps are on.
type Parts struct {
	Scheduler *Stamp
	Committer *Stamp // nil: none (a checker without a store)
	WriteLock *Stamp
	// Locks are the locks probed, by component name, in the order Check
	// reports them.
	Locks []Lock
	// Now is the clock's time; Timer returns a timer that fires once the
	// clock reaches at, and its Stop.
	Now   func() time.Time
	Timer func(at time.Time) (c <-chan time.Time, stop func() bool)
}

// Lock is a lock a Watchdog probes.
type Lock struct {
	Component string
	Locker    sync.Locker
}

// Config configures a Watchdog. Every field is optional.
type Config struct {
	// Timeout is how long a component may go without progress before it is
	// stalled. If 0, DefaultTimeout.
	Timeout time.Duration
	// Interval is how often the Watchdog looks, on the checker's clock. If
	// 0, a tenth of Timeout, at most one second.
	Interval time.Duration
	// Logger receives an error when a component stalls and an info line
	// when it progresses again: one each per episode. If nil, nothing is
	// logged.
	Logger *slog.Logger
	// OnChange is called with the stalled components whenever the set of
	// them changes (nil once none is stalled), in order, from the
	// goroutine that runs Check. It must return quickly and must not call
	// back into the Watchdog. If nil, nobody is told.
	OnChange func([]Stall)
}

// Watchdog watches the checker's own progress (see the package comment)
// and reports its stalled components. Its methods are safe for concurrent
// use, and none of them takes the checker's locks: only its lock probes
// do, in goroutines of their own. Create it with New; Start runs Check
// every Interval until Close.
type Watchdog struct {
	parts    Parts
	timeout  time.Duration
	interval time.Duration
	logger   *slog.Logger
	onChange func([]Stall)
	locks    []lockProbe // in the order of Components

	mu       sync.Mutex           // protects episodes and last, and serialises Check
	episodes map[string]time.Time // stalled components, by when they were due
	last     []Stall

	run     sync.Mutex    // protects started and closed
	started bool          // Start ran the loop
	closed  bool          // Close was called
	stop    chan struct{} // closed by Close
	done    chan struct{} // closed when the loop has ended
}

// lockProbe probes one lock: waiting is the stamp of the probe in
// progress, zero when none is.
type lockProbe struct {
	Lock
	waiting Stamp
}

// New returns a Watchdog of parts that has not started.
func New(parts Parts, cfg Config) (*Watchdog, error) {
	if cfg.Timeout < 0 || cfg.Interval < 0 {
		return nil, errors.New("the watchdog's Timeout and Interval must not be negative")
	}
	w := &Watchdog{
		parts:    parts,
		timeout:  cmp.Or(cfg.Timeout, DefaultTimeout),
		interval: cfg.Interval,
		logger:   cfg.Logger,
		onChange: cfg.OnChange,
		episodes: make(map[string]time.Time),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	w.locks = make([]lockProbe, len(parts.Locks))
	for i, l := range parts.Locks {
		w.locks[i].Lock = l
		w.locks[i].waiting.Start(parts.Now())
	}
	if w.interval == 0 {
		w.interval = min(w.timeout/10, time.Second)
	}
	if w.logger == nil {
		w.logger = slog.New(slog.DiscardHandler)
	}
	return w, nil
}

// Timeout returns how long a component may go without progress.
func (w *Watchdog) Timeout() time.Duration { return w.timeout }

// Components returns the names of the components w watches, in the order
// Check reports them.
func (w *Watchdog) Components() []string {
	out := []string{ComponentScheduler}
	if w.parts.Committer != nil {
		out = append(out, ComponentCommitter)
	}
	out = append(out, ComponentWriteLock)
	for i := range w.locks {
		out = append(out, w.locks[i].Component)
	}
	return out
}

// Start runs Check every Interval, in the background, until Close. Calling
// it more than once, or after Close, has no further effect.
func (w *Watchdog) Start() {
	w.run.Lock()
	defer w.run.Unlock()
	if w.started || w.closed {
		return
	}
	w.started = true
	go w.loop()
}

func (w *Watchdog) loop() {
	defer close(w.done)
	for {
		c, stop := w.parts.Timer(w.parts.Now().Add(w.interval))
		select {
		case <-w.stop:
			stop()
			return
		case <-c:
		}
		w.Check(w.parts.Now())
	}
}

// Close stops the loop Start began. It does not wait for a lock probe
// still waiting: that one ends when it gets its lock. It is idempotent.
func (w *Watchdog) Close() {
	w.run.Lock()
	if w.closed {
		w.run.Unlock()
		return
	}
	w.closed = true
	close(w.stop)
	started := w.started
	w.run.Unlock()
	if started {
		<-w.done
	}
}

// Stalls returns what the last Check found: nil when nothing is stalled.
func (w *Watchdog) Stalls() []Stall {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.last)
}

// Probing reports whether w's probe of the named lock is still waiting
// for it (false for a component that is not a probed lock).
func (w *Watchdog) Probing(component string) bool {
	for i := range w.locks {
		if w.locks[i].Component == component {
			return w.locks[i].waiting.due.Load() != 0
		}
	}
	return false
}

// Check looks at every component at now (the checker's clock), starts a
// probe of each lock that has none in progress, logs the stalls that begin
// and end, tells OnChange when the set of stalled components changed, and
// returns the stalled components in the order of Components.
func (w *Watchdog) Check(now time.Time) []Stall {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Stall
	stamp := func(component string, s *Stamp) {
		if s == nil {
			return
		}
		if d, owing := s.overdue(now); owing && d > w.timeout {
			out = append(out, Stall{Component: component, For: d})
		}
	}
	stamp(ComponentScheduler, w.parts.Scheduler)
	stamp(ComponentCommitter, w.parts.Committer)
	stamp(ComponentWriteLock, w.parts.WriteLock)
	for i := range w.locks {
		p := &w.locks[i]
		d, owing := p.waiting.overdue(now)
		if !owing {
			p.waiting.Set(now)
			go func() {
				p.Locker.Lock()
				p.Locker.Unlock() // an empty critical section: the probe only measures the wait
				p.waiting.due.Store(0)
			}()
			continue
		}
		if d > w.timeout {
			out = append(out, Stall{Component: p.Component, For: d})
		}
	}
	w.noteLocked(now, out)
	return slices.Clone(out)
}

// noteLocked logs the stalls that begin and end with out, remembers out,
// and tells OnChange if the set of stalled components changed.
func (w *Watchdog) noteLocked(now time.Time, out []Stall) {
	changed := false
	for _, s := range out {
		if _, ok := w.episodes[s.Component]; ok {
			continue
		}
		changed = true
		w.episodes[s.Component] = now.Add(-s.For)
		w.logger.Error("pulsed is not live: "+s.String(), "part", s.Component, "stalled_for", s.For.String())
	}
	for comp, since := range w.episodes {
		if slices.ContainsFunc(out, func(s Stall) bool { return s.Component == comp }) {
			continue
		}
		changed = true
		delete(w.episodes, comp)
		w.logger.Info("pulsed is live again: "+comp+" progresses", "part", comp, "stalled_for", now.Sub(since).String())
	}
	w.last = out
	if changed && w.onChange != nil {
		w.onChange(slices.Clone(out))
	}
}
