// Package history keeps what the checker observed of each target: probe
// counts, failures and latency per minute for the last 24 hours and per
// hour for the last 30 days, and the target's last transitions with their
// causes. It is fed through the checker's Observer hook (a Recorder is a
// checker.RemovalObserver), outside the checker's locks, and knows nothing
// of gRPC.
//
// Latency is counted in fixed buckets (see Buckets) per hour; percentiles
// are the upper bound of the bucket that holds them, so a p95 of "250ms"
// means 95% of probes took at most 250ms; a percentile in the unbounded
// bucket is reported as twice the last bound. Minute entries keep counts
// and failures only; latency percentiles have an hour's resolution.
//
// Memory holds, per target, only what was recorded since the last Flush:
// the current hour's counts, latency buckets and minutes (about 160 bytes
// a target at 100,000 targets, with the target's name and the file's own
// memory between two Flushes; BENCHMARKS.md). Flush adds it to a store: a
// bbolt file of the history's own (Open), or memory (New), which keeps 30
// days of hours, 24 hours of minutes and the last MaxEvents events of a
// target, prunes what is older (Flush, once an hour) and deletes a removed
// target's history. A query reads the store and adds what memory holds.
package history

import (
	"fmt"
	"sync"
	"time"

	"github.com/pulsehealth/pulse/checker"
)

// MinuteSlots and HourSlots are how many minutes and hours are kept: 24
// hours by the minute, 30 days by the hour.
const (
	MinuteSlots = 24 * 60
	HourSlots   = 30 * 24
)

// DefaultMaxEvents is how many events a target keeps when Options.MaxEvents
// is zero.
const DefaultMaxEvents = 100

// Buckets are the upper bounds of the latency buckets; a last, unbounded
// bucket holds the probes slower than the last bound.
var Buckets = [...]time.Duration{
	time.Millisecond,
	5 * time.Millisecond,
	10 * time.Millisecond,
	25 * time.Millisecond,
	50 * time.Millisecond,
	100 * time.Millisecond,
	250 * time.Millisecond,
	500 * time.Millisecond,
	time.Second,
}

const nBuckets = len(Buckets) + 1

// Options configure a Recorder.
type Options struct {
	// MaxEvents bounds the events kept per target; zero means
	// DefaultMaxEvents.
	MaxEvents int
	// Clock stamps removals (see ObserveRemoval) and tells Flush what to
	// prune; nil means the real clock.
	Clock checker.Clock
}

// Event is one kept transition of a target, or a policy event about it or
// its group.
type Event struct {
	Time     time.Time
	Target   string
	From, To checker.State
	// Reason says why the state changed when no probe result did (a mode
	// change, a drain with its reason); Err is the failing probe's error
	// when a result tipped the state.
	Reason string
	Err    string
	Mode   checker.Mode
	// Policy is the kind of a policy event (its From, To and Mode are
	// unset), zero for a transition; Text says what happened.
	Policy checker.EventKind
	Text   string
}

// minute is one minute's probes and failures (saturating).
type minute struct {
	count, fails uint16
}

// hourSum is one hour's probes, failures, latency buckets and the sum of
// its latencies in microseconds (for the mean).
type hourSum struct {
	count, fails uint32
	lat          [nBuckets]uint32
	latSum       uint64
}

func (h *hourSum) add(o *hourSum) {
	h.count += o.count
	h.fails += o.fails
	h.latSum += o.latSum
	for i, v := range o.lat {
		h.lat[i] += v
	}
}

func (h *hourSum) record(pass bool, bucket int, lat time.Duration) {
	h.count++
	h.lat[bucket]++
	h.latSum += uint64(max(lat, 0) / time.Microsecond)
	if !pass {
		h.fails++
	}
}

func (m *minute) record(pass bool) {
	m.count = sat16(m.count)
	if !pass {
		m.fails = sat16(m.fails)
	}
}

// hourDelta is what was recorded of one hour of a target since the last
// Flush: a target's unflushed newest hour, or a closed one waiting for
// Flush, which adds it to the store. Flush runs about once a minute, so
// between two a target touches one or two minutes of the hour: those are
// kept in few, and a third spills them into a whole hour of minutes (as
// when the store cannot be written for a while). That keeps a target's
// series at 112 bytes, not 352, and what a Flush takes of each target, to
// write and drop, at 88 bytes, not 304.
type hourDelta struct {
	hr   int64 // hour number (Unix hours); -1 in a series before its first probe
	sum  hourSum
	few  [2]minuteAt
	nFew uint8
	all  *[60]minute // nil until a third minute is recorded
}

// minuteAt is one minute of an hourDelta.
type minuteAt struct {
	at uint8 // minute of the hour
	minute
}

func (d *hourDelta) record(minuteOfHour int, pass bool, bucket int, lat time.Duration) {
	d.sum.record(pass, bucket, lat)
	d.minute(minuteOfHour).record(pass)
}

