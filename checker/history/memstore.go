package history

import (
	"bytes"
	"slices"
	"sort"
	"time"
)

// memStore keeps the flushed history in memory, for a pulsed without a
// data directory, as the records a history file holds (boltfile.go): per
// target a record a day of its hours, a record an hour of its minutes
// (the last 24 hours) and its last events, each in a few bytes. Its user
// holds the recorder's flushMu.
type memStore struct {
	series map[string]*memSeries
	seq    uint32 // tells apart events of one target at one instant
}

type memSeries struct {
	group   string
	days    []memRecord // by day number
	minutes []memRecord // by hour number
	events  [][]byte    // each its key and its record (eventKey, encodeEvent), in key order
}

// memRecord is a record of a day or an hour, and its number.
type memRecord struct {
	n int64
	v []byte
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

// find returns where the record numbered n is in rs, or would go, and
// whether it is there.
func find(rs []memRecord, n int64) (int, bool) {
	i := sort.Search(len(rs), func(i int) bool { return rs[i].n >= n })
	return i, i < len(rs) && rs[i].n == n
}

// update sets the record numbered n to add(buf, v): v is the record, nil
// if there is none, and buf the array add may write the new one over.
func update(rs []memRecord, n int64, add func(buf, v []byte) []byte) []memRecord {
	i, ok := find(rs, n)
	if ok {
		rs[i].v = add(rs[i].v, rs[i].v)
		return rs
	}
	return slices.Insert(rs, i, memRecord{n: n, v: add(nil, nil)})
}

// dropBefore returns rs without the records numbered before n.
func dropBefore(rs []memRecord, n int64) []memRecord {
	if i, _ := find(rs, n); i > 0 {
		return slices.Clone(rs[i:])
	}
	return rs
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
			d := &ds[i]
			s.days = update(s.days, floorDiv(d.hr, 24), func(buf, v []byte) []byte { return addDay(buf, v, d) })
			if d.hasMinutes() {
				s.minutes = update(s.minutes, d.hr, func(buf, v []byte) []byte { return addMinutes(buf, v, d) })
			}
		}
	}
	for name, evs := range b.events {
		s := m.get(name)
		for i := range evs {
			m.seq++
			s.events = append(s.events, append(eventKey(nil, evs[i].Time, m.seq), encodeEvent(&evs[i])...))
		}
		slices.SortStableFunc(s.events, func(a, b []byte) int { return bytes.Compare(a[:eventKeyLen], b[:eventKeyLen]) })
		if n := len(s.events) - b.maxEvents; n > 0 {
			s.events = slices.Clone(s.events[n:])
		}
	}
	if b.prune {
		cut := eventKey(nil, b.pruneEvents, 0)
		for _, s := range m.series {
			s.days = dropBefore(s.days, floorDiv(b.pruneHours, 24))
			s.minutes = dropBefore(s.minutes, b.pruneMinutes)
			j := sort.Search(len(s.events), func(i int) bool { return bytes.Compare(s.events[i], cut) >= 0 })
			if j > 0 {
				s.events = slices.Clone(s.events[j:])
			}
		}
	}
	return nil
}

func (m *memStore) read(name string, sp *span, from, to time.Time) ([]Event, error) {
	s := m.series[name]
	if s == nil {
		return nil, nil
	}
	toHr := sp.fromHr + int64(len(sp.hours)) - 1
	for i, _ := find(s.days, floorDiv(sp.fromHr, 24)); i < len(s.days) && s.days[i].n <= floorDiv(toHr, 24); i++ {
		sp.addDay(s.days[i].n, s.days[i].v)
	}
	if sp.minutes != nil {
		for i, _ := find(s.minutes, sp.fromHr); i < len(s.minutes) && s.minutes[i].n <= toHr; i++ {
			sp.addMinutes(s.minutes[i].n, s.minutes[i].v)
		}
	}
	var evs []Event
	for _, rec := range s.events {
		ev, err := decodeEvent(rec[:eventKeyLen], rec[eventKeyLen:])
		if err != nil {
			continue
		}
		if ev.Target = name; ev.Time.After(from) && !ev.Time.After(to) {
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
