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
// Memory per target is fixed once a target has been probed: a ring of
// MinuteSlots minute entries (4 bytes each) and HourSlots hour entries (28
// bytes each), plus the kept events: about 26 KiB (BENCHMARKS.md). Old
// entries are overwritten as time moves on, so nothing needs pruning; a
// target's history goes with the target (ObserveRemoval).
//
// Flush and Run keep the history in a bbolt file of its own (store.go).
package history

import (
	"errors"
	"fmt"
	"sort"
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
	// Clock stamps removals (see ObserveRemoval); nil means the real
	// clock.
	Clock checker.Clock
}

// Event is one kept transition of a target.
type Event struct {
	Time     time.Time
	From, To string
	// Reason says why the state changed when no probe result did (a mode
	// change, a drain with its reason); Err is the failing probe's error
	// when a result tipped the state.
	Reason string
	Err    string
	Mode   string
}

type minute struct {
	count, fails uint16 // saturating
}

type hour struct {
	count, fails uint32
	lat          [nBuckets]uint16 // saturating
}

type series struct {
	group   string
	minHead int64 // minute number (Unix minutes) of the newest minute entry
	hrHead  int64 // hour number of the newest hour entry
	minutes []minute
	hours   []hour
	events  []Event // ring, oldest at evStart once full
	evStart int
}

// Recorder keeps the history of every observed target. Its methods are
// safe for concurrent use.
type Recorder struct {
	maxEvents int
	clock     checker.Clock

	mu      sync.Mutex // protects targets, dirty and removed
	targets map[string]*series
	// dirty holds the targets changed since the last Flush, removed those
	// removed since then (see store.go).
	dirty   map[string]struct{}
	removed map[string]struct{}
	// tombs holds when each target was removed, for an hour
	// (checker.MaxTimeout): a probe that started before its target's
	// removal and ended after it is not counted, so it cannot bring back
	// a removed target's history. nextPrune is the size at which tombs is
	// next swept.
	tombs     map[string]time.Time
	nextPrune int
}

var _ checker.RemovalObserver = (*Recorder)(nil)

// New returns an empty Recorder.
func New(o Options) *Recorder {
	if o.MaxEvents <= 0 {
		o.MaxEvents = DefaultMaxEvents
	}
	if o.Clock == nil {
		o.Clock = checker.RealClock{}
	}
	return &Recorder{maxEvents: o.MaxEvents, clock: o.Clock, targets: make(map[string]*series),
		dirty: make(map[string]struct{}), removed: make(map[string]struct{}),
		tombs: make(map[string]time.Time), nextPrune: 64}
}

func (r *Recorder) seriesLocked(name, group string) *series {
	s := r.targets[name]
	if s == nil {
		s = &series{group: group, minHead: -1, hrHead: -1}
		r.targets[name] = s
		delete(r.removed, name)
	}
	s.group = group
	r.dirty[name] = struct{}{}
	return s
}

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
	if s.minutes == nil {
		s.minutes = make([]minute, MinuteSlots)
		s.hours = make([]hour, HourSlots)
	}
	if mi, ok := advance(&s.minHead, m, MinuteSlots, func(i int) { s.minutes[i] = minute{} }); ok {
		e := &s.minutes[mi]
		e.count = sat16(e.count)
		if !res.Pass {
			e.fails = sat16(e.fails)
		}
	}
	if hi, ok := advance(&s.hrHead, h, HourSlots, func(i int) { s.hours[i] = hour{} }); ok {
		e := &s.hours[hi]
		e.count++
		if !res.Pass {
			e.fails++
		}
		e.lat[b] = sat16(e.lat[b])
	}
}

// advance moves a ring's head to slot number n, clearing the slots it
// passes, and returns n's index. A number older than the ring holds is
// dropped (ok false).
func advance(head *int64, n int64, size int, clear func(int)) (int, bool) {
	if *head < 0 {
		*head = n
		clear(int(n % int64(size)))
	}
	if n > *head {
		steps := n - *head
		if steps > int64(size) {
			steps = int64(size)
		}
		for i := int64(1); i <= steps; i++ {
			clear(int((n - steps + i) % int64(size)))
		}
		*head = n
	}
	if n <= *head-int64(size) {
		return 0, false
	}
	return int(n % int64(size)), true
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

// ObserveTransition keeps the transition as one of its target's last
// events.
func (r *Recorder) ObserveTransition(tr checker.Transition) {
	ev := Event{Time: tr.Time, From: tr.From.String(), To: tr.To.String(),
		Reason: tr.Reason, Err: tr.Result.Err, Mode: tr.Mode.String()}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.seriesLocked(tr.Target, tr.Group)
	if len(s.events) < r.maxEvents {
		s.events = append(s.events, ev)
		return
	}
	s.events[s.evStart] = ev
	s.evStart = (s.evStart + 1) % len(s.events)
}

// ObserveRemoval forgets the removed target's history. A probe of it that
// was in flight at the removal is not counted when it ends.
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
		delete(r.dirty, spec.Name)
		r.removed[spec.Name] = struct{}{}
	}
}

