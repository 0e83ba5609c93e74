package history

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The bbolt layout: bucket "series" holds a bucket per target, named by
// the target, which holds
//
//	"g"                        the target's group
//	'h' hour (8 bytes, BE)     the hour's probes, failures, latency
//	                           buckets and latency sum (µs), as uvarints
//	'm' hour                   the hour's 60 minutes, probes and failures
//	                           of each as uvarints; kept 24 hours
//	'e' unix nanos, seq (4)    an event, as JSON; the last MaxEvents kept
//
// so that a query reads one target's hours in one cursor pass, a removal
// deletes one bucket, and a prune walks each target's keys from the first.

var seriesBucket = []byte("series")

var groupKey = []byte("g")

const (
	hourPrefix   = 'h'
	minutePrefix = 'm'
	eventPrefix  = 'e'
)

type boltStore struct {
	db  *bolt.DB
	seq uint32 // tells apart events of one target at one instant
}

// Open returns a Recorder that keeps its history in db, a bbolt file of
// the history's own that the caller closes after the last Flush. It reads
// the names and groups of the targets db holds; their hours and events
// stay in db and are read by the queries.
func Open(db *bolt.DB, o Options) (*Recorder, error) {
	st := &boltStore{db: db}
	groups, err := st.load()
	if err != nil {
		return nil, err
	}
	r := newRecorder(o, st)
	for name, g := range groups {
		s := r.seriesLocked(name, g)
		s.stored = true
	}
	return r, nil
}

func hourKey(prefix byte, hr int64) []byte {
	k := make([]byte, 9)
	k[0] = prefix
	binary.BigEndian.PutUint64(k[1:], uint64(hr))
	return k
}

