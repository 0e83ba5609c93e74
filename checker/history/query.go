package history

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/pulsehealth/pulse/checker"
)

// Queries: a target's or a group's history over a window, from the store
// and what memory holds since the last Flush.

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
	// Mean is the mean latency over the window (over the hours it
	// touches, at a minute's resolution); zero when no probe was recorded.
	Mean   time.Duration
	Events []Event
	// TimeAvailability is, for a group, the share of the window's time it
	// had at least its routable minimum of healthy targets: the time it
	// was not in panic, from its first recorded probe in the window to
	// now; -1 when no probe was recorded, and for a target.
	TimeAvailability float64
}

// ErrUnknownTarget is returned by Query for a target with no history.
var ErrUnknownTarget = errors.New("no history for target")

// ErrUnknownGroup is returned by QueryGroup for a group with no history.
var ErrUnknownGroup = errors.New("no history for group")

// RangeError says that a Query argument is out of its bounds.
type RangeError struct {
	Field string
	Bound string
}

func (e *RangeError) Error() string { return fmt.Sprintf("%s must be %s", e.Field, e.Bound) }

// CheckRange returns a *RangeError if window and resolution are not a
// query's: time.Minute for windows up to 24 hours in whole minutes,
// time.Hour for windows up to 30 days in whole hours.
func CheckRange(window, resolution time.Duration) error {
	switch resolution {
	case time.Minute:
		if window <= 0 || window > MinuteSlots*time.Minute || window%time.Minute != 0 {
			return &RangeError{"window", "a whole number of minutes in [1m, 24h] at a resolution of 1m"}
		}
	case time.Hour:
		if window <= 0 || window > HourSlots*time.Hour || window%time.Hour != 0 {
			return &RangeError{"window", "a whole number of hours in [1h, 720h] at a resolution of 1h"}
		}
	default:
		return &RangeError{"resolution", "1m or 1h"}
	}
	return nil
}

// Query returns the named target's history over the window ending at now,
// in steps of resolution (see CheckRange). Events are those within the
// window, oldest first.
func (r *Recorder) Query(name string, now time.Time, window, resolution time.Duration) (Summary, error) {
	if err := CheckRange(window, resolution); err != nil {
		return Summary{}, err
	}
	r.flushMu.RLock()
	defer r.flushMu.RUnlock()
	sum, _, err := r.queryRLocked(name, now, window, resolution)
	return sum, err
}

// hists are a query's latency buckets: over the whole window, and per step
// at an hour's resolution.
type hists struct {
	total        [nBuckets]uint64
	steps        [][nBuckets]uint64
	latSum, latN uint64 // for the mean
}

// span is a query's hours, filled from the store and from memory.
type span struct {
	fromHr  int64
	hours   []hourSum
	minutes [][60]minute // nil at an hour's resolution
}

func (sp *span) addHour(hr int64, h *hourSum, min *[60]minute) {
	i := hr - sp.fromHr
	if i < 0 || i >= int64(len(sp.hours)) {
		return
	}
	sp.hours[i].add(h)
	if sp.minutes != nil && min != nil {
		m := &sp.minutes[i]
		for j, v := range min {
			m[j].count = satAdd16(m[j].count, v.count)
			m[j].fails = satAdd16(m[j].fails, v.fails)
		}
	}
}

// addDay adds the hours of day's record v (appendDay) to sp; an
// unreadable record adds nothing (history is loss-tolerant).
func (sp *span) addDay(day int64, v []byte) {
	var hours [24]hourSum
	if decodeDay(v, &hours) != nil {
		return
	}
	for i := range hours {
		if hours[i].count > 0 {
			sp.addHour(24*day+int64(i), &hours[i], nil)
		}
	}
}

// addMinutes adds hour hr's minutes record v (appendMinutes) to sp; an
// unreadable record adds nothing.
func (sp *span) addMinutes(hr int64, v []byte) {
	var m [60]minute
	if decodeMinutes(v, &m) == nil {
		sp.addHour(hr, &hourSum{}, &m)
	}
}

// addDelta adds what d holds of its hour to sp.
func (sp *span) addDelta(d *hourDelta) {
	m := d.minutes()
	sp.addHour(d.hr, &d.sum, &m)
}

func satAdd16(a, b uint16) uint16 {
	if s := uint32(a) + uint32(b); s < 1<<16 {
		return uint16(s)
	}
	return ^uint16(0)
}

