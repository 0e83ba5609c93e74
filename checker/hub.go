package checker

import (
	"context"
	"sort"
	"sync"
	"time"
)

// hub is the watch hub: the history of published events and the watchers,
// each only a position in that history. One producer feeds it events in
// revision order (publish): the registry itself without a store, the
// committer once it has stored them, the replication as it applies the
// shared registry's changes. It never calls out: publishing appends to the
// history and signals the watchers' Ready channels, and a watcher reads
// at its own pace (Next), so a slow watcher never blocks the producer.
//
// Its one lock, mu, is the last in the checker's lock order: it is taken
// with the registry's lock held (a watch starts from a snapshot at the
// registry's revision) and never the other way round.
type hub struct {
	maxWatchers int // 0: no limit
	perSource   int // of one Filter.Source; 0: no limit

	mu       sync.Mutex                       // protects everything below and every *Watcher's position
	hist     history                          // published events; hist.last is the newest published revision
	watchers map[string]map[*Watcher]struct{} // by group filter; "" is every group
	bySource map[string]int                   // live watchers by Filter.Source, pulsed's own ("") aside
	advanced chan struct{}                    // closed when hist.last moves, if someone waits; nil otherwise
	done     chan struct{}                    // closed by close
	closed   bool
}

func newHub(size int, rev uint64, maxWatchers, perSource int) *hub {
	return &hub{
		maxWatchers: maxWatchers,
		perSource:   perSource,
		hist:        newHistory(size, rev),
		watchers:    make(map[string]map[*Watcher]struct{}),
		bySource:    make(map[string]int),
		done:        make(chan struct{}),
	}
}

// Watcher follows the registry's events from a start revision. Its methods
// are safe for concurrent use, but one goroutine normally owns it: it waits
// on Ready and calls Next.
//
// Delivery never blocks the checker. Events are kept once, in the checker's
// bounded history; a watcher only holds its position in it. A watcher whose
// next matching event is about to leave the history is ended with a
// *BehindError, so it never silently misses an event.
type Watcher struct {
	h      *hub
	group  string
	names  map[string]bool // nil means any name
	source string          // Filter.Source
	ready  chan struct{}   // signalled when Next may have something

	snap    []Status // the snapshot, until taken
	snapRev uint64

	// Guarded by h.mu.
	cursor uint64 // every matching event up to here was handed out
	err    error  // why the watcher ended
	ended  bool
}

// newWatcher returns a watcher of f's events, not yet added to h.
func (h *hub) newWatcher(f Filter) *Watcher {
	w := &Watcher{h: h, group: f.Group, source: f.Source, ready: make(chan struct{}, 1)}
	if len(f.Names) > 0 {
		w.names = make(map[string]bool, len(f.Names))
		for _, n := range f.Names {
			w.names[n] = true
		}
	}
	return w
}

// watch adds w at start. With snapshot set, start is the revision of w's
// snapshot snap, which may be ahead of what is published (its events still
// wait for the committer); otherwise start is a resume, measured against
// what is published.
func (h *hub) watch(w *Watcher, snap []Status, start uint64, snapshot bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	last := h.hist.last
	if !snapshot && start > last {
		return &FutureRevisionError{Requested: start, Current: last}
	}
	if start < h.hist.floor {
		return &CompactedError{Requested: start, Oldest: h.hist.floor}
	}
	if max := h.maxWatchers; max > 0 && h.countLocked() >= max {
		return &LimitError{Limit: LimitWatchers, What: "watchers", Max: max}
	}
	if max := h.perSource; max > 0 && w.source != "" && h.bySource[w.source] >= max {
		return &LimitError{Limit: LimitWatchersPerSource, What: "watchers from " + w.source, Max: max}
	}
	if w.source != "" {
		h.bySource[w.source]++
	}
	if snapshot {
		w.snap, w.snapRev = snap, start
	}
	w.cursor = start
	set := h.watchers[w.group]
	if set == nil {
		set = make(map[*Watcher]struct{})
		h.watchers[w.group] = set
	}
	set[w] = struct{}{}
	if start < last {
		w.signal()
	}
	return nil
}

// Snapshot returns, once, the statuses and revision of the snapshot a
// watch with start revision 0 began with; later calls return nil and the
// same revision. With a store it first waits until the snapshot's revision
// is stored, so nothing unstored is ever shown.
func (w *Watcher) Snapshot() ([]Status, uint64) {
	h := w.h
	_ = h.wait(context.Background(), w.snapRev, nil)
	h.mu.Lock()
	defer h.mu.Unlock()
	s := w.snap
	w.snap = nil
	return s, w.snapRev
}