// Point is one step of a history: its probes, failures and, at an hour's
// resolution, latency percentiles (zero when unknown).
type Point struct {
	Start         time.Time
	Probes, Fails uint64
	P50, P95, P99 time.Duration
}

// Summary is a target's history over a window.
type Summary struct {
	Target, Group string
	Points        []Point
	Probes, Fails uint64
	// Availability is the share of probes that passed, in [0, 1]; -1 when
	// no probe was recorded in the window.
	Availability  float64
	P50, P95, P99 time.Duration
	Events        []Event
}

// ErrUnknownTarget is returned by Query for a target with no history.
var ErrUnknownTarget = errors.New("no history for target")

// RangeError says that a Query argument is out of its bounds.
type RangeError struct {
	Field string
	Bound string
}

func (e *RangeError) Error() string { return fmt.Sprintf("%s must be %s", e.Field, e.Bound) }

// Query returns the named target's history over the window ending at now,
// in steps of resolution: time.Minute for windows up to 24 hours,
// time.Hour for windows up to 30 days. Events are those within the window,
// oldest first.
func (r *Recorder) Query(name string, now time.Time, window, resolution time.Duration) (Summary, error) {
	sum, _, err := r.query(name, now, window, resolution)
	return sum, err
}

// hists are a query's latency buckets: over the whole window, and per step
// at an hour's resolution.
type hists struct {
	total [nBuckets]uint64
	steps [][nBuckets]uint64
}

func (r *Recorder) query(name string, now time.Time, window, resolution time.Duration) (Summary, *hists, error) {
	switch resolution {
	case time.Minute:
		if window <= 0 || window > MinuteSlots*time.Minute || window%time.Minute != 0 {
			return Summary{}, nil, &RangeError{"window", "a whole number of minutes in [1m, 24h] at a resolution of 1m"}
		}
	case time.Hour:
		if window <= 0 || window > HourSlots*time.Hour || window%time.Hour != 0 {
			return Summary{}, nil, &RangeError{"window", "a whole number of hours in [1h, 720h] at a resolution of 1h"}
		}
	default:
		return Summary{}, nil, &RangeError{"resolution", "1m or 1h"}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.targets[name]
	if s == nil {
		return Summary{}, nil, ErrUnknownTarget
	}
	sum := Summary{Target: name, Group: s.group, Availability: -1}
	steps := int64(window / resolution)
	sum.Points = make([]Point, 0, steps)
	hs := &hists{}
	total := &hs.total
	nowMin := now.Unix() / 60
	if resolution == time.Minute {
		for n := nowMin - steps + 1; n <= nowMin; n++ {
			p := Point{Start: time.Unix(n*60, 0).UTC()}
			if s.minutes != nil && n <= s.minHead && n > s.minHead-MinuteSlots {
				e := s.minutes[n%MinuteSlots]
				p.Probes, p.Fails = uint64(e.count), uint64(e.fails)
			}
			sum.Points = append(sum.Points, p)
		}
		// Latency over the window comes from the hours it touches.
		for n := (nowMin - steps + 1) / 60; n <= nowMin/60; n++ {
			if e, ok := s.hourLocked(n); ok {
				addHist(total, &e.lat)
			}
		}
	} else {
		hs.steps = make([][nBuckets]uint64, 0, steps)
		nowHr := nowMin / 60
		for n := nowHr - steps + 1; n <= nowHr; n++ {
			p := Point{Start: time.Unix(n*3600, 0).UTC()}
			var h [nBuckets]uint64
			if e, ok := s.hourLocked(n); ok {
				p.Probes, p.Fails = uint64(e.count), uint64(e.fails)
				addHist(&h, &e.lat)
				p.P50, p.P95, p.P99 = quantile(&h, 0.50), quantile(&h, 0.95), quantile(&h, 0.99)
				addHist(total, &e.lat)
			}
			hs.steps = append(hs.steps, h)
			sum.Points = append(sum.Points, p)
		}
	}
	for _, p := range sum.Points {
		sum.Probes += p.Probes
		sum.Fails += p.Fails
	}
	if sum.Probes > 0 {
		sum.Availability = float64(sum.Probes-sum.Fails) / float64(sum.Probes)
	}
	sum.P50, sum.P95, sum.P99 = quantile(total, 0.50), quantile(total, 0.95), quantile(total, 0.99)
	from := now.Add(-window)
	for i := range s.events {
		ev := s.events[(s.evStart+i)%len(s.events)]
		if ev.Time.After(from) && !ev.Time.After(now) {
			sum.Events = append(sum.Events, ev)
		}
	}
	return sum, hs, nil
}

func (s *series) hourLocked(n int64) (hour, bool) {
	if s.hours == nil || n > s.hrHead || n <= s.hrHead-HourSlots {
		return hour{}, false
	}
	return s.hours[n%HourSlots], true
}

func addHists(dst, src *[nBuckets]uint64) {
	for i, v := range src {
		dst[i] += v
	}
}

func addHist(dst *[nBuckets]uint64, src *[nBuckets]uint16) {
	for i, v := range src {
		dst[i] += uint64(v)
	}
}

// quantile returns the upper bound of the bucket that holds the q-th
// quantile (for the unbounded bucket, twice the last bound); zero for an
// empty histogram.
func quantile(h *[nBuckets]uint64, q float64) time.Duration {
	var n uint64
	for _, v := range h {
		n += v
	}
	if n == 0 {
		return 0
	}
	rank := uint64(q*float64(n) + 0.999999)
	if rank < 1 {
		rank = 1
	}
	var c uint64
	for i, v := range h {
		c += v
		if c >= rank {
			if i < len(Buckets) {
				return Buckets[i]
			}
			break
		}
	}
	return 2 * Buckets[len(Buckets)-1]
}

// Targets returns the names of the targets with history, sorted.
func (r *Recorder) Targets() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(r.targets))
	for n := range r.targets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// QueryGroup returns the history of the targets of group over the window,
