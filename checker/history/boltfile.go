package history

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/pulsehealth/pulse/checker"
)

// The bbolt layout: bucket "series" holds a bucket per target, named by
// the target, which holds
//
//	"g"                        the target's group
//	'd' day (8 bytes, BE)      the day's 24 hours: for each, its probes
//	                           and, when not 0, its failures, latency
//	                           buckets and latency sum (µs), as uvarints
//	'm' hour (8 bytes, BE)     the hour's 60 minutes, probes and failures
//	                           of each as uvarints; kept 24 hours
//	'e' unix nanos, seq (4)    an event (encodeEvent); the last MaxEvents
//
// so that a query reads one target's days in one cursor pass, a removal
// deletes one bucket, and a prune walks each target's keys from the first.
// A record a day rather than an hour, and events in a few bytes rather
// than JSON, keep the file at about a third of the size (BENCHMARKS.md).

var seriesBucket = []byte("series")

var groupKey = []byte("g")

const (
	dayPrefix    = 'd'
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
	if err := r.loadPanics(); err != nil {
		return nil, fmt.Errorf("load history: %w", err)
	}
	return r, nil
}

func hourKey(prefix byte, hr int64) []byte {
	k := make([]byte, 9)
	k[0] = prefix
	binary.BigEndian.PutUint64(k[1:], uint64(hr))
	return k
}

// guard turns a panic of bbolt's on a damaged file (a bad page, a fault
// reading the mapped file) into an error: the history is derived data,
// and a damaged file must not take pulsed down. Call it deferred.
func guard(err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("%w: %v", ErrDamaged, p)
	}
}

// ErrDamaged says that the history file is damaged: bbolt could not read
// it. Move it away; the history starts afresh.
var ErrDamaged = errors.New("history file damaged")