// minute returns the counts of the given minute of the hour, making room
// for them.
func (d *hourDelta) minute(minuteOfHour int) *minute {
	if d.all != nil {
		return &d.all[minuteOfHour]
	}
	for i := range d.few[:d.nFew] {
		if int(d.few[i].at) == minuteOfHour {
			return &d.few[i].minute
		}
	}
	if int(d.nFew) < len(d.few) {
		f := &d.few[d.nFew]
		*f = minuteAt{at: uint8(minuteOfHour)}
		d.nFew++
		return &f.minute
	}
	d.all = new([60]minute)
	for _, f := range d.few {
		d.all[f.at] = f.minute
	}
	return &d.all[minuteOfHour]
}

// hasMinutes says whether any minute of d was recorded.
func (d *hourDelta) hasMinutes() bool { return d.nFew > 0 || d.all != nil }

// minutes returns d's minutes as a whole hour.
func (d *hourDelta) minutes() [60]minute {
	if d.all != nil {
		return *d.all
	}
	var m [60]minute
	for _, f := range d.few[:d.nFew] {
		m[f.at] = f.minute
	}
	return m
}

// series is what memory holds of a target.
type series struct {
	group string
	// stored is false until the store knows the target's group (Flush).
	stored bool
	// cur is the unflushed part of the newest hour recorded.
	cur hourDelta
}

// Recorder keeps the history of every observed target. Its methods are
// safe for concurrent use. Recording takes only mu, which is never held
// across I/O; Flush and the queries hold flushMu around the store (lock
// order: flushMu, then mu), so a query never sees a flush half done.
type Recorder struct {
	maxEvents int
	clock     checker.Clock
	store     store

	flushMu   sync.RWMutex // Flush holds it to write the store, queries to read it
	lastPrune int64        // hour of the last prune; guarded by flushMu

	mu      sync.Mutex // protects the fields below
	targets map[string]*series
	// pending holds closed hours not yet flushed, events the events not
	// yet flushed, removed the targets whose stored history Flush
	// deletes. nPending counts pending's entries, dropped what was dropped
	// for want of room while the store could not be written.
	pending  map[string][]hourDelta
	nPending int
	events   map[string][]Event
	removed  map[string]struct{}
	dropped  uint64
	// tombs holds when each target was removed, for an hour
	// (checker.MaxTimeout): a probe that started before its target's
	// removal and ended after it is not counted, so it cannot bring back
	// a removed target's history. nextPrune is the size at which tombs is
	// next swept.
	tombs     map[string]time.Time
	nextPrune int
	// panics are the groups' spans of time in panic (panic.go);
	// panicsDirty says they changed since the last Flush.
	panics      map[string]*groupPanics
	panicsDirty bool
}

var _ checker.RemovalObserver = (*Recorder)(nil)

// New returns an empty Recorder that keeps its history in memory only:
// up to about 26 KiB per target with 30 days recorded.
func New(o Options) *Recorder {
	return newRecorder(o, newMemStore())
}

func newRecorder(o Options, st store) *Recorder {
	if o.MaxEvents <= 0 {
		o.MaxEvents = DefaultMaxEvents
	}
	if o.Clock == nil {
		o.Clock = checker.RealClock{}
	}
	return &Recorder{maxEvents: o.MaxEvents, clock: o.Clock, store: st, targets: make(map[string]*series),
		pending: make(map[string][]hourDelta), events: make(map[string][]Event),
		removed: make(map[string]struct{}), tombs: make(map[string]time.Time), nextPrune: 64,
		panics: make(map[string]*groupPanics)}
}

func (r *Recorder) seriesLocked(name, group string) *series {
	s := r.targets[name]
	if s == nil {
		s = &series{group: group}
		s.cur.hr = -1
		r.targets[name] = s
	}
	if s.group != group {
		s.group, s.stored = group, false
	}
	return s
}

// maxPendingLocked bounds the closed hours waiting for a Flush: two per
// target and some, so that a store that cannot be written does not make
// memory grow without bound. Past it, an hour is dropped and counted.
func (r *Recorder) maxPendingLocked() int { return 2*len(r.targets) + 1024 }

// ObserveProbe counts one probe result in its minute and hour. A timeout
// ignored because the checker was overloaded is not counted.
func (r *Recorder) ObserveProbe(spec checker.Spec, res checker.Result) {
	if res.Ignored || res.Time.IsZero() {
		return
	}
	m := res.Time.Unix() / 60
	h := m / 60
	b := bucketOf(res.Latency)
	r.mu.Lock()
	defer r.mu.Unlock()
	if at, ok := r.tombs[spec.Name]; ok && res.Time.Add(-res.Latency).Before(at) {
		return
	}
	s := r.seriesLocked(spec.Name, spec.Group)
	switch {
	case h == s.cur.hr:
	case h > s.cur.hr:
		if s.cur.sum.count > 0 {
			r.pendLocked(spec.Name, s.cur)
		}
		s.cur = hourDelta{hr: h}
	case h <= s.cur.hr-HourSlots:
		return // older than is kept
	default:
		// A result of an earlier hour (it ended late): counted in that
		// hour, through the pending list.
		r.pendOldLocked(spec.Name, h, int(m%60), res.Pass, b, res.Latency)
		return
	}
	s.cur.record(int(m%60), res.Pass, b, res.Latency)
}

