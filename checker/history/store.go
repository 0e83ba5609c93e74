package history

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/pulsehealth/pulse/checker"
)

// History is derived, loss-tolerant data: Flush adds what memory holds to
// a store in one batch, so that recording never waits on a disk. With a
// bbolt file (Open) what was recorded since the last Flush is lost in a
// crash, and a crash during a Flush keeps what its transactions committed
// before it (see flushChunk), each target's records whole.

// store keeps the flushed history. The Recorder calls it with flushMu
// held: apply with it held for writing, read for reading.
type store interface {
	// apply writes a batch: first the removals, then the groups, the
	// hours (added to what is stored) and the events; then it prunes. It
	// may write in several transactions; on an error, b holds what was
	// not written (what Recorder.restore puts back).
	apply(b *batch) error
	// read adds the stored hours of name within sp to sp and returns its
	// stored events in (from, to], oldest first.
	read(name string, sp *span, from, to time.Time) ([]Event, error)
	// load returns every stored target's group, by name.
	load() (map[string]string, error)
}

// batch is one Flush's writes.
type batch struct {
	removed []string
	groups  map[string]string
	hours   map[string][]hourDelta
	events  map[string][]Event
	// maxEvents bounds the events kept per target.
	maxEvents int
	// prune, when set, deletes hours before pruneHours, minutes of hours
	// before pruneMinutes and events before pruneEvents.
	prune        bool
	pruneHours   int64
	pruneMinutes int64
	pruneEvents  time.Time
}

// names returns, sorted, the names of the targets b writes to, once each.
func (b *batch) names() []string {
	names := make([]string, 0, len(b.groups)+len(b.hours)+len(b.events))
	for name := range b.groups {
		names = append(names, name)
	}
	for name := range b.hours {
		names = append(names, name)
	}
	for name := range b.events {
		names = append(names, name)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// Flush adds what was recorded since the last Flush to the store, deletes
// the removed targets' history, and once an hour prunes what is older than
// is kept. It takes what it writes under the recorder's lock and writes it
// after releasing it. If the write fails, what it took and did not write
// is put back (as far as the bound on pending hours allows) and the next
// Flush tries again.
func (r *Recorder) Flush() error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	now := r.clock.Now()
	b := &batch{groups: make(map[string]string), maxEvents: r.maxEvents}
	if hr := now.Unix() / 3600; hr != r.lastPrune {
		b.prune = true
		b.pruneHours = hr - HourSlots
		b.pruneMinutes = hr - MinuteSlots/60
		b.pruneEvents = now.Add(-HourSlots * time.Hour)
	}

	r.mu.Lock()
	for name := range r.removed {
		b.removed = append(b.removed, name)
	}
	// Every target probed since the last Flush has a delta: the map is
	// made for them at once, not grown through them.
	b.hours = make(map[string][]hourDelta, len(r.pending)+len(r.targets))
	for name, ds := range r.pending {
		b.hours[name] = ds
	}
	b.events = r.events
	r.removed = make(map[string]struct{})
	r.pending, r.nPending = make(map[string][]hourDelta), 0
	r.events = make(map[string][]Event)
	for name, s := range r.targets {
		if !s.stored {
			b.groups[name] = s.group
			s.stored = true
		}
		if s.cur.sum.count > 0 {
			b.hours[name] = append(b.hours[name], s.cur)
			s.cur = hourDelta{hr: s.cur.hr}
		}
	}
	r.mu.Unlock()

	if err := r.store.apply(b); err != nil {
		r.restore(b)
		return fmt.Errorf("flush history: %w", err)
	}
	if b.prune {
		r.lastPrune = now.Unix() / 3600
	}
	return r.flushPanics(now)
}

// restore puts back what a failed Flush took, for the next to write.
func (r *Recorder) restore(b *batch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// A target removed and added again since still has its old history
	// stored: the next Flush deletes it before it writes the new one.
	for _, name := range b.removed {
		r.removed[name] = struct{}{}
	}
	for name := range b.groups {
		if s := r.targets[name]; s != nil {
			s.stored = false
		}
	}
	for name, ds := range b.hours {
		if r.targets[name] == nil {
			continue // removed meanwhile
		}
		for _, d := range ds {
			r.pendLocked(name, d)
		}
	}
	for name, evs := range b.events {
		if r.targets[name] == nil {
			continue
		}
		all := append(evs, r.events[name]...)
		if len(all) > r.maxEvents {
			all = all[len(all)-r.maxEvents:]
		}
		r.events[name] = all
	}
}

// Run flushes r every interval of clock until ctx ends, then once more,
// and returns that last Flush's error. A failed periodic Flush is passed
// to onError (if not nil) and retried at the next interval. every must be
// positive.
func (r *Recorder) Run(ctx context.Context, clock checker.Clock, every time.Duration, onError func(error)) error {
	if every <= 0 {
		return fmt.Errorf("history flush interval must be positive, got %v", every)
	}
	for {
		t := clock.TimerAt(clock.Now().Add(every))
		select {
		case <-ctx.Done():
			t.Stop()
			return r.Flush()
		case <-t.C():
			if err := r.Flush(); err != nil && onError != nil {
				onError(err)
			}
		}
	}
}
