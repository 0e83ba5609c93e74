package history

import (
	"sort"
	"time"
)

// memStore keeps the flushed history in memory, for a pulsed without a
// data directory: per target the hours recorded (64 bytes each with their
// number), 24 hours of minutes (256 bytes an hour) and the last events.
// Its user holds the recorder's flushMu.
type memStore struct {
	series map[string]*memSeries
}

type memSeries struct {
	group   string
	hours   []memHour    // by hour number
	minutes []memMinutes // by hour number, the last 24 hours at most
	events  []Event
}

type memHour struct {
	hr  int64
	sum hourSum
}

type memMinutes struct {
	hr  int64
	min *[60]minute
}

func newMemStore() *memStore { return &memStore{series: make(map[string]*memSeries)} }

func (m *memStore) get(name string) *memSeries {
	s := m.series[name]
	if s == nil {
		s = &memSeries{}
		m.series[name] = s
	}
	return s
}

func (m *memStore) apply(b *batch) error {
	for _, name := range b.removed {
		delete(m.series, name)
	}
	for name, g := range b.groups {
		m.get(name).group = g
	}
	for name, ds := range b.hours {
		s := m.get(name)
		for i := range ds {
			s.addHour(&ds[i])
		}
	}
	for name, evs := range b.events {
		s := m.get(name)
		s.events = append(s.events, evs...)
		sort.SliceStable(s.events, func(i, j int) bool { return s.events[i].Time.Before(s.events[j].Time) })
		if len(s.events) > b.maxEvents {
			s.events = append([]Event(nil), s.events[len(s.events)-b.maxEvents:]...)
		}
	}
	if b.prune {
		for _, s := range m.series {
			i := sort.Search(len(s.hours), func(i int) bool { return s.hours[i].hr >= b.pruneHours })
			if i > 0 {
				s.hours = append([]memHour(nil), s.hours[i:]...)
			}
			k := sort.Search(len(s.minutes), func(i int) bool { return s.minutes[i].hr >= b.pruneMinutes })
			if k > 0 {
				s.minutes = append([]memMinutes(nil), s.minutes[k:]...)
			}
			j := sort.Search(len(s.events), func(i int) bool { return !s.events[i].Time.Before(b.pruneEvents) })
			if j > 0 {
				s.events = append([]Event(nil), s.events[j:]...)
			}
		}
	}
	return nil
}

func (s *memSeries) addHour(d *hourDelta) {
	i := sort.Search(len(s.hours), func(i int) bool { return s.hours[i].hr >= d.hr })
	if i == len(s.hours) || s.hours[i].hr != d.hr {
		s.hours = append(s.hours, memHour{})
		copy(s.hours[i+1:], s.hours[i:])
		s.hours[i] = memHour{hr: d.hr}
	}
	s.hours[i].sum.add(&d.sum)
	if !d.hasMinutes() {
		return
	}
	k, ok := s.minutesAt(d.hr)
	if !ok {
		s.minutes = append(s.minutes, memMinutes{})
		copy(s.minutes[k+1:], s.minutes[k:])
		s.minutes[k] = memMinutes{hr: d.hr, min: new([60]minute)}
	}
	mm := s.minutes[k].min
	for j, v := range d.minutes() {
		mm[j].count = satAdd16(mm[j].count, v.count)
		mm[j].fails = satAdd16(mm[j].fails, v.fails)
	}
}

// minutesAt returns where the minutes of hour hr are in s.minutes, and
// whether they are there (if not, where they would go).
func (s *memSeries) minutesAt(hr int64) (int, bool) {
	k := sort.Search(len(s.minutes), func(i int) bool { return s.minutes[i].hr >= hr })
	return k, k < len(s.minutes) && s.minutes[k].hr == hr
}

// minutesOf returns the minutes kept of hour hr, or nil.
func (s *memSeries) minutesOf(hr int64) *[60]minute {
	if k, ok := s.minutesAt(hr); ok {
		return s.minutes[k].min
	}
	return nil
}

func (m *memStore) read(name string, sp *span, from, to time.Time) ([]Event, error) {
	s := m.series[name]
	if s == nil {
		return nil, nil
	}
	toHr := sp.fromHr + int64(len(sp.hours)) - 1
	for i := sort.Search(len(s.hours), func(i int) bool { return s.hours[i].hr >= sp.fromHr }); i < len(s.hours) && s.hours[i].hr <= toHr; i++ {
		h := &s.hours[i]
		sp.addHour(h.hr, &h.sum, s.minutesOf(h.hr))
	}
	var evs []Event
	for _, ev := range s.events {
		if ev.Time.After(from) && !ev.Time.After(to) {
			evs = append(evs, ev)
		}
	}
	return evs, nil
}

func (m *memStore) load() (map[string]string, error) {
	out := make(map[string]string, len(m.series))
	for name, s := range m.series {
		out[name] = s.group
	}
	return out, nil
}
