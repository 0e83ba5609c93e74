package history

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// A group's panic threshold holds targets routable only once more of them
// fail than its routable minimum allows (at most floor(fraction x size)
// unhealthy): a group out of panic has at least its routable minimum of
// healthy targets. The recorder keeps, per group, the spans of time it
// spent in panic, from the checker's PANIC_ENTERED and PANIC_EXITED
// events, for the share of time the group had its minimum
// (Summary.TimeAvailability).

// maxPanicSpans bounds the spans kept per group: the newest.
const maxPanicSpans = 512

// panicSpan is a span of time a group spent in panic.
type panicSpan struct{ from, to time.Time }

// groupPanics is a group's time in panic: the spans it ended, oldest
// first, and the start of the one under way (zero when none).
type groupPanics struct {
	spans []panicSpan
	open  time.Time
}

// observePanicLocked records a group entering or leaving panic. r.mu is
// held.
func (r *Recorder) observePanicLocked(group string, entered bool, at time.Time) {
	gp := r.panics[group]
	if gp == nil {
		gp = &groupPanics{}
		r.panics[group] = gp
	}
	switch {
	case entered && gp.open.IsZero():
		gp.open = at
	case !entered && !gp.open.IsZero():
		gp.spans = append(gp.spans, panicSpan{gp.open, at})
		if len(gp.spans) > maxPanicSpans {
			gp.spans = gp.spans[len(gp.spans)-maxPanicSpans:]
		}
		gp.open = time.Time{}
	default:
		return
	}
	r.panicsDirty = true
}

// inPanicLocked returns how long group spent in panic within [from, to].
func (r *Recorder) inPanicLocked(group string, from, to time.Time) time.Duration {
	gp := r.panics[group]
	if gp == nil {
		return 0
	}
	var d time.Duration
	add := func(a, b time.Time) {
		if a.Before(from) {
			a = from
		}
		if b.After(to) {
			b = to
		}
		if b.After(a) {
			d += b.Sub(a)
		}
	}
	for _, s := range gp.spans {
		add(s.from, s.to)
	}
	if !gp.open.IsZero() {
		add(gp.open, to)
	}
	return d
}

// prunePanicsLocked forgets the spans that ended before cut.
func (r *Recorder) prunePanicsLocked(cut time.Time) {
	for g, gp := range r.panics {
		i := 0
		for i < len(gp.spans) && gp.spans[i].to.Before(cut) {
			i++
		}
		if i > 0 {
			gp.spans = append([]panicSpan(nil), gp.spans[i:]...)
			r.panicsDirty = true
		}
		if len(gp.spans) == 0 && gp.open.IsZero() {
			delete(r.panics, g)
		}
	}
}

// panicStore is a store that keeps the groups' panics: a bbolt file.
type panicStore interface {
	// putPanics replaces the stored panics with recs (by group), stamped
	// with at, when they were taken.
	putPanics(recs map[string][]byte) error
	// loadPanics returns the stored panics by group.
	loadPanics() (map[string][]byte, error)
}

var panicsBucket = []byte("panics")

// encodePanics writes a group's spans and its open panic, stamped with at:
// a restart closes an open panic there (the checker does not keep panics
// across restarts).
func encodePanics(gp *groupPanics, at time.Time) []byte {
	buf := binary.AppendVarint(nil, at.UnixNano())
	open := int64(0)
	if !gp.open.IsZero() {
		open = gp.open.UnixNano()
	}
	buf = binary.AppendVarint(buf, open)
	buf = binary.AppendUvarint(buf, uint64(len(gp.spans)))
	for _, s := range gp.spans {
		buf = binary.AppendVarint(buf, s.from.UnixNano())
		buf = binary.AppendVarint(buf, s.to.UnixNano())
	}
	return buf
}

// decodePanics reads encodePanics, closing an open panic at its stamp.
func decodePanics(v []byte) (*groupPanics, error) {
	next := func() (int64, bool) {
		x, n := binary.Varint(v)
		if n <= 0 {
			return 0, false
		}
		v = v[n:]
		return x, true
	}
	at, ok1 := next()
	open, ok2 := next()
	n, k := binary.Uvarint(v)
	if !ok1 || !ok2 || k <= 0 || n > maxPanicSpans {
		return nil, errBadRecord
	}
	v = v[k:]
	gp := &groupPanics{}
	for range n {
		from, ok1 := next()
		to, ok2 := next()
		if !ok1 || !ok2 {
			return nil, errBadRecord
		}
		gp.spans = append(gp.spans, panicSpan{time.Unix(0, from).UTC(), time.Unix(0, to).UTC()})
	}
	if len(v) != 0 {
		return nil, errBadRecord
	}
	if open != 0 && at > open {
		gp.spans = append(gp.spans, panicSpan{time.Unix(0, open).UTC(), time.Unix(0, at).UTC()})
	}
	return gp, nil
}

func (st *boltStore) putPanics(recs map[string][]byte) (err error) {
	defer guard(&err)
	return st.db.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(panicsBucket) != nil {
			if err := tx.DeleteBucket(panicsBucket); err != nil {
				return err
			}
		}
		b, err := tx.CreateBucket(panicsBucket)
		if err != nil {
			return err
		}
		for g, v := range recs {
			if err := b.Put([]byte(g), v); err != nil {
				return err
			}
		}
		return nil
	})
}

func (st *boltStore) loadPanics() (_ map[string][]byte, err error) {
	defer guard(&err)
	out := map[string][]byte{}
	err = st.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(panicsBucket)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			out[string(k)] = append([]byte(nil), v...)
			return nil
		})
	})
	return out, err
}

// flushPanics writes the groups' panics to a store that keeps them, when
// they changed; the caller holds flushMu.
func (r *Recorder) flushPanics(now time.Time) error {
	ps, ok := r.store.(panicStore)
	if !ok {
		return nil
	}
	r.mu.Lock()
	r.prunePanicsLocked(now.Add(-HourSlots * time.Hour))
	if !r.panicsDirty {
		r.mu.Unlock()
		return nil
	}
	recs := make(map[string][]byte, len(r.panics))
	for g, gp := range r.panics {
		recs[g] = encodePanics(gp, now)
	}
	r.panicsDirty = false
	r.mu.Unlock()
	if err := ps.putPanics(recs); err != nil {
		r.mu.Lock()
		r.panicsDirty = true
		r.mu.Unlock()
		return fmt.Errorf("flush history: group panics: %w", err)
	}
	return nil
}

// loadPanics reads the stored panics into r; a damaged record is skipped.
func (r *Recorder) loadPanics() error {
	ps, ok := r.store.(panicStore)
	if !ok {
		return nil
	}
	recs, err := ps.loadPanics()
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for g, v := range recs {
		if gp, err := decodePanics(v); err == nil {
			r.panics[g] = gp
		} else if !errors.Is(err, errBadRecord) {
			return err
		}
	}
	return nil
}
