package checker

import (
	"context"
	"fmt"
	"time"
)

// SharedAnnouncements is the part of Shared that carries announced events
// (Announce) to every replica: every replica streams one at the same
// revision.
type SharedAnnouncements interface {
	// PutAnnouncement stores a and returns the revision of the write.
	PutAnnouncement(ctx context.Context, a Announcement) (rev uint64, err error)
}

// Announcement is an announced policy event as a shared registry carries
// it.
type Announcement struct {
	Kind   EventKind    `json:"kind"`
	Policy PolicyChange `json:"policy"`
	Time   time.Time    `json:"time"`
}

// SharedAnnounced: a replica announced a policy event (Announcement).
const SharedAnnounced SharedChangeKind = 18

// announceable reports whether an outside component may announce kind.
func announceable(kind EventKind) bool {
	return kind == EventDiscoveryFailed || kind == EventDiscoveryRecovered
}

// Announce publishes a policy event of an outside component (a discovery
// source that failed or recovered) through the registry's event path: it
// gets the next revision, is stored and streamed to watchers like the
// checker's own policy events, and is logged. kind must be
// EventDiscoveryFailed or EventDiscoveryRecovered; any other kind is
// refused and nothing happens. The event goes to watchers without a group
// or name filter, as it is about no target.
//
// With a shared registry that is a SharedAnnouncements the event is
// written through it and every replica streams it at the same revision;
// Announce returns once this replica has applied it. With another shared
// registry the event concerns this replica: it is logged, not streamed.
//
// Announce is safe for concurrent use; it returns ErrClosed once the
// checker is closed.
func (c *Checker) Announce(kind EventKind, pc PolicyChange) error {
	if !announceable(kind) {
		return fmt.Errorf("announce: %s is not an event an outside component may send", kind)
	}
	pc.Group, pc.Target, pc.Held = "", "", nil
	return c.reg.link.announce(Announcement{Kind: kind, Policy: pc, Time: c.clock.Now()})
}

// announceLocal applies an announcement at once, on this member alone.
func (r *registry) announceLocal(a Announcement) error {
	r.mu.Lock()
	defer r.unlockAndReport()
	if r.closed {
		return ErrClosed
	}
	r.applyAnnouncedLocked(a)
	return nil
}

// announce is Announce on replicas: written through the shared registry,
// for every replica.
func (rp *replication) announce(a Announcement) error {
	ctx, cancel := context.WithTimeout(rp.closing, sharedWait)
	defer cancel()
	rev, err := rp.shared.PutAnnouncement(ctx, a)
	if err != nil {
		return sharedWriteErr(err)
	}
	return rp.waitApplied(ctx, rev)
}

// applyAnnouncedLocked streams an event a replica announced, at the
// revision being applied, with its announcer's time.
func (r *registry) applyAnnouncedLocked(a Announcement) {
	if !announceable(a.Kind) {
		return
	}
	r.emitLocked(Event{Kind: a.Kind, Time: a.Time, Policy: a.Policy})
}