// queryRLocked answers Query; flushMu must be held for reading.
func (r *Recorder) queryRLocked(name string, now time.Time, window, resolution time.Duration) (Summary, *hists, error) {
	nowMin := now.Unix() / 60
	steps := int64(window / resolution)
	nowHr := nowMin / 60
	var fromHr int64
	if resolution == time.Minute {
		fromHr = (nowMin - steps + 1) / 60
	} else {
		fromHr = nowHr - steps + 1
	}
	sp := &span{fromHr: fromHr, hours: make([]hourSum, nowHr-fromHr+1)}
	if resolution == time.Minute {
		sp.minutes = make([][60]minute, len(sp.hours))
	}
	from := now.Add(-window)

	// Memory first, under mu; then the store, which no Flush changes while
	// flushMu is held.
	r.mu.Lock()
	s := r.targets[name]
	if s == nil {
		r.mu.Unlock()
		return Summary{}, nil, ErrUnknownTarget
	}
	sum := Summary{Target: name, Group: s.group, Availability: -1, TimeAvailability: -1}
	if s.cur.hr >= 0 {
		sp.addDelta(&s.cur)
	}
	for i := range r.pending[name] {
		sp.addDelta(&r.pending[name][i])
	}
	for _, ev := range r.events[name] {
		if ev.Time.After(from) && !ev.Time.After(now) {
			sum.Events = append(sum.Events, ev)
		}
	}
	r.mu.Unlock()
	stored, err := r.store.read(name, sp, from, now)
	if err != nil {
		return Summary{}, nil, err
	}
	sum.Events = append(stored, sum.Events...)
	sort.SliceStable(sum.Events, func(i, j int) bool { return sum.Events[i].Time.Before(sum.Events[j].Time) })

	sum.Points = make([]Point, 0, steps)
	hs := &hists{}
	if resolution == time.Minute {
		for n := nowMin - steps + 1; n <= nowMin; n++ {
			e := sp.minutes[n/60-fromHr][n%60]
			sum.Points = append(sum.Points, Point{Start: time.Unix(n*60, 0).UTC(), Probes: uint64(e.count), Fails: uint64(e.fails)})
		}
		// Latency over the window comes from the hours it touches.
		for i := range sp.hours {
			addHist(&hs.total, &sp.hours[i].lat)
			hs.latSum += sp.hours[i].latSum
			hs.latN += uint64(sp.hours[i].count)
		}
	} else {
		hs.steps = make([][nBuckets]uint64, len(sp.hours))
		for i := range sp.hours {
			e := &sp.hours[i]
			p := Point{Start: time.Unix((fromHr+int64(i))*3600, 0).UTC(), Probes: uint64(e.count), Fails: uint64(e.fails)}
			h := &hs.steps[i]
			addHist(h, &e.lat)
			p.P50, p.P95, p.P99 = quantile(h, 0.50), quantile(h, 0.95), quantile(h, 0.99)
			addHist(&hs.total, &e.lat)
			hs.latSum += e.latSum
			hs.latN += uint64(e.count)
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
	sum.P50, sum.P95, sum.P99 = quantile(&hs.total, 0.50), quantile(&hs.total, 0.95), quantile(&hs.total, 0.99)
	sum.Mean = hs.mean()
	return sum, hs, nil
}

func (hs *hists) mean() time.Duration {
	if hs.latN == 0 {
		return 0
	}
	return time.Duration(hs.latSum/hs.latN) * time.Microsecond
}

func addHists(dst, src *[nBuckets]uint64) {
	for i, v := range src {
		dst[i] += v
	}
}

func addHist(dst *[nBuckets]uint64, src *[nBuckets]uint32) {
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
// spent with enough targets routable. Latency percentiles, over the
// window and (at an hour's resolution) per step, come from the members'
// buckets added together.
func (r *Recorder) QueryGroup(group string, now time.Time, window, resolution time.Duration) (Summary, error) {
	if err := CheckRange(window, resolution); err != nil {
		return Summary{}, err
	}
	r.flushMu.RLock()
	defer r.flushMu.RUnlock()
	var names []string
	r.mu.Lock()
	for name, s := range r.targets {
		if s.group == group {
			names = append(names, name)
		}
	}
	r.mu.Unlock()
	if len(names) == 0 {
		return Summary{}, ErrUnknownGroup
	}
	sort.Strings(names)
	out := Summary{Group: group, Availability: -1}
	var total hists
	for _, name := range names {
		s, hs, err := r.queryRLocked(name, now, window, resolution)
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
		total.latSum += hs.latSum
		total.latN += hs.latN
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
	out.TimeAvailability = r.timeAvailability(group, out.Points, resolution, now)
	out.P50, out.P95, out.P99 = quantile(&total.total, 0.50), quantile(&total.total, 0.95), quantile(&total.total, 0.99)
	out.Mean = total.mean()
	for i := range total.steps {
		h := &total.steps[i]
		out.Points[i].P50, out.Points[i].P95, out.Points[i].P99 = quantile(h, 0.50), quantile(h, 0.95), quantile(h, 0.99)
	}
	for i := range out.Events {
		if k := out.Events[i].Policy; k == checker.EventPanicEntered || k == checker.EventPanicExited {
			out.Events[i].Target = "" // the group's, not one target's
		}
	}
	slices.SortStableFunc(out.Events, func(a, b Event) int {
		return cmp.Or(a.Time.Compare(b.Time), cmp.Compare(a.Policy, b.Policy), strings.Compare(a.Text, b.Text))
	})
	// A group's policy event is kept with each of its targets: once here.
	out.Events = slices.CompactFunc(out.Events, func(a, b Event) bool {
		return a.Policy != 0 && a.Policy == b.Policy && a.Time.Equal(b.Time) && a.Text == b.Text
	})
	return out, nil
}

// Empty returns the history of a target with nothing recorded over the
// window: its steps, with no probe.
func Empty(target, group string, now time.Time, window, resolution time.Duration) Summary {
	sum := Summary{Target: target, Group: group, Availability: -1, TimeAvailability: -1}
	step := int64(resolution / time.Second)
	last := now.Unix() / step
	for n := last - int64(window/resolution) + 1; n <= last; n++ {
		sum.Points = append(sum.Points, Point{Start: time.Unix(n*step, 0).UTC()})
	}
	return sum
}

// timeAvailability is the share of the time since the first step with
// probes (of points, at resolution) that group spent out of panic; -1 when
// no step has probes.
func (r *Recorder) timeAvailability(group string, points []Point, resolution time.Duration, now time.Time) float64 {
	var from time.Time
	for _, p := range points {
		if p.Probes > 0 {
			from = p.Start
			break
		}
	}
	if from.IsZero() || !now.After(from) {
		return -1
	}
	r.mu.Lock()
	inPanic := r.inPanicLocked(group, from, now)
	r.mu.Unlock()
	return 1 - float64(inPanic)/float64(now.Sub(from))
}