// as Query does for one, with their points added step by step and their
// events merged by time. Its Availability is the share of the group's
// probes that passed: the recorder counts probes, not the time the group
// spent at or above its routable minimum. Latency percentiles, over the
// window and (at an hour's resolution) per step, come from the members'
// buckets added together.
func (r *Recorder) QueryGroup(group string, now time.Time, window, resolution time.Duration) (Summary, error) {
	var names []string
	r.mu.Lock()
	for name, s := range r.targets {
		if s.group == group {
			names = append(names, name)
		}
	}
	r.mu.Unlock()
	if len(names) == 0 {
		if _, _, err := r.query("", now, window, resolution); err != nil && !errors.Is(err, ErrUnknownTarget) {
			return Summary{}, err
		}
		return Summary{}, ErrUnknownGroup
	}
	sort.Strings(names)
	out := Summary{Group: group, Availability: -1}
	var total hists
	for _, name := range names {
		s, hs, err := r.query(name, now, window, resolution)
		if errors.Is(err, ErrUnknownTarget) {
			continue // removed meanwhile
		}
		if err != nil {
			return Summary{}, err
		}
		if out.Points == nil {
			out.Points = make([]Point, len(s.Points))
			for i, p := range s.Points {
				out.Points[i].Start = p.Start
			}
		}
		for i, p := range s.Points {
			out.Points[i].Probes += p.Probes
			out.Points[i].Fails += p.Fails
		}
		addHists(&total.total, &hs.total)
		if total.steps == nil && hs.steps != nil {
			total.steps = make([][nBuckets]uint64, len(hs.steps))
		}
		for i := range hs.steps {
			addHists(&total.steps[i], &hs.steps[i])
		}
		out.Probes += s.Probes
		out.Fails += s.Fails
		out.Events = append(out.Events, s.Events...)
	}
	if out.Probes > 0 {
		out.Availability = float64(out.Probes-out.Fails) / float64(out.Probes)
	}
	out.P50, out.P95, out.P99 = quantile(&total.total, 0.50), quantile(&total.total, 0.95), quantile(&total.total, 0.99)
	for i := range total.steps {
		h := &total.steps[i]
		out.Points[i].P50, out.Points[i].P95, out.Points[i].P99 = quantile(h, 0.50), quantile(h, 0.95), quantile(h, 0.99)
	}
	sort.SliceStable(out.Events, func(i, j int) bool { return out.Events[i].Time.Before(out.Events[j].Time) })
	return out, nil
}

// ErrUnknownGroup is returned by QueryGroup for a group with no history.
var ErrUnknownGroup = errors.New("no history for group")
