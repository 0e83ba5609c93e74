package history

import (
	"bytes"
	"context"
	"encoding/gob"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/pulsehealth/pulse/checker"
)

// History is derived, loss-tolerant data: it is kept in a bbolt file of
// its own, apart from the targets' store, and written in batches (Flush),
// so that recording never waits on a disk. What was recorded since the
// last Flush is lost in a crash.

var bucketName = []byte("history")

// record is a target's history as stored: one gob value per target, keyed
// by its name.
type record struct {
	Group   string
	MinHead int64
	HrHead  int64
	Minutes []uint16 // count, fails per minute slot
	Hours   []uint32 // count, fails per hour slot
	Lat     []uint16 // nBuckets per hour slot
	Events  []Event  // oldest first
}

func (s *series) record() record {
	rec := record{Group: s.group, MinHead: s.minHead, HrHead: s.hrHead}
	if s.minutes != nil {
		rec.Minutes = make([]uint16, 0, 2*len(s.minutes))
		for _, m := range s.minutes {
			rec.Minutes = append(rec.Minutes, m.count, m.fails)
		}
		rec.Hours = make([]uint32, 0, 2*len(s.hours))
		rec.Lat = make([]uint16, 0, nBuckets*len(s.hours))
		for _, h := range s.hours {
			rec.Hours = append(rec.Hours, h.count, h.fails)
			rec.Lat = append(rec.Lat, h.lat[:]...)
		}
	}
	for i := range s.events {
		rec.Events = append(rec.Events, s.events[(s.evStart+i)%len(s.events)])
	}
	return rec
}

func (rec *record) series(maxEvents int) (*series, error) {
	s := &series{group: rec.Group, minHead: rec.MinHead, hrHead: rec.HrHead}
	if len(rec.Minutes) > 0 {
		if len(rec.Minutes) != 2*MinuteSlots || len(rec.Hours) != 2*HourSlots || len(rec.Lat) != nBuckets*HourSlots {
			return nil, fmt.Errorf("history record has %d minute, %d hour and %d latency values, want %d, %d and %d",
				len(rec.Minutes), len(rec.Hours), len(rec.Lat), 2*MinuteSlots, 2*HourSlots, nBuckets*HourSlots)
		}
		s.minutes = make([]minute, MinuteSlots)
		for i := range s.minutes {
			s.minutes[i] = minute{rec.Minutes[2*i], rec.Minutes[2*i+1]}
		}
		s.hours = make([]hour, HourSlots)
		for i := range s.hours {
			s.hours[i].count, s.hours[i].fails = rec.Hours[2*i], rec.Hours[2*i+1]
			copy(s.hours[i].lat[:], rec.Lat[nBuckets*i:])
		}
	}
	ev := rec.Events
	if len(ev) > maxEvents {
		ev = ev[len(ev)-maxEvents:]
	}
	s.events = append([]Event(nil), ev...)
	return s, nil
}

// Load reads the history kept in db into r, replacing what r holds of the
// same targets. A record that cannot be read is skipped and counted in the
// returned error; the others are loaded.
func (r *Recorder) Load(db *bolt.DB) error {
	loaded := make(map[string]*series)
	bad := 0
	err := db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketName)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var rec record
			if err := gob.NewDecoder(bytes.NewReader(v)).Decode(&rec); err != nil {
				bad++
				return nil
			}
			s, err := rec.series(r.maxEvents)
			if err != nil {
				bad++
				return nil
			}
			loaded[string(k)] = s
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("load history: %w", err)
	}
	r.mu.Lock()
	for name, s := range loaded {
		r.targets[name] = s
	}
	r.mu.Unlock()
	if bad > 0 {
		return fmt.Errorf("load history: %d unreadable records skipped", bad)
	}
	return nil
}

// Flush writes the targets changed since the last Flush to db and deletes
// the removed ones, in one transaction. It copies what it writes under r's
// lock and encodes and writes it after releasing the lock. If the write
// fails, the targets stay marked and the next Flush tries again.
func (r *Recorder) Flush(db *bolt.DB) error {
	r.mu.Lock()
	recs := make(map[string]record, len(r.dirty))
	for name := range r.dirty {
		if s := r.targets[name]; s != nil {
			recs[name] = s.record()
		}
	}
	removed := r.removed
	r.dirty = make(map[string]struct{})
	r.removed = make(map[string]struct{})
	r.mu.Unlock()

	err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketName)
		if err != nil {
			return err
		}
		for name := range removed {
			if err := b.Delete([]byte(name)); err != nil {
				return err
			}
		}
		for name, rec := range recs {
			// A value must stay unchanged until the transaction ends, so
			// each gets a buffer of its own.
			var buf bytes.Buffer
			if err := gob.NewEncoder(&buf).Encode(&rec); err != nil {
				return err
			}
			if err := b.Put([]byte(name), buf.Bytes()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		r.mu.Lock()
		for name := range recs {
			if r.targets[name] != nil {
				r.dirty[name] = struct{}{}
			}
		}
		for name := range removed {
			if r.targets[name] == nil {
				r.removed[name] = struct{}{}
			}
		}
		r.mu.Unlock()
		return fmt.Errorf("flush history: %w", err)
	}
	return nil
}

// Run flushes r to db every interval of clock until ctx ends, then once
// more, and returns that last Flush's error. A failed periodic Flush is
// passed to onError (if not nil) and retried at the next interval. every
// must be positive.
func (r *Recorder) Run(ctx context.Context, db *bolt.DB, clock checker.Clock, every time.Duration, onError func(error)) error {
	if every <= 0 {
		return fmt.Errorf("history flush interval must be positive, got %v", every)
	}
	for {
		t := clock.TimerAt(clock.Now().Add(every))
		select {
		case <-ctx.Done():
			t.Stop()
			return r.Flush(db)
		case <-t.C():
			if err := r.Flush(db); err != nil && onError != nil {
				onError(err)
			}
		}
	}
}
