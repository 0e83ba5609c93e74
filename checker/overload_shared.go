package checker

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Overload with a shared registry. Each replica's scheduler judges its own
// overload, as a single checker does, and ignores its own probe timeouts
// while degraded. What it decides is published through the shared
// registry (SharedOverloads.PutOverload, kept only while the replica is a
// member) rather than streamed at once: every replica applies the
// published states in the registry's order and emits CHECKER_DEGRADED and
// CHECKER_RECOVERED with the replica's ID (PolicyChange.Replica) at the
// revision they were stored at, so every stream shows the same events,
// and DegradedReplicas lists the same replicas everywhere. A replica that
// leaves while degraded is published as recovered.

// SharedOverloads is implemented by a Shared registry that publishes each
// replica's overload state. With a registry that does not, a replica's
// overload is only logged.
type SharedOverloads interface {
	// PutOverload publishes this replica's overload state; it lasts while
	// the replica is a member.
	PutOverload(ctx context.Context, o ReplicaOverload) error
	// Overloads returns the degraded replicas as Load read them.
	Overloads() []ReplicaOverload
}

// SharedOverloadPut: a replica published its overload state (Overload);
// numbered apart from the kinds in shared.go.
const SharedOverloadPut SharedChangeKind = 17

// ReplicaOverload is a replica's overload state as published.
type ReplicaOverload struct {
	// Replica is the replica's member ID; the shared registry fills it in.
	Replica string `json:"replica"`
	// Degraded is true while the replica is overloaded.
	Degraded bool `json:"degraded"`
	// Since is when it became degraded, or recovered.
	Since time.Time `json:"since"`
	// Reason says what made it degraded (or recover, or that it left).
	Reason string `json:"reason,omitempty"`
}

// overloadPub is the replication's queue of this replica's overload state
// to publish: only the latest one matters.
type overloadPub struct {
	wake chan struct{} // there is a state to publish
	done chan struct{} // closed when publishLoop has returned

	mu      sync.Mutex // protects pending
	pending *ReplicaOverload
}

// publishOverload is sharedLink's: it queues o, replacing any state not
// yet published. The registry calls it with its lock held.
func (rp *replication) publishOverload(o ReplicaOverload) {
	rp.ovl.mu.Lock()
	rp.ovl.pending = &o
	rp.ovl.mu.Unlock()
	select {
	case rp.ovl.wake <- struct{}{}:
	default:
	}
}

// publishLoop publishes this replica's overload state, retrying every
// second while the shared registry cannot take it, until the checker
// closes.
func (rp *replication) publishLoop() {
	defer close(rp.ovl.done)
	so, ok := rp.shared.(SharedOverloads)
	for {
		select {
		case <-rp.ovl.wake:
		case <-rp.closing.Done():
			return
		}
		for {
			rp.ovl.mu.Lock()
			o := rp.ovl.pending
			rp.ovl.pending = nil
			rp.ovl.mu.Unlock()
			if o == nil {
				break
			}
			if !ok { // logged, as its event would have been
				level := slog.LevelInfo
				if o.Degraded {
					level = slog.LevelWarn
				}
				rp.logger.Log(rp.closing, level, o.Reason)
				continue
			}
			ctx, cancel := context.WithTimeout(rp.closing, sharedWait)
			err := so.PutOverload(ctx, *o)
			cancel()
			if err == nil {
				continue
			}
			rp.logger.Warn("publishing this replica's overload state failed; retrying", "error", err, "degraded", o.Degraded)
			rp.ovl.mu.Lock()
			if rp.ovl.pending == nil {
				rp.ovl.pending = o
			}
			rp.ovl.mu.Unlock()
			select {
			case <-time.After(time.Second):
			case <-rp.closing.Done():
				return
			}
		}
	}
}

// loadOverloads registers the degraded replicas the shared registry
// loaded, without events.
func (rp *replication) loadOverloads() {
	so, ok := rp.shared.(SharedOverloads)
	if !ok {
		return
	}
	rp.reg.mu.Lock()
	defer rp.reg.mu.Unlock()
	for _, o := range so.Overloads() {
		if o.Degraded {
			rp.reg.replicasLocked()[o.Replica] = o
		}
	}
}

func (r *registry) replicasLocked() map[string]ReplicaOverload {
	if r.replicas == nil {
		r.replicas = make(map[string]ReplicaOverload)
	}
	return r.replicas
}

// applyOverloadLocked applies a replica's published overload state: a
// change of it is an event, at the revision being applied.
func (r *registry) applyOverloadLocked(o ReplicaOverload, now time.Time) {
	reps := r.replicasLocked()
	_, was := reps[o.Replica]
	kind := EventCheckerDegraded
	switch {
	case o.Degraded:
		reps[o.Replica] = o
		if was {
			return
		}
	case !was:
		return
	default:
		delete(reps, o.Replica)
		kind = EventCheckerRecovered
	}
	text := o.Reason
	if o.Replica != "" {
		text = "replica " + o.Replica + ": " + text
	}
	r.emitLocked(Event{Kind: kind, Time: now, Policy: PolicyChange{Replica: o.Replica, Text: text}})
}

// degradedReplicas returns the degraded replicas, sorted by ID.
func (r *registry) degradedReplicas() []ReplicaOverload {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]ReplicaOverload, 0, len(r.replicas))
	for _, o := range r.replicas {
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b ReplicaOverload) int { return cmp.Compare(a.Replica, b.Replica) })
	return out
}

// DegradedReplicas returns, with a shared registry, the replicas whose
// published state is degraded, sorted by ID: the same on every replica at
// the same revision. Without one it returns nil (see Overload).
func (c *Checker) DegradedReplicas() []ReplicaOverload {
	if c.repl == nil {
		return nil
	}
	return c.reg.degradedReplicas()
}