// pendLocked queues a closed hour for Flush, or drops it when the queue is
// full.
func (r *Recorder) pendLocked(name string, d hourDelta) {
	if r.nPending >= r.maxPendingLocked() {
		r.dropped++
		return
	}
	r.pending[name] = append(r.pending[name], d)
	r.nPending++
}

func (r *Recorder) pendOldLocked(name string, h int64, minuteOfHour int, pass bool, bucket int, lat time.Duration) {
	for i := range r.pending[name] {
		if d := &r.pending[name][i]; d.hr == h {
			d.record(minuteOfHour, pass, bucket, lat)
			return
		}
	}
	d := hourDelta{hr: h}
	d.record(minuteOfHour, pass, bucket, lat)
	r.pendLocked(name, d)
}

func sat16(v uint16) uint16 {
	if v == ^uint16(0) {
		return v
	}
	return v + 1
}

func bucketOf(d time.Duration) int {
	for i, b := range Buckets {
		if d <= b {
			return i
		}
	}
	return len(Buckets)
}

// ObserveTransition keeps the transition as one of its target's events.
func (r *Recorder) ObserveTransition(tr checker.Transition) {
	ev := Event{Time: tr.Time, Target: tr.Target, From: tr.From, To: tr.To,
		Reason: tr.Reason, Err: tr.Result.Err, Mode: tr.Mode}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seriesLocked(tr.Target, tr.Group)
	r.keepEventLocked(ev)
}

// ObservePolicy keeps a policy event among the events of the target it is
// about (flapping, a certificate near expiry), or of every target of the
// group it is about (a panic), where a group's history finds it; the
// checker's own overload is about no target and is not kept.
func (r *Recorder) ObservePolicy(kind checker.EventKind, at time.Time, p checker.PolicyChange) {
	ev := Event{Time: at, Policy: kind, Text: p.Text}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.Group != "" && (kind == checker.EventPanicEntered || kind == checker.EventPanicExited) {
		r.observePanicLocked(p.Group, kind == checker.EventPanicEntered, at)
	}
	switch {
	case p.Target != "":
		if _, ok := r.targets[p.Target]; ok {
			ev.Target = p.Target
			r.keepEventLocked(ev)
		}
	case p.Group != "":
		for name, s := range r.targets {
			if s.group == p.Group {
				ev.Target = name
				r.keepEventLocked(ev)
			}
		}
	}
}

// ObserveMode keeps a change of a target's mode among its events, with
// its reason: "mode draining, was active: deploy 4711".
func (r *Recorder) ObserveMode(spec checker.Spec, from checker.Mode, at time.Time) {
	a := spec.Admin()
	text := fmt.Sprintf("mode %s, was %s", a.Mode, from)
	if a.Reason != "" {
		text += ": " + a.Reason
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.targets[spec.Name]; !ok {
		r.seriesLocked(spec.Name, spec.Group)
	}
	r.keepEventLocked(Event{Time: at, Target: spec.Name, Policy: checker.EventModeChanged, Mode: a.Mode, Text: text})
}

// keepEventLocked appends ev to its target's events, the oldest going past
// the bound.
func (r *Recorder) keepEventLocked(ev Event) {
	evs := append(r.events[ev.Target], ev)
	if len(evs) > r.maxEvents {
		evs = evs[len(evs)-r.maxEvents:]
	}
	r.events[ev.Target] = evs
}

// ObserveRemoval forgets the removed target's history; the next Flush
// deletes what the store keeps of it. A probe of it that was in flight at
// the removal is not counted when it ends.
func (r *Recorder) ObserveRemoval(spec checker.Spec) {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tombs[spec.Name] = now
	if len(r.tombs) >= r.nextPrune {
		for name, at := range r.tombs {
			if now.Sub(at) > checker.MaxTimeout {
				delete(r.tombs, name)
			}
		}
		r.nextPrune = 2*len(r.tombs) + 64
	}
	if _, ok := r.targets[spec.Name]; ok {
		delete(r.targets, spec.Name)
		r.nPending -= len(r.pending[spec.Name])
		delete(r.pending, spec.Name)
		delete(r.events, spec.Name)
		r.removed[spec.Name] = struct{}{}
	}
}

// Dropped returns how many closed hours were dropped because the store
// could not be written for long.
func (r *Recorder) Dropped() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropped
}