// Ready is signalled when Next may have events or an error to return.
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

// Next returns up to max matching events after the watcher's position, in
// revision order, and moves past them. A batch holds whole revisions: when
// max falls inside a revision that carries several events, the rest of
// that revision comes in the same batch. It returns nil events when there is
// nothing new, and an error once the watcher has ended: a *BehindError,
// ErrClosed, or ErrClosed after Close. A watcher the checker's Close ended
// first hands out the events published before it, then returns ErrClosed:
// its position is then the last published revision, where a stream resumes
// after a restart on the same store.
func (w *Watcher) Next(max int) ([]Event, error) { return w.NextAppend(nil, max) }

// NextAppend is Next appending the events to buf and returning the
// extended buffer (buf itself when there is nothing new or the watcher has
// ended): a caller that reuses its buffer copies each event into it instead
// of allocating per call.
func (w *Watcher) NextAppend(buf []Event, max int) ([]Event, error) {
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.ended {
		if w.err == nil {
			return buf, ErrClosed
		}
		if w.err != ErrClosed || w.cursor >= h.hist.last {
			return buf, w.err
		}
		w.signal() // the next call goes on, or returns ErrClosed
	}
	w.skipEvictedLocked()
	out := buf
	n := 0 // events taken
	i := h.hist.after(w.cursor)
	for ; i < h.hist.n; i++ {
		rev := h.hist.rev(i)
		// With a shared registry one revision can carry several events (a
		// transaction that changed several targets, a transition and the
		// policy event it caused). A batch ends between revisions, never
		// inside one: the position is a revision, and a batch cut inside
		// one would skip the rest of it.
		if n >= max && rev != w.cursor {
			break
		}
		w.cursor = rev
		if k := h.hist.at(i); w.matches(&k.about) {
			out = append(out, Event{})
			k.fill(&out[len(out)-1])
			n++
		}
	}
	if i == h.hist.n {
		w.cursor = h.hist.last
	} else {
		w.signal() // more to come
	}
	return out, nil
}

// Progress reports the revision up to which the watcher has been handed
// every matching event, when it has nothing pending: a stream can send it as
// a progress mark. ok is false when matching events are waiting for Next.
func (w *Watcher) Progress() (rev uint64, ok bool) {
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.ended {
		return w.cursor, false
	}
	w.skipEvictedLocked()
	for i := h.hist.after(w.cursor); i < h.hist.n; i++ {
		if w.matches(&h.hist.at(i).about) {
			return w.cursor, false
		}
		// The position moves past a revision only once every event of
		// it is seen: a later event of the same revision may match.
		if rev := h.hist.rev(i); i+1 == h.hist.n || h.hist.rev(i+1) != rev {
			w.cursor = rev
		}
	}
	w.cursor = h.hist.last
	return w.cursor, true
}

// Wake signals Ready without an event, so that the watcher's owner, waiting
// on Ready alone, also wakes for a reason of its own (a timer); Next then
// returns what there is, often nothing. It is safe to call from any
// goroutine, at any time, also after Close.
func (w *Watcher) Wake() { w.signal() }

// Close ends the watcher. It is idempotent.
func (w *Watcher) Close() {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	w.h.endLocked(w, nil)
}