func (st *boltStore) load() (_ map[string]string, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer guard(&err)
	out := make(map[string]string)
	err = st.db.View(func(tx *bolt.Tx) error {
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

// flushChunk is how many targets one transaction of a Flush writes.
// bbolt holds in memory every page a transaction changes, decoded, and
// each target's bucket is a record of the root bucket's pages: written in
// one transaction, the 100,000 targets of a minute's Flush took some 300
// MB of heap at once. A chunk of them takes a few MB.
const flushChunk = 4096

// apply writes b in several transactions (see flushChunk): the removals,
// then the targets' records in key order, then the prune, each by chunks
// of targets. What each transaction wrote is taken out of b, so on an
// error b holds what was not written.
func (st *boltStore) apply(b *batch) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer guard(&err)
	err = inChunks(st, b.removed, func(root *bolt.Bucket, name string) error {
		if err := root.DeleteBucket([]byte(name)); err != nil && !errors.Is(err, bolt.ErrBucketNotFound) {
			return err
		}
		return nil
	}, func(chunk []string) { b.removed = b.removed[len(chunk):] })
	if err != nil {
		return err
	}
	// In key order: bbolt inserts a new key into its page by shifting the
	// keys after it, so 100,000 new targets in random order cost seconds
	// of copying where in order they cost none.
	err = inChunks(st, b.names(), func(root *bolt.Bucket, name string) error {
		return st.putTarget(root, name, b)
	}, func(chunk []string) {
		for _, name := range chunk {
			delete(b.groups, name)
			delete(b.hours, name)
			delete(b.events, name)
		}
	})
	if err != nil || !b.prune {
		return err
	}
	return st.prune(b)
}

// inChunks calls write for each of xs, flushChunk of them to a write
// transaction on the root bucket, and written (if not nil) with each
// chunk once its transaction has committed. It stops at the first error.
func inChunks[T any](st *boltStore, xs []T, write func(root *bolt.Bucket, x T) error, written func(chunk []T)) error {
	for len(xs) > 0 {
		chunk := xs[:min(len(xs), flushChunk)]
		xs = xs[len(chunk):]
		err := st.db.Update(func(tx *bolt.Tx) error {
			root, err := tx.CreateBucketIfNotExists(seriesBucket)
			if err != nil {
				return err
			}
			for _, x := range chunk {
				if err := write(root, x); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if written != nil {
			written(chunk)
		}
	}
	return nil
}

// putTarget writes what b holds of the target called name: its group,
// hours and events.
func (st *boltStore) putTarget(root *bolt.Bucket, name string, b *batch) error {
	tb, err := targetBucket(root, name)
	if err != nil {
		return err
	}
	if g, ok := b.groups[name]; ok {
		if err := tb.Put(groupKey, []byte(g)); err != nil {
			return err
		}
	}
	for i := range b.hours[name] {
		if err := putHour(tb, &b.hours[name][i]); err != nil {
			return err
		}
	}
	if evs := b.events[name]; len(evs) > 0 {
		return st.putEvents(tb, evs, b.maxEvents)
	}
	return nil
}

// targetBucket returns the bucket of the target called name, created if
// need be.
func targetBucket(root *bolt.Bucket, name string) (*bolt.Bucket, error) {
	return root.CreateBucketIfNotExists([]byte(name))
}

// putHour adds d to its stored day and minutes, each a new slice of the
// size the record takes: bbolt holds a value until its transaction
// commits, and a flush writes a day for each target.
func putHour(tb *bolt.Bucket, d *hourDelta) error {
	k := hourKey(dayPrefix, floorDiv(d.hr, 24))
	if err := tb.Put(k, addDay(nil, tb.Get(k), d)); err != nil {
		return err
	}
	if !d.hasMinutes() {
		return nil
	}
	k = hourKey(minutePrefix, d.hr)
	return tb.Put(k, addMinutes(nil, tb.Get(k), d))
}

// addDay returns the record of d's day: v (nil if there is none; an
// unreadable v is replaced) with d's hour added, written over buf's array
// if it has room. buf may be v: v is read first.
func addDay(buf, v []byte, d *hourDelta) []byte {
	var hours [24]hourSum
	if v != nil && decodeDay(v, &hours) != nil {
		hours = [24]hourSum{}
	}
	hours[d.hr-24*floorDiv(d.hr, 24)].add(&d.sum)
	var tmp [maxDayLen]byte
	return reuse(buf, appendDay(tmp[:0], &hours))
}

// addMinutes returns the record of the minutes of d's hour: v (nil if
// there is none; an unreadable v is replaced) with d's minutes added,
// written over buf's array if it has room. buf may be v.
func addMinutes(buf, v []byte, d *hourDelta) []byte {
	mins := d.minutes()
	var old [60]minute
	if v != nil && decodeMinutes(v, &old) == nil {
		for i, o := range old {
			mins[i].count = satAdd16(mins[i].count, o.count)
			mins[i].fails = satAdd16(mins[i].fails, o.fails)
		}
	}
	var tmp [maxMinutesLen]byte
	return reuse(buf, appendMinutes(tmp[:0], &mins))
}

// reuse returns a copy of rec in buf's array if it has room. Else it is
// in a new array: of rec's size if buf is nil, with room for a little
// more if not, since a day's record kept in memory grows by a few bytes
// an hour and should not be made anew every hour.
func reuse(buf, rec []byte) []byte {
	if cap(buf) < len(rec) {
		n := len(rec)
		if buf != nil {
			n += 16
		}
		buf = make([]byte, 0, n)
	}
	return append(buf[:0], rec...)
}

// eventKeyLen is the length of an event's key: its prefix, time and
// number.
const eventKeyLen = 13

// eventKey appends to dst the key of an event at at, numbered seq: they
// sort by time, then by the order they were written in.
func eventKey(dst []byte, at time.Time, seq uint32) []byte {
	dst = append(dst, eventPrefix)
	dst = binary.BigEndian.AppendUint64(dst, uint64(at.UnixNano()))
	return binary.BigEndian.AppendUint32(dst, seq)
}

// floorDiv is a / b rounded down (hour numbers before 1970 are negative).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func (st *boltStore) putEvents(tb *bolt.Bucket, evs []Event, maxEvents int) error {
	for _, ev := range evs {
		st.seq++
		// The numbers start again with each Open: an event must neither
		// replace nor sort before one the file keeps at the same instant.
		last := eventKey(nil, ev.Time, math.MaxUint32)
		c := tb.Cursor() // a Put may move what a cursor points at
		k, _ := c.Seek(last)
		switch {
		case k == nil:
			k, _ = c.Last()
		case !bytes.Equal(k, last):
			k, _ = c.Prev()
		}
		if len(k) == eventKeyLen && bytes.Equal(k[:eventKeyLen-4], last[:eventKeyLen-4]) {
			st.seq = max(st.seq, binary.BigEndian.Uint32(k[eventKeyLen-4:])+1)
		}
		if err := tb.Put(eventKey(nil, ev.Time, st.seq), encodeEvent(&ev)); err != nil {
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
// older than b says, by chunks of targets (see flushChunk).
func (st *boltStore) prune(b *batch) error {
	var names [][]byte
	if err := st.db.View(func(tx *bolt.Tx) error {
		root := tx.Bucket(seriesBucket)
		if root == nil {
			return nil
		}
		return root.ForEachBucket(func(k []byte) error {
			names = append(names, bytes.Clone(k))
			return nil
		})
	}); err != nil {
		return err
	}
	evKey := make([]byte, 9)
	evKey[0] = eventPrefix
	binary.BigEndian.PutUint64(evKey[1:], uint64(b.pruneEvents.UnixNano()))
	cuts := [][]byte{hourKey(dayPrefix, floorDiv(b.pruneHours, 24)), hourKey(minutePrefix, b.pruneMinutes), evKey}
	return inChunks(st, names, func(root *bolt.Bucket, name []byte) error {
		if tb := root.Bucket(name); tb != nil {
			return pruneTarget(tb, cuts)
		}
		return nil
	}, nil)
}

// pruneTarget deletes tb's keys before each cut of their prefix (a day
// goes once all its hours are older than kept).
func pruneTarget(tb *bolt.Bucket, cuts [][]byte) error {
	for _, cut := range cuts {
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
	return nil
}

func (st *boltStore) read(name string, sp *span, from, to time.Time) (_ []Event, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer guard(&err)
	var evs []Event
	err = st.db.View(func(tx *bolt.Tx) error {
		root := tx.Bucket(seriesBucket)
		if root == nil {
			return nil
		}
		tb := root.Bucket([]byte(name))
		if tb == nil {
			return nil
		}
		toHr := sp.fromHr + int64(len(sp.hours)) - 1
		end := hourKey(dayPrefix, floorDiv(toHr, 24))
		c := tb.Cursor()
		for k, v := c.Seek(hourKey(dayPrefix, floorDiv(sp.fromHr, 24))); k != nil && bytes.Compare(k, end) <= 0; k, v = c.Next() {
			if len(k) == 9 {
				sp.addDay(int64(binary.BigEndian.Uint64(k[1:])), v)
			}
		}
		if sp.minutes != nil {
			end := hourKey(minutePrefix, toHr)
			for k, v := c.Seek(hourKey(minutePrefix, sp.fromHr)); k != nil && bytes.Compare(k, end) <= 0; k, v = c.Next() {
				if len(k) == 9 {
					sp.addMinutes(int64(binary.BigEndian.Uint64(k[1:])), v)
				}
			}
		}
		start := make([]byte, 9)
		start[0] = eventPrefix
		binary.BigEndian.PutUint64(start[1:], uint64(from.UnixNano()))
		for k, v := c.Seek(start); k != nil && k[0] == eventPrefix; k, v = c.Next() {
			ev, err := decodeEvent(k, v)
			if err != nil {
				continue
			}
			ev.Target = name
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

// maxDayLen is the most bytes a day's record takes.
const maxDayLen = 24 * ((2+nBuckets)*binary.MaxVarintLen32 + binary.MaxVarintLen64)

// appendDay appends a day's record to buf: each hour's probes, and when
// not 0 its failures, latency buckets and latency sum. A day of one or
// two hours takes a few dozen bytes, not the most a day can take.
func appendDay(buf []byte, hours *[24]hourSum) []byte {
	for i := range hours {
		h := &hours[i]
		buf = binary.AppendUvarint(buf, uint64(h.count))
		if h.count == 0 {
			continue
		}
		buf = binary.AppendUvarint(buf, uint64(h.fails))
		for _, v := range h.lat {
			buf = binary.AppendUvarint(buf, uint64(v))
		}
		buf = binary.AppendUvarint(buf, h.latSum)
	}
	return buf
}

func decodeDay(v []byte, hours *[24]hourSum) error {
	*hours = [24]hourSum{}
	next := func() (uint64, bool) {
		x, k := binary.Uvarint(v)
		if k <= 0 {
			return 0, false
		}
		v = v[k:]
		return x, true
	}
	for i := range hours {
		h := &hours[i]
		n, ok := next()
		if !ok {
			return errBadRecord
		}
		if h.count = uint32(n); n == 0 {
			continue
		}
		f, ok := next()
		if !ok {
			return errBadRecord
		}
		h.fails = uint32(f)
		for j := range h.lat {
			l, ok := next()
			if !ok {
				return errBadRecord
			}
			h.lat[j] = uint32(l)
		}
		if h.latSum, ok = next(); !ok {
			return errBadRecord
		}
	}
	if len(v) != 0 {
		return errBadRecord
	}
	return nil
}

// encodeEvent writes an event but its time and target (its key and
// bucket say them): from, to and mode, then the reason and the error,
// each with its length; a policy event then adds its kind and its text.
func encodeEvent(ev *Event) []byte {
	buf := make([]byte, 0, 10+len(ev.Reason)+len(ev.Err)+len(ev.Text))
	buf = binary.AppendUvarint(buf, uint64(ev.From))
	buf = binary.AppendUvarint(buf, uint64(ev.To))
	buf = binary.AppendUvarint(buf, uint64(ev.Mode))
	buf = binary.AppendUvarint(buf, uint64(len(ev.Reason)))
	buf = append(buf, ev.Reason...)
	buf = binary.AppendUvarint(buf, uint64(len(ev.Err)))
	buf = append(buf, ev.Err...)
	if ev.Policy == 0 {
		return buf
	}
	buf = binary.AppendUvarint(buf, uint64(ev.Policy))
	buf = binary.AppendUvarint(buf, uint64(len(ev.Text)))
	return append(buf, ev.Text...)
}

func decodeEvent(k, v []byte) (Event, error) {
	if len(k) != 13 {
		return Event{}, errBadRecord
	}
	ev := Event{Time: time.Unix(0, int64(binary.BigEndian.Uint64(k[1:9]))).UTC()}
	var vals [3]uint64
	for i := range vals {
		x, n := binary.Uvarint(v)
		if n <= 0 || x > 1<<16 {
			return Event{}, errBadRecord
		}
		vals[i], v = x, v[n:]
	}
	ev.From, ev.To, ev.Mode = checker.State(vals[0]), checker.State(vals[1]), checker.Mode(vals[2])
	str := func(dst *string) bool {
		n, k := binary.Uvarint(v)
		if k <= 0 || n > uint64(len(v)-k) {
			return false
		}
		*dst, v = string(v[k:k+int(n)]), v[k+int(n):]
		return true
	}
	if !str(&ev.Reason) || !str(&ev.Err) {
		return Event{}, errBadRecord
	}
	if len(v) == 0 {
		return ev, nil // a transition
	}
	kind, n := binary.Uvarint(v)
	if n <= 0 || kind == 0 || kind > 1<<8 {
		return Event{}, errBadRecord
	}
	ev.Policy, v = checker.EventKind(kind), v[n:]
	if !str(&ev.Text) || len(v) != 0 {
		return Event{}, errBadRecord
	}
	return ev, nil
}

// maxMinutesLen is the most bytes an hour's minutes record takes.
const maxMinutesLen = 120 * binary.MaxVarintLen16

// appendMinutes appends an hour's minutes record to buf.
func appendMinutes(buf []byte, m *[60]minute) []byte {
	for _, e := range m {
		buf = binary.AppendUvarint(buf, uint64(e.count))
		buf = binary.AppendUvarint(buf, uint64(e.fails))
	}
	return buf
}

// decodeMinutes reads what appendMinutes wrote into m; a record that is
// not exactly 120 values leaves m as it was and says so.
func decodeMinutes(v []byte, m *[60]minute) error {
	var out [60]minute
	for i := range 2 * len(out) {
		x, k := binary.Uvarint(v)
		if k <= 0 {
			return errBadRecord
		}
		v = v[k:]
		c := uint16(min(x, 0xffff))
		if i%2 == 0 {
			out[i/2].count = c
		} else {
			out[i/2].fails = c
		}
	}
	if len(v) != 0 {
		return errBadRecord
	}
	*m = out
	return nil
}
