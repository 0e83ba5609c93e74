package checker

import "fmt"

// Announce publishes a policy event of an outside component (a discovery
// source that failed or recovered) through the registry's event path: it
// gets the next revision, is stored and streamed to watchers like the
// checker's own policy events, and is logged. kind must be
// EventDiscoveryFailed or EventDiscoveryRecovered; any other kind is
// refused and nothing happens. The event goes to watchers without a group
// or name filter, as it is about no target.
//
// With a shared registry the event concerns this replica: it is logged,
// not streamed (as the checker's own overload events outside a shared
// write).
//
// Announce is safe for concurrent use; it returns ErrClosed once the
// checker is closed.
func (c *Checker) Announce(kind EventKind, pc PolicyChange) error {
	if kind != EventDiscoveryFailed && kind != EventDiscoveryRecovered {
		return fmt.Errorf("announce: %s is not an event an outside component may send", kind)
	}
	pc.Group, pc.Target, pc.Held = "", "", nil
	r := c.reg
	r.mu.Lock()
	defer r.unlockAndReport()
	if r.closed {
		return ErrClosed
	}
	r.emitLocked(Event{Kind: kind, Time: r.clock.Now(), Policy: pc})
	return nil
}
