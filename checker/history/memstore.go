package history

import (
	"bytes"
	"math"
	"slices"
	"sort"
	"time"
)

// memStore keeps the flushed history in memory, for a pulsed without a
// data directory, as the records a history file holds (boltfile.go): per
// target a record a day of its hours, a record an hour of its minutes
// (the last 24 hours) and its last events, each in a few bytes. Its user
// holds the recorder's flushMu. The targets' groups are the recorder's to
// keep: a memory store starts empty, and load has nothing to find.
type memStore struct {
	series map[string]*memSeries
	seq    uint32 // tells apart events of one target at one instant
}

// memSeries is one target's history: one slice for its days and its
// hours of minutes (see dayKey and minutesKey), as there is one per target.
type memSeries struct {
	recs   []memRecord // by key: the days, then the hours of minutes
	events [][]byte    // each its key and its record (eventKey, encodeEvent), in key order
}

// memRecord is a record of a day or an hour of minutes, and its key.
type memRecord struct {
	key int64
	v   []byte
}

// minutesBase puts the hours of minutes after the days in a series'
// records: day and hour numbers of the times UnixNano holds are within
// +-2^22, far from it.
const minutesBase = 1 << 40

func dayKey(day int64) int64    { return day }
func minutesKey(hr int64) int64 { return minutesBase + hr }

func newMemStore() *memStore { return &memStore{series: make(map[string]*memSeries)} }

func (m *memStore) get(name string) *memSeries {
	s := m.series[name]
	if s == nil {
		s = &memSeries{}
		m.series[name] = s
	}
	return s
}

// find returns where the record keyed key is in rs, or would go, and
// whether it is there.
func find(rs []memRecord, key int64) (int, bool) {
	i := sort.Search(len(rs), func(i int) bool { return rs[i].key >= key })
	return i, i < len(rs) && rs[i].key == key
}

// update sets the record keyed key to add(buf, v): v is the record, nil
// if there is none, and buf the array add may write the new one over.
func update(rs []memRecord, key int64, add func(buf, v []byte) []byte) []memRecord {
	i, ok := find(rs, key)
	if ok {
		rs[i].v = add(rs[i].v, rs[i].v)
		return rs
	}
	return slices.Insert(rs, i, memRecord{key: key, v: add(nil, nil)})
}

// dropRange returns rs without the records keyed from lo up to, not
// including, cut.
func dropRange(rs []memRecord, lo, cut int64) []memRecord {
	i, _ := find(rs, lo)
	j, _ := find(rs, cut)
	if j <= i {
		return rs
	}
	return append(slices.Clip(slices.Clone(rs[:i])), rs[j:]...)
}

func (m *memStore) apply(b *batch) error {
	for _, name := range b.removed {
		delete(m.series, name)
	}
	for name, ds := range b.hours {
		s := m.get(name)
		for i := range ds {
			d := &ds[i]
			s.recs = update(s.recs, dayKey(floorDiv(d.hr, 24)), func(buf, v []byte) []byte { return addDay(buf, v, d) })
			if d.hasMinutes() {
				s.recs = update(s.recs, minutesKey(d.hr), func(buf, v []byte) []byte { return addMinutes(buf, v, d) })
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
			s.recs = dropRange(s.recs, math.MinInt64, dayKey(floorDiv(b.pruneHours, 24)))
			s.recs = dropRange(s.recs, minutesKey(-minutesBase/2), minutesKey(b.pruneMinutes))
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
	for i, _ := find(s.recs, dayKey(floorDiv(sp.fromHr, 24))); i < len(s.recs) && s.recs[i].key <= dayKey(floorDiv(toHr, 24)); i++ {
		sp.addDay(s.recs[i].key, s.recs[i].v)
	}
	if sp.minutes != nil {
		for i, _ := find(s.recs, minutesKey(sp.fromHr)); i < len(s.recs) && s.recs[i].key <= minutesKey(toHr); i++ {
			sp.addMinutes(s.recs[i].key-minutesBase, s.recs[i].v)
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

func (m *memStore) load() (map[string]string, error) { return nil, nil }