func (st *boltStore) load() (map[string]string, error) {
	out := make(map[string]string)
	err := st.db.View(func(tx *bolt.Tx) error {
		root := tx.Bucket(seriesBucket)
		if root == nil {
			return nil
		}
		return root.ForEachBucket(func(k []byte) error {
			out[string(k)] = string(root.Bucket(k).Get(groupKey))
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("load history: %w", err)
	}
	return out, nil
}

func (st *boltStore) apply(b *batch) error {
	return st.db.Update(func(tx *bolt.Tx) error {
		root, err := tx.CreateBucketIfNotExists(seriesBucket)
		if err != nil {
			return err
		}
		for _, name := range b.removed {
			if err := root.DeleteBucket([]byte(name)); err != nil && !errors.Is(err, bolt.ErrBucketNotFound) {
				return err
			}
		}
		for name, g := range b.groups {
			tb, err := root.CreateBucketIfNotExists([]byte(name))
			if err != nil {
				return err
			}
			if err := tb.Put(groupKey, []byte(g)); err != nil {
				return err
			}
		}
		for name, ds := range b.hours {
			tb, err := root.CreateBucketIfNotExists([]byte(name))
			if err != nil {
				return err
			}
			for _, d := range ds {
				if err := putHour(tb, d); err != nil {
					return err
				}
			}
		}
		for name, evs := range b.events {
			tb, err := root.CreateBucketIfNotExists([]byte(name))
			if err != nil {
				return err
			}
			if err := st.putEvents(tb, evs, b.maxEvents); err != nil {
				return err
			}
		}
		if b.prune {
			return prune(root, b)
		}
		return nil
	})
}

// putHour adds d to the stored hour and its minutes.
func putHour(tb *bolt.Bucket, d *hourDelta) error {
	k := hourKey(hourPrefix, d.hr)
	sum := d.sum
	if v := tb.Get(k); v != nil {
		var old hourSum
		if decodeHour(v, &old) == nil { // an unreadable record is replaced
			sum.add(&old)
		}
	}
	if err := tb.Put(k, encodeHour(&sum)); err != nil {
		return err
	}
	var zero [60]minute
	if d.min == zero {
		return nil
	}
	mins := d.min
	k = hourKey(minutePrefix, d.hr)
	if v := tb.Get(k); v != nil {
		var old [60]minute
		if decodeMinutes(v, &old) == nil {
			for i, o := range old {
				mins[i].count = satAdd16(mins[i].count, o.count)
				mins[i].fails = satAdd16(mins[i].fails, o.fails)
			}
		}
	}
	return tb.Put(k, encodeMinutes(&mins))
}

func (st *boltStore) putEvents(tb *bolt.Bucket, evs []Event, maxEvents int) error {
	for _, ev := range evs {
		v, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		st.seq++
		k := make([]byte, 13)
		k[0] = eventPrefix
		binary.BigEndian.PutUint64(k[1:], uint64(ev.Time.UnixNano()))
		binary.BigEndian.PutUint32(k[9:], st.seq)
		if err := tb.Put(k, v); err != nil {
			return err
		}
	}
	// Keep the last maxEvents.
	var keys [][]byte
	c := tb.Cursor()
	for k, _ := c.Seek([]byte{eventPrefix}); k != nil && k[0] == eventPrefix; k, _ = c.Next() {
		keys = append(keys, k)
	}
	for i := 0; i < len(keys)-maxEvents; i++ {
		if err := tb.Delete(bytes.Clone(keys[i])); err != nil {
			return err
		}
	}
	return nil
}

// prune deletes, in every target's bucket, the hours, minutes and events
// older than b says.
func prune(root *bolt.Bucket, b *batch) error {
	var names [][]byte
	if err := root.ForEachBucket(func(k []byte) error {
		names = append(names, bytes.Clone(k))
		return nil
	}); err != nil {
		return err
	}
	evKey := make([]byte, 9)
	evKey[0] = eventPrefix
	binary.BigEndian.PutUint64(evKey[1:], uint64(b.pruneEvents.UnixNano()))
	for _, name := range names {
		tb := root.Bucket(name)
		for _, cut := range [][]byte{hourKey(hourPrefix, b.pruneHours), hourKey(minutePrefix, b.pruneMinutes), evKey} {
			var old [][]byte
			c := tb.Cursor()
			for k, _ := c.Seek(cut[:1]); k != nil && k[0] == cut[0] && bytes.Compare(k, cut) < 0; k, _ = c.Next() {
				old = append(old, bytes.Clone(k))
			}
			for _, k := range old {
				if err := tb.Delete(k); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (st *boltStore) read(name string, sp *span, from, to time.Time) ([]Event, error) {
	var evs []Event
	err := st.db.View(func(tx *bolt.Tx) error {
		root := tx.Bucket(seriesBucket)
		if root == nil {
			return nil
		}
		tb := root.Bucket([]byte(name))
		if tb == nil {
			return nil
		}
		toHr := sp.fromHr + int64(len(sp.hours)) - 1
		end := hourKey(hourPrefix, toHr)
		c := tb.Cursor()
		for k, v := c.Seek(hourKey(hourPrefix, sp.fromHr)); k != nil && bytes.Compare(k, end) <= 0; k, v = c.Next() {
			var h hourSum
			if len(k) != 9 || decodeHour(v, &h) != nil {
				continue // unreadable: loss-tolerant
			}
			sp.addHour(int64(binary.BigEndian.Uint64(k[1:])), &h, nil)
		}
		if sp.minutes != nil {
			end := hourKey(minutePrefix, toHr)
			for k, v := c.Seek(hourKey(minutePrefix, sp.fromHr)); k != nil && bytes.Compare(k, end) <= 0; k, v = c.Next() {
				var m [60]minute
				if len(k) != 9 || decodeMinutes(v, &m) != nil {
					continue
				}
				i := int64(binary.BigEndian.Uint64(k[1:])) - sp.fromHr
				for j, o := range m {
					sp.minutes[i][j].count = satAdd16(sp.minutes[i][j].count, o.count)
					sp.minutes[i][j].fails = satAdd16(sp.minutes[i][j].fails, o.fails)
				}
			}
		}
		start := make([]byte, 9)
		start[0] = eventPrefix
		binary.BigEndian.PutUint64(start[1:], uint64(from.UnixNano()))
		for k, v := c.Seek(start); k != nil && k[0] == eventPrefix; k, v = c.Next() {
			var ev Event
			if json.Unmarshal(v, &ev) != nil {
				continue
			}
			if ev.Time.After(to) {
				break
			}
			if ev.Time.After(from) {
				evs = append(evs, ev)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	return evs, nil
}

var errBadRecord = errors.New("unreadable history record")

func encodeHour(h *hourSum) []byte {
	buf := make([]byte, 0, 8+nBuckets)
	buf = binary.AppendUvarint(buf, uint64(h.count))
	buf = binary.AppendUvarint(buf, uint64(h.fails))
	for _, v := range h.lat {
		buf = binary.AppendUvarint(buf, uint64(v))
	}
	return binary.AppendUvarint(buf, h.latSum)
}

func decodeHour(v []byte, h *hourSum) error {
	vals, err := uvarints(v, 3+nBuckets)
	if err != nil {
		return err
	}
	h.count, h.fails = uint32(vals[0]), uint32(vals[1])
	for i := range h.lat {
		h.lat[i] = uint32(vals[2+i])
	}
	h.latSum = vals[2+nBuckets]
	return nil
}

func encodeMinutes(m *[60]minute) []byte {
	buf := make([]byte, 0, 120)
	for _, e := range m {
		buf = binary.AppendUvarint(buf, uint64(e.count))
		buf = binary.AppendUvarint(buf, uint64(e.fails))
	}
	return buf
}

func decodeMinutes(v []byte, m *[60]minute) error {
	vals, err := uvarints(v, 120)
	if err != nil {
		return err
	}
	for i := range m {
		m[i] = minute{uint16(min(vals[2*i], 0xffff)), uint16(min(vals[2*i+1], 0xffff))}
	}
	return nil
}

func uvarints(v []byte, n int) ([]uint64, error) {
	out := make([]uint64, 0, n)
	for len(v) > 0 && len(out) < n {
		x, k := binary.Uvarint(v)
		if k <= 0 {
			return nil, errBadRecord
		}
		out = append(out, x)
		v = v[k:]
	}
	if len(out) != n || len(v) != 0 {
		return nil, errBadRecord
	}
	return out, nil
}