// skipEvictedLocked moves the position past events that left the history
// without ending the watcher: none of them matched it, or it would have been
// ended (see evictedLocked). The floor's revision may still be partly held
// (several events share a revision with a shared registry): then the
// position stops before it, so the rest of it is still handed out.
func (w *Watcher) skipEvictedLocked() {
	h := w.h
	if w.cursor >= h.hist.floor {
		return
	}
	skip := h.hist.floor
	if h.hist.n > 0 && h.hist.rev(0) == skip {
		skip-- // floor > cursor >= 0
	}
	w.cursor = max(w.cursor, skip)
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

func (w *Watcher) matches(a *about) bool {
	switch a.kind {
	case EventCheckerDegraded, EventCheckerRecovered:
		return true
	case EventPanicEntered, EventPanicExited:
		return w.group == "" || w.group == a.group
	}
	if w.matchesTarget(a.target, a.group) {
		return true
	}
	return a.kind == EventUpdated && w.matchesTarget(a.target, a.prevGroup)
}

// about is what a watcher's filter reads of an event.
type about struct {
	kind      EventKind
	target    string // Target
	group     string // Group
	prevGroup string // EventUpdated: the group the target left
}

func aboutOf(e *Event) about {
	return about{kind: e.Kind, target: e.Target(), group: e.Group(), prevGroup: e.prevGroup}
}

// endLocked ends w with err; h.mu must be held.
func (h *hub) endLocked(w *Watcher, err error) {
	if w.ended {
		return
	}
	w.ended, w.err = true, err
	w.snap = nil
	if w.source != "" {
		if h.bySource[w.source]--; h.bySource[w.source] <= 0 {
			delete(h.bySource, w.source)
		}
	}
	set := h.watchers[w.group]
	delete(set, w)
	if len(set) == 0 {
		delete(h.watchers, w.group)
	}
	w.signal()
}

// eachCandidateLocked calls f for every watcher whose group filter may
// match e: watchers of every group, of e's group, and, for an update, of
// the group the target left. Each watcher is visited once.
func (h *hub) eachCandidateLocked(e *about, f func(*Watcher)) {
	visit := func(group string) {
		for w := range h.watchers[group] {
			f(w)
		}
	}
	if e.kind == EventCheckerDegraded || e.kind == EventCheckerRecovered {
		for _, set := range h.watchers { // rare: every watcher
			for w := range set {
				f(w)
			}
		}
		return
	}
	visit("")
	if e.group != "" {
		visit(e.group)
	}
	if e.kind == EventUpdated && e.prevGroup != "" && e.prevGroup != e.group {
		visit(e.prevGroup)
	}
}

// publish appends events, in revision order and after every event
// published before, to the history and wakes the watchers they match.
//
// The watchers are signalled after mu is released: each one woken takes mu
// in Next, and signalling 1,000 of them under it kept the first ones
// waiting for it.
func (h *hub) publish(evs ...Event) {
	var wake []*Watcher
	h.mu.Lock()
	for i := range evs {
		if evicted, ok := h.hist.push(&evs[i]); ok {
			h.evictedLocked(&evicted)
		}
		a := &h.hist.at(h.hist.n - 1).about
		h.eachCandidateLocked(a, func(w *Watcher) {
			if w.matches(a) {
				wake = append(wake, w)
			}
		})
	}
	h.advancedLocked()
	h.mu.Unlock()
	// A watcher that reads before its signal finds the events; one that
	// read before they were pushed gets the signal, which its buffered
	// channel keeps.
	for _, w := range wake {
		w.signal()
	}
}

// advance moves the newest revision to rev, a revision without an event
// (with a shared registry, not every revision is an event).
func (h *hub) advance(rev uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hist.advance(rev)
	h.advancedLocked()
}

// advancedLocked wakes those waiting for the newest revision to move.
func (h *hub) advancedLocked() {
	if h.advanced != nil {
		close(h.advanced)
		h.advanced = nil
	}
}

// evictedLocked ends every watcher that had not yet been handed an event
// it matches that just left the history. Watchers it does not match skip it
// lazily (skipEvictedLocked), so the cost is that of the matching watchers.
func (h *hub) evictedLocked(e *keptEvent) {
	h.eachCandidateLocked(&e.about, func(w *Watcher) {
		if w.cursor < e.rev && w.matches(&e.about) {
			h.endLocked(w, &BehindError{LastDelivered: w.cursor})
		}
	})
}

// wait waits until every event up to rev is published. It returns nil
// then, ctx's error if ctx ends first, and ErrClosed if stop is closed or
// the hub closes first.
func (h *hub) wait(ctx context.Context, rev uint64, stop <-chan struct{}) error {
	for {
		h.mu.Lock()
		if h.hist.last >= rev {
			h.mu.Unlock()
			return nil
		}
		if h.advanced == nil {
			h.advanced = make(chan struct{})
		}
		ch := h.advanced
		h.mu.Unlock()
		select {
		case <-ch:
		case <-stop:
			return ErrClosed
		case <-h.done:
			return ErrClosed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// close ends every watcher with ErrClosed and those waiting in wait. It is
// idempotent.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	close(h.done)
	for _, set := range h.watchers {
		for w := range set {
			h.endLocked(w, ErrClosed)
		}
	}
}

// locker returns the hub's lock, for the Watchdog's lock probe.
func (h *hub) locker() sync.Locker { return &h.mu }

// count returns how many watchers are live.
func (h *hub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.countLocked()
}

func (h *hub) countLocked() int {
	n := 0
	for _, set := range h.watchers {
		n += len(set)
	}
	return n
}

// revision returns the revision of the newest published event.
func (h *hub) revision() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hist.last
}

// history is a ring of the newest events, in revision order. Revisions
// increase but need not be dense: with a shared registry they are the
// registry's revisions, and some of those are not events (see advance).
type history struct {
	buf   []keptEvent
	start int    // index of the oldest event
	n     int    // events held
	last  uint64 // the newest revision: the newest event's, or a later one without an event
	floor uint64 // every event before floor, and perhaps some of floor, has left the history: a resume needs start >= floor

	// The payloads, allocated a slab at a time: the collector marks a
	// slab as one object, not each event's payload.
	trs  slab[Transition]
	pols slab[PolicyChange]
	sts  slab[Status]
}

// slab hands out pointers to values copied into shared arrays of slabSize.
// An array lives while any event that points into it is held; the history
// evicts its oldest events first, so at most one array of each kind is
// held in part.
type slab[T any] struct{ buf []T }

const slabSize = 64

func (s *slab[T]) put(v *T) *T {
	if len(s.buf) == cap(s.buf) {
		s.buf = make([]T, 0, slabSize)
	}
	s.buf = append(s.buf, *v)
	return &s.buf[len(s.buf)-1]
}

// keptEvent is an event as the history keeps it: what watchers' filters
// read, the fields every event has, and the one payload its kind carries
// (see Event) behind a pointer. An Event has room for every kind's
// payload, a whole Status among them (992 bytes in all); kept so, a
// transition costs about 300 bytes, and a history of 10,000 events a third
// of the memory. A watcher's filter reads the event without rebuilding it,
// and a matching event is rebuilt once, into the watcher's batch.
type keptEvent struct {
	about
	rev  uint64
	time time.Time
	mode ModeChange
	tr   *Transition   // EventTransition
	pol  *PolicyChange // the policy kinds
	st   *Status       // the others
}

// keep returns e as the history keeps it.
func (h *history) keep(e *Event) keptEvent {
	k := keptEvent{about: aboutOf(e), rev: e.Revision, time: e.Time, mode: e.Mode}
	switch {
	case e.Kind == EventTransition:
		k.tr = h.trs.put(&e.Transition)
	case e.Kind.IsPolicy():
		k.pol = h.pols.put(&e.Policy)
	default:
		k.st = h.sts.put(&e.Status)
	}
	return k
}

// fill sets e, a zero Event, to the event as it was published.
func (k *keptEvent) fill(e *Event) {
	e.Revision, e.Kind, e.Time, e.Mode, e.prevGroup = k.rev, k.kind, k.time, k.mode, k.prevGroup
	switch {
	case k.tr != nil:
		e.Transition = *k.tr
	case k.pol != nil:
		e.Policy = *k.pol
	case k.st != nil:
		e.Status = *k.st
	}
}

func newHistory(size int, rev uint64) history {
	return history{buf: make([]keptEvent, size), last: rev, floor: rev}
}

// rev returns the revision of the i-th event held, oldest first.
func (h *history) rev(i int) uint64 {
	return h.buf[(h.start+i)%len(h.buf)].rev
}

// at returns the i-th event held, oldest first.
func (h *history) at(i int) *keptEvent {
	return &h.buf[(h.start+i)%len(h.buf)]
}

// after returns the index of the oldest event held whose revision is after
// rev, or h.n if there is none.
func (h *history) after(rev uint64) int {
	if h.n == 0 || h.rev(h.n-1) <= rev {
		return h.n // the common case: nothing new
	}
	return sort.Search(h.n, func(i int) bool { return h.rev(i) > rev })
}

// push appends e, whose revision is after last, and returns the event it
// evicted, if any.
func (h *history) push(e *Event) (evicted keptEvent, ok bool) {
	if h.n == len(h.buf) {
		evicted, ok = h.buf[h.start], true
		h.floor = evicted.rev
		h.buf[h.start] = h.keep(e)
		h.start = (h.start + 1) % len(h.buf)
	} else {
		h.buf[(h.start+h.n)%len(h.buf)] = h.keep(e)
		h.n++
	}
	h.last = e.Revision
	return evicted, ok
}

// advance moves the newest revision to rev, a revision without an event.
func (h *history) advance(rev uint64) {
	if rev > h.last {
		h.last = rev
	}
}
