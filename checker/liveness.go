package checker

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Liveness is whether the checker itself still makes progress: a health
// checker must notice when it is not healthy itself. Each long-lived part
// of the checker keeps a progress stamp, an atomic that a Watchdog reads
// without taking any of the checker's locks:
//
//   - the scheduler owes a pass from when it starts one until it ends it,
//     then from the time it set its timer for; waiting with no target due
//     it owes nothing;
//   - the committer owes progress from when it takes a batch of pending
//     state changes until it has stored and published it, and from the end
//     of a retry's backoff; waiting for work it owes nothing (work queued
//     wakes it at once, so work waiting means it is busy or backing off);
//   - the watch hub (the history and the watchers, under the hub's lock) and the
//     checker's lock (mu) are probed: the Watchdog's probe goroutine takes
//     the lock and releases it, and the probe's age is the age of the
//     oldest wait for the lock. A probe still waiting past the timeout means
//     the lock is held by something that does not let go.
//
// A component whose stamp is older than the timeout is stalled. The stamps
// are on the checker's Clock, so a fake clock drives them in tests.

// DefaultLivenessTimeout is how long a component of the checker may go
// without progress before a Watchdog reports it stalled, if
// WatchdogConfig.Timeout is 0.
const DefaultLivenessTimeout = 30 * time.Second

// The components a Watchdog watches, as Stall.Component names them (and
// pulsed's pulse_stalled metric labels them).
const (
	ComponentScheduler   = "scheduler"
	ComponentCommitter   = "committer" // only with a Store
	ComponentWriteLock   = "write_lock"
	ComponentWatchHub    = "watch_hub"
	ComponentLock        = "checker_lock"
	ComponentCommitQueue = "commit_queue" // only with a Store
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

// progress is a progress stamp: when its component was due to make
// progress, as one plus the nanoseconds after base on the checker's
// clock, or 0 while it owes none. Its component writes it, a Watchdog
// reads it; no lock guards it.
type progress struct {
	base time.Time // set before use: stamps are offsets from it (monotonic with RealClock)
	due  atomic.Int64
}

// set records that p's component owes progress from due on; a zero due
// means it owes none.
func (p *progress) set(due time.Time) {
	if due.IsZero() {
		p.due.Store(0)
		return
	}
	p.due.Store(max(int64(due.Sub(p.base)), 0) + 1)
}

// overdue returns how long p's component has owed progress at now; owing
// is false when it owes none.
func (p *progress) overdue(now time.Time) (d time.Duration, owing bool) {
	due := p.due.Load()
	if due == 0 {
		return 0, false
	}
	return now.Sub(p.base) - time.Duration(due-1), true
}

// writeLock is the façade's wmu: one spec or policy write at a time, held
// across its write to the store. Its stamp owes progress from when a
// writer takes it until the writer lets go (see above), so a Watchdog
// reads how long the current write has taken without taking the lock.
type writeLock struct {
	mu    sync.Mutex
	clock Clock
	held  progress
}

// init sets the clock of l's stamp; call it before l is used.
func (l *writeLock) init(clock Clock) {
	l.clock = clock
	l.held.base = clock.Now()
}

// Lock takes the lock and stamps that its holder owes progress.
func (l *writeLock) Lock() {
	l.mu.Lock()
	l.held.set(l.clock.Now())
}

// Unlock clears the stamp and lets go of the lock.
func (l *writeLock) Unlock() {
	l.held.set(time.Time{})
	l.mu.Unlock()
}

// WatchdogConfig configures a Watchdog. Every field is optional.
type WatchdogConfig struct {
	// Timeout is how long a component may go without progress before it is
	// stalled. If 0, DefaultLivenessTimeout.
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

// Watchdog watches a Checker's own progress (see the stamps above) and
// reports its stalled components. Its methods are safe for concurrent use,
// and none of them takes the checker's locks: only its lock probes do, in
// goroutines of their own. Create it with NewWatchdog; Start runs Check
// every Interval until Close.
type Watchdog struct {
	c        *Checker
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
	component string
	lock      sync.Locker
	waiting   progress
}

// NewWatchdog returns a Watchdog of c that has not started.
func NewWatchdog(c *Checker, cfg WatchdogConfig) (*Watchdog, error) {
	if cfg.Timeout < 0 || cfg.Interval < 0 {
		return nil, errors.New("the watchdog's Timeout and Interval must not be negative")
	}
	w := &Watchdog{
		c:        c,
		timeout:  cfg.Timeout,
		interval: cfg.Interval,
		logger:   cfg.Logger,
		onChange: cfg.OnChange,
		locks: []lockProbe{
			{component: ComponentWatchHub, lock: c.hub.locker()},
			{component: ComponentLock, lock: c.reg.locker()},
		},
		episodes: make(map[string]time.Time),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	if c.commit != nil {
		w.locks = append(w.locks, lockProbe{component: ComponentCommitQueue, lock: &c.commit.mu})
	}
	for i := range w.locks {
		w.locks[i].waiting.base = c.clock.Now()
	}
	if w.timeout == 0 {
		w.timeout = DefaultLivenessTimeout
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
	if w.c.commit != nil {
		out = append(out, ComponentCommitter)
	}
	out = append(out, ComponentWriteLock)
	for i := range w.locks {
		out = append(out, w.locks[i].component)
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
	clock := w.c.clock
	for {
		t := clock.TimerAt(clock.Now().Add(w.interval))
		select {
		case <-w.stop:
			t.Stop()
			return
		case <-t.C():
		}
		w.Check(clock.Now())
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

// Check looks at every component at now (the checker's clock), starts a
// probe of each lock that has none in progress, logs the stalls that begin
// and end, tells OnChange when the set of stalled components changed, and
// returns the stalled components in the order of Components.
func (w *Watchdog) Check(now time.Time) []Stall {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Stall
	sched, commit := w.c.stamps()
	if d, owing := sched.overdue(now); owing && d > w.timeout {
		out = append(out, Stall{Component: ComponentScheduler, For: d})
	}
	if commit != nil {
		if d, owing := commit.overdue(now); owing && d > w.timeout {
			out = append(out, Stall{Component: ComponentCommitter, For: d})
		}
	}
	if d, owing := w.c.wmu.held.overdue(now); owing && d > w.timeout {
		out = append(out, Stall{Component: ComponentWriteLock, For: d})
	}
	for i := range w.locks {
		p := &w.locks[i]
		d, owing := p.waiting.overdue(now)
		if !owing {
			p.waiting.set(now)
			go func() {
				p.lock.Lock()
				p.lock.Unlock() // an empty critical section: the probe only measures the wait
				p.waiting.due.Store(0)
			}()
			continue
		}
		if d > w.timeout {
			out = append(out, Stall{Component: p.component, For: d})
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

// stamps returns the progress stamps of the scheduler and, with a store,
// of the committer (nil without one).
func (c *Checker) stamps() (sched, commit *progress) {
	if c.commit != nil {
		commit = c.commit.progress()
	}
	return c.sched.progress(), commit
}
