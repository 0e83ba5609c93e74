package checker

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"
)

// EventKind says what an Event records.
type EventKind int

// The kinds of events. Every event has its own revision.
const (
	// EventTransition: a target's state changed.
	EventTransition EventKind = iota + 1
	// EventAdded: Add created a target.
	EventAdded
	// EventUpdated: Add replaced a target's spec.
	EventUpdated
	// EventRemoved: Remove removed a target.
	EventRemoved
	// EventPanicEntered: a group's panic threshold started holding a
	// transition to unhealthy; see Event.Policy.
	EventPanicEntered
	// EventPanicExited: the group holds no target any more.
	EventPanicExited
	// EventFlappingStarted: a target's verdict changed Spec.FlapThreshold
	// times within Spec.FlapWindow; flap damping holds it unhealthy.
	EventFlappingStarted
	// EventFlappingEnded: the target was stable for Spec.FlapStableFor, or
	// its damping was turned off.
	EventFlappingEnded
	// EventCheckerDegraded: the checker is overloaded; its own probe
	// timeouts do not count until it recovers.
	EventCheckerDegraded
	// EventCheckerRecovered: the checker keeps up again.
	EventCheckerRecovered
)

// String returns the kind's name as the API spells it, e.g.
// "PANIC_ENTERED" or "TRANSITION".
func (k EventKind) String() string {
	switch k {
	case EventTransition:
		return "TRANSITION"
	case EventAdded:
		return "ADDED"
	case EventUpdated:
		return "UPDATED"
	case EventRemoved:
		return "REMOVED"
	case EventPanicEntered:
		return "PANIC_ENTERED"
	case EventPanicExited:
		return "PANIC_EXITED"
	case EventFlappingStarted:
		return "FLAPPING_STARTED"
	case EventFlappingEnded:
		return "FLAPPING_ENDED"
	case EventCheckerDegraded:
		return "CHECKER_DEGRADED"
	case EventCheckerRecovered:
		return "CHECKER_RECOVERED"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// IsPolicy reports whether the kind is a policy event (panic, flapping,
// checker overload), whose details are in Event.Policy.
func (k EventKind) IsPolicy() bool { return k >= EventPanicEntered && k <= EventCheckerRecovered }

// PolicyChange details a policy event. Policy events change no target's
// state by themselves: the transitions they lead to are events of their
// own.
type PolicyChange struct {
	// Group is the group of a panic event, and the target's group of a
	// flapping event; empty for checker events.
	Group string
	// Target is the target of a flapping event.
	Target string
	// Text says what happened, e.g. "edge: panic entered, holding web-3 (2
	// of 4 unhealthy, at most 2)"; it is the event's log message.
	Text string
	// Held lists the targets a group holds, sorted (panic events).
	Held []string
	// Targets, Unhealthy and MaxUnhealthy are the group's counts (panic
	// events).
	Targets, Unhealthy, MaxUnhealthy int
	// Transitions is the target's verdict changes in its flap window
	// (flapping events).
	Transitions int
}

// Event is one change to the registry. The checker numbers events with one
// revision counter: each event's Revision is one more than the previous
// event's.
type Event struct {
	Revision uint64
	Kind     EventKind
	Time     time.Time
	// Transition is the state change, for EventTransition.
	Transition Transition
	// Status is the target after the event for EventAdded and
	// EventUpdated, and as it was when removed for EventRemoved.
	Status Status
	// Policy details a policy event (Kind.IsPolicy).
	Policy PolicyChange

	prevGroup string // EventUpdated: the group before, for group filters
}

// Target returns the name of the target the event is about; "" for panic
// and checker events.
func (e Event) Target() string {
	switch {
	case e.Kind == EventTransition:
		return e.Transition.Target
	case e.Kind.IsPolicy():
		return e.Policy.Target
	}
	return e.Status.Spec.Name
}

// Group returns the group of the target the event is about (after the
// event, for EventUpdated), or of the group a panic event is about; "" for
// checker events.
func (e Event) Group() string {
	switch {
	case e.Kind == EventTransition:
		return e.Transition.Group
	case e.Kind.IsPolicy():
		return e.Policy.Group
	}
	return e.Status.Spec.Group
}

// Filter selects the events a Watcher receives. Empty fields match
// everything; when both are set an event must match both. A target moved
// to another group by an update matches both groups' filters for that
// update. Policy events about a group (panic) match on the group alone,
// whatever the names; checker events (overload) match every filter.
type Filter struct {
	Group string
	Names []string
}

// Errors a Watch or a Watcher returns; test for them with errors.Is and read
// the details with errors.As.
var (
	// ErrCompacted: the requested start revision is older than the history.
	ErrCompacted = errors.New("revision compacted")
	// ErrFutureRevision: the requested start revision is ahead of the
	// checker's.
	ErrFutureRevision = errors.New("revision is in the future")
)

// CompactedError says a watch cannot resume from Requested: the events
// after it are no longer held. Oldest is the oldest revision a watch can
// still resume from.
type CompactedError struct{ Requested, Oldest uint64 }

func (e *CompactedError) Error() string {
	return fmt.Sprintf("start revision %d is older than the history: the oldest revision a watch can resume from is %d", e.Requested, e.Oldest)
}

// Is makes errors.Is(err, ErrCompacted) true.
func (e *CompactedError) Is(target error) bool { return target == ErrCompacted }

// FutureRevisionError says Requested is ahead of the checker's Current
// revision.
type FutureRevisionError struct{ Requested, Current uint64 }

func (e *FutureRevisionError) Error() string {
	return fmt.Sprintf("start revision %d is ahead of the current revision %d", e.Requested, e.Current)
}

// Is makes errors.Is(err, ErrFutureRevision) true.
func (e *FutureRevisionError) Is(target error) bool { return target == ErrFutureRevision }

// BehindError ends a Watcher that fell further behind than the history
// holds. Every matching event up to LastDelivered was delivered, so a new
// watch can resume from it.
type BehindError struct{ LastDelivered uint64 }

func (e *BehindError) Error() string {
	return fmt.Sprintf("%v: the last revision delivered is %d", ErrSubscriberTooSlow, e.LastDelivered)
}

// Is makes errors.Is(err, ErrSubscriberTooSlow) true.
func (e *BehindError) Is(target error) bool { return target == ErrSubscriberTooSlow }

// Watcher follows the registry's events from a start revision. Its methods
// are safe for concurrent use, but one goroutine normally owns it: it waits
// on Ready and calls Next.
//
// Delivery never blocks the checker. Events are kept once, in the checker's
// bounded history; a watcher only holds its position in it. A watcher whose
// next matching event is about to leave the history is ended with a
// *BehindError, so it never silently misses an event.
type Watcher struct {
	c     *Checker
	group string
	names map[string]bool // nil means any name
	ready chan struct{}   // signalled when Next may have something

	snap    []Status // the snapshot, until taken
	snapRev uint64

	// Guarded by c.hmu.
	cursor uint64 // every matching event up to here was handed out
	err    error  // why the watcher ended
	ended  bool
}

// Watch returns a watcher of the events matching f.
//
// With start 0 it begins with a snapshot: Snapshot returns every matching
// target's status at the current revision R, and Next returns the events
// after R. With start N > 0 Next returns the events after N; N older than the
// history returns a *CompactedError, N ahead of the current revision a
// *FutureRevisionError. If the checker is closed, Watch returns ErrClosed.
func (c *Checker) Watch(f Filter, start uint64) (*Watcher, error) {
	w := &Watcher{c: c, group: f.Group, ready: make(chan struct{}, 1)}
	if len(f.Names) > 0 {
		w.names = make(map[string]bool, len(f.Names))
		for _, n := range f.Names {
			w.names[n] = true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	snapshot := start == 0
	if snapshot {
		now := c.clock.Now()
		for _, t := range c.targets {
			if w.matchesTarget(t.spec.Name, t.spec.Group) {
				w.snap = append(w.snap, c.statusLocked(t, now))
			}
		}
		slices.SortFunc(w.snap, func(a, b Status) int { return cmp.Compare(a.Spec.Name, b.Spec.Name) })
		w.snapRev = c.rev
		start = c.rev
	}
	c.hmu.Lock()
	defer c.hmu.Unlock()
	// A resume is measured against what is published: a snapshot may be
	// ahead of it, and then its events wait for the committer.
	last := c.hist.last
	if !snapshot && start > last {
		return nil, &FutureRevisionError{Requested: start, Current: last}
	}
	if start < c.hist.floor {
		return nil, &CompactedError{Requested: start, Oldest: c.hist.floor}
	}
	if max := c.limits.MaxWatchers; max > 0 && c.watchersLocked() >= max {
		return nil, &LimitError{What: "watchers", Max: max}
	}
	w.cursor = start
	c.addWatcherLocked(w)
	if start < last {
		w.signal()
	}
	return w, nil
}

// Snapshot returns, once, the statuses and revision of the snapshot a
// watch with start revision 0 began with; later calls return nil and the
// same revision. With a store it first waits until the snapshot's revision
// is stored, so nothing unstored is ever shown.
func (w *Watcher) Snapshot() ([]Status, uint64) {
	if w.c.store != nil {
		w.c.waitPublished(w.snapRev)
	}
	w.c.hmu.Lock()
	defer w.c.hmu.Unlock()
	s := w.snap
	w.snap = nil
	return s, w.snapRev
}

// Ready is signalled when Next may have events or an error to return.
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

// Next returns up to max matching events after the watcher's position, in
// revision order, and moves past them. It returns nil events when there is
// nothing new, and an error once the watcher has ended: a *BehindError,
// ErrClosed, or ErrClosed after Close.
func (w *Watcher) Next(max int) ([]Event, error) { return w.NextAppend(nil, max) }

// NextAppend is Next appending the events to buf and returning the
// extended buffer (buf itself when there is nothing new or the watcher has
// ended): a caller that reuses its buffer copies each event into it instead
// of allocating per call.
func (w *Watcher) NextAppend(buf []Event, max int) ([]Event, error) {
	c := w.c
	c.hmu.Lock()
	defer c.hmu.Unlock()
	if w.ended {
		if w.err == nil {
			return buf, ErrClosed
		}
		return buf, w.err
	}
	w.skipEvictedLocked()
	out := buf
	n := 0 // events taken
	i := c.hist.after(w.cursor)
	for ; i < c.hist.n && n < max; i++ {
		e := c.hist.get(i)
		w.cursor = e.Revision
		if w.matches(e) {
			out = append(out, *e)
			n++
		}
	}
	if i == c.hist.n {
		w.cursor = c.hist.last
	} else {
		w.signal() // more to come
	}
	return out, nil
}

// Progress reports the revision up to which the watcher has been handed
// every matching event, when it has nothing pending: a stream can send it as
// a progress mark. ok is false when matching events are waiting for Next.
func (w *Watcher) Progress() (rev uint64, ok bool) {
	c := w.c
	c.hmu.Lock()
	defer c.hmu.Unlock()
	if w.ended {
		return w.cursor, false
	}
	w.skipEvictedLocked()
	for i := c.hist.after(w.cursor); i < c.hist.n; i++ {
		e := c.hist.get(i)
		if w.matches(e) {
			return w.cursor, false
		}
		w.cursor = e.Revision
	}
	w.cursor = c.hist.last
	return w.cursor, true
}

// Close ends the watcher. It is idempotent.
func (w *Watcher) Close() {
	w.c.hmu.Lock()
	defer w.c.hmu.Unlock()
	w.c.endLocked(w, nil)
}

// skipEvictedLocked moves the position past events that left the history
// without ending the watcher: none of them matched it, or it would have been
// ended (see evictedLocked).
func (w *Watcher) skipEvictedLocked() {
	if w.cursor < w.c.hist.floor {
		w.cursor = w.c.hist.floor
	}
}

func (w *Watcher) signal() {
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

func (w *Watcher) matchesTarget(name, group string) bool {
	return (w.group == "" || w.group == group) && (w.names == nil || w.names[name])
}

func (w *Watcher) matches(e *Event) bool {
	switch e.Kind {
	case EventCheckerDegraded, EventCheckerRecovered:
		return true
	case EventPanicEntered, EventPanicExited:
		return w.group == "" || w.group == e.Policy.Group
	}
	if w.matchesTarget(e.Target(), e.Group()) {
		return true
	}
	return e.Kind == EventUpdated && w.matchesTarget(e.Target(), e.prevGroup)
}

// endLocked ends w with err; c.hmu must be held.
func (c *Checker) endLocked(w *Watcher, err error) {
	if w.ended {
		return
	}
	w.ended, w.err = true, err
	w.snap = nil
	set := c.watchers[w.group]
	delete(set, w)
	if len(set) == 0 {
		delete(c.watchers, w.group)
	}
	w.signal()
}

func (c *Checker) addWatcherLocked(w *Watcher) {
	set := c.watchers[w.group]
	if set == nil {
		set = make(map[*Watcher]struct{})
		c.watchers[w.group] = set
	}
	set[w] = struct{}{}
}

// eachCandidateLocked calls f for every watcher whose group filter may
// match e: watchers of every group, of e's group, and, for an update, of
// the group the target left. Each watcher is visited once.
func (c *Checker) eachCandidateLocked(e *Event, f func(*Watcher)) {
	visit := func(group string) {
		for w := range c.watchers[group] {
			f(w)
		}
	}
	if e.Kind == EventCheckerDegraded || e.Kind == EventCheckerRecovered {
		for _, set := range c.watchers { // rare: every watcher
			for w := range set {
				f(w)
			}
		}
		return
	}
	visit("")
	if g := e.Group(); g != "" {
		visit(g)
	}
	if e.Kind == EventUpdated && e.prevGroup != "" && e.prevGroup != e.Group() {
		visit(e.prevGroup)
	}
}

// emitLocked numbers e and publishes it, or, with a store, hands it to the
// committer, which publishes it once its state change is stored. c.mu must
// be held; it takes c.hmu (lock order: mu, then hmu).
func (c *Checker) emitLocked(e Event) Event {
	if c.shared != nil {
		return c.emitSharedLocked(e)
	}
	c.rev++
	e.Revision = c.rev
	if e.Kind == EventTransition {
		e.Transition.Revision = c.rev
	}
	if e.Kind == EventTransition || e.Kind.IsPolicy() {
		c.reports = append(c.reports, e)
	}
	if c.store != nil {
		p := pending{ev: e}
		switch e.Kind {
		case EventAdded:
			p.state = &StoredState{Name: e.Status.Spec.Name, State: e.Status.State, LastTransition: e.Status.LastTransition}
		case EventTransition:
			p.state = &StoredState{Name: e.Transition.Target, State: e.Transition.To, LastTransition: e.Transition.Time}
		case EventRemoved:
			p.deleted = e.Status.Spec.Name
		}
		c.queueLocked(p)
		return e
	}
	c.hmu.Lock()
	defer c.hmu.Unlock()
	c.publishLocked(e)
	return e
}

// emitSharedLocked numbers e with the shared registry's revision being
// applied and publishes it. An event outside ApplyShared concerns this
// replica alone (overload): it is logged and observed, not streamed.
func (c *Checker) emitSharedLocked(e Event) Event {
	e.Revision = c.applying
	if e.Kind == EventTransition {
		e.Transition.Revision = c.applying
	}
	if e.Kind == EventTransition || e.Kind.IsPolicy() {
		c.reports = append(c.reports, e)
	}
	if c.applying == 0 {
		return e
	}
	c.hmu.Lock()
	defer c.hmu.Unlock()
	c.publishLocked(e)
	return e
}

// publishLocked appends e to the history and wakes the watchers it matches.
// c.hmu must be held.
func (c *Checker) publishLocked(e Event) {
	if evicted := c.hist.push(e); evicted != nil {
		c.evictedLocked(evicted)
	}
	c.eachCandidateLocked(&e, func(w *Watcher) {
		if w.matches(&e) {
			w.signal()
		}
	})
}

// evictedLocked ends every watcher that had not yet been handed an event
// it matches that just left the history. Watchers it does not match skip it
// lazily (skipEvictedLocked), so the cost is that of the matching watchers.
func (c *Checker) evictedLocked(e *Event) {
	c.eachCandidateLocked(e, func(w *Watcher) {
		if w.cursor < e.Revision && w.matches(e) {
			c.endLocked(w, &BehindError{LastDelivered: w.cursor})
		}
	})
}

// Watchers returns how many watchers are live.
func (c *Checker) Watchers() int {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	return c.watchersLocked()
}

func (c *Checker) watchersLocked() int {
	n := 0
	for _, set := range c.watchers {
		n += len(set)
	}
	return n
}

// Revision returns the revision of the newest published event: a watch
// can resume from it.
func (c *Checker) Revision() uint64 {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	return c.hist.last
}

// history is a ring of the newest events, in revision order. Revisions
// increase but need not be dense: with a shared registry they are the
// registry's revisions, and some of those are not events (see advance).
type history struct {
	buf   []Event
	start int    // index of the oldest event
	n     int    // events held
	last  uint64 // the newest revision: the newest event's, or a later one without an event
	floor uint64 // every event up to floor has left the history: a resume needs start >= floor
}

func newHistory(size int, rev uint64) history {
	return history{buf: make([]Event, size), last: rev, floor: rev}
}

// get returns the i-th event held, oldest first.
func (h *history) get(i int) *Event {
	return &h.buf[(h.start+i)%len(h.buf)]
}

// after returns the index of the oldest event held whose revision is after
// rev, or h.n if there is none.
func (h *history) after(rev uint64) int {
	if h.n == 0 || h.get(h.n-1).Revision <= rev {
		return h.n // the common case: nothing new
	}
	return sort.Search(h.n, func(i int) bool { return h.get(i).Revision > rev })
}

// push appends e, whose revision is after last, and returns a copy of the
// event it evicted, if any.
func (h *history) push(e Event) *Event {
	var evicted *Event
	if h.n == len(h.buf) {
		old := h.buf[h.start]
		evicted = &old
		h.floor = old.Revision
		h.buf[h.start] = e
		h.start = (h.start + 1) % len(h.buf)
	} else {
		h.buf[(h.start+h.n)%len(h.buf)] = e
		h.n++
	}
	h.last = e.Revision
	return evicted
}

// advance moves the newest revision to rev, a revision without an event.
func (h *history) advance(rev uint64) {
	if rev > h.last {
		h.last = rev
	}
}
