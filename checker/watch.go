package checker

import (
	"errors"
	"fmt"
	"time"

	"github.com/pulsehealth/pulse/checker/outlier"
)

// EventKind says what an Event records.
type EventKind int

// The kinds of events. Every event has its own revision.
const (
	// EventTransition: a target's state changed.
	EventTransition EventKind = iota + 1
	// EventAdded: Add created a target.
	EventAdded
	// EventUpdated: Add replaced a target's spec.
	EventUpdated
	// EventRemoved: Remove removed a target.
	EventRemoved
	// EventPanicEntered: a group's panic threshold started holding a
	// transition to unhealthy; see Event.Policy.
	EventPanicEntered
	// EventPanicExited: the group holds no target any more.
	EventPanicExited
	// EventFlappingStarted: a target's verdict changed Spec.FlapThreshold
	// times within Spec.FlapWindow; flap damping holds it unhealthy.
	EventFlappingStarted
	// EventFlappingEnded: the target was stable for Spec.FlapStableFor, or
	// its damping was turned off.
	EventFlappingEnded
	// EventCheckerDegraded: the checker is overloaded; its own probe
	// timeouts do not count until it recovers.
	EventCheckerDegraded
	// EventCheckerRecovered: the checker keeps up again.
	EventCheckerRecovered
	// EventCertExpiring: a target's probe passed with a server
	// certificate within its cert_expiry_warn window; sent once until a
	// probe passes outside it again.
	EventCertExpiring
	// EventTargetExpired: a target is removed by itself (its drain ended,
	// or its RemoveAfterUnhealthy was reached); Policy.Text says why. Its
	// EventRemoved follows.
	EventTargetExpired
	// EventModeChanged: a target's administrative mode changed; Status is
	// the target after it, Mode says what it was before. A change of its
	// state follows as an EventTransition of its own.
	EventModeChanged
	// EventDiscoveryFailed: a discovery source (Policy.Source, and
	// Policy.SDConfig) failed and keeps its last good set; Policy.Error
	// says why. Sent once per failure, not per refresh (see Announce).
	EventDiscoveryFailed
	// EventDiscoveryRecovered: the source answered again.
	EventDiscoveryRecovered
	// EventVantageSuspect: a vantage (Policy.Replica, Policy.Vantage)
	// says unhealthy of a share of the targets it probes that the other
	// vantages see healthy (Policy.Disagree of Policy.Judged): its own
	// path is likely broken, and its verdicts are left out of every
	// quorum until it recovers (see vantage.go).
	EventVantageSuspect
	// EventVantageRecovered: the vantage agrees with the others again, or
	// left.
	EventVantageRecovered
	// EventOutlierStarted: a target became an outlier of its group
	// (GroupPolicy.Outlier): Policy.Outlier says how and why.
	EventOutlierStarted
	// EventOutlierEnded: it is no longer one (it caught up, its ejection
	// ended, or the policy was turned off).
	EventOutlierEnded
)

// String returns the kind's name as the API spells it, e.g.
// "PANIC_ENTERED" or "TRANSITION".
func (k EventKind) String() string {
	switch k {
	case EventTransition:
		return "TRANSITION"
	case EventAdded:
		return "ADDED"
	case EventUpdated:
		return "UPDATED"
	case EventRemoved:
		return "REMOVED"
	case EventPanicEntered:
		return "PANIC_ENTERED"
	case EventPanicExited:
		return "PANIC_EXITED"
	case EventFlappingStarted:
		return "FLAPPING_STARTED"
	case EventFlappingEnded:
		return "FLAPPING_ENDED"
	case EventCheckerDegraded:
		return "CHECKER_DEGRADED"
	case EventCheckerRecovered:
		return "CHECKER_RECOVERED"
	case EventCertExpiring:
		return "CERT_EXPIRING"
	case EventTargetExpired:
		return "TARGET_EXPIRED"
	case EventModeChanged:
		return "MODE_CHANGED"
	case EventDiscoveryFailed:
		return "DISCOVERY_FAILED"
	case EventDiscoveryRecovered:
		return "DISCOVERY_RECOVERED"
	case EventVantageSuspect:
		return "VANTAGE_SUSPECT"
	case EventVantageRecovered:
		return "VANTAGE_RECOVERED"
	case EventOutlierStarted:
		return "OUTLIER_STARTED"
	case EventOutlierEnded:
		return "OUTLIER_ENDED"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// IsPolicy reports whether the kind is a policy event (panic, flapping,
// checker overload, certificate expiry, a target expired, a discovery
// source failed or recovered, a vantage suspect or recovered), whose
// details are in Event.Policy.
func (k EventKind) IsPolicy() bool {
	return k >= EventPanicEntered && k <= EventTargetExpired || k >= EventDiscoveryFailed && k <= EventOutlierEnded
}

// PolicyChange details a policy event. Policy events change no target's
// state by themselves: the transitions they lead to are events of their
// own.
type PolicyChange struct {
	// Group is the group of a panic event, and the target's group of a
	// flapping event; empty for checker events.
	Group string
	// Target is the target of a flapping event.
	Target string
	// Text says what happened, e.g. "edge: panic entered, holding web-3 (2
	// of 4 down, at most 2)"; it is the event's log message.
	Text string
	// Held lists the targets a group holds, sorted (panic events).
	Held []string
	// Targets, Unhealthy and MaxUnhealthy are the group's counts (panic
	// events).
	Targets, Unhealthy, MaxUnhealthy int
	// Transitions is the target's verdict changes in its flap window
	// (flapping events).
	Transitions int
	// Replica is, with a shared registry, the replica a checker or vantage
	// event is about; empty otherwise.
	Replica string
	// Vantage is the label of the vantage a vantage event is about;
	// Disagree and Judged its numbers: of the Judged targets it and
	// another vantage both judge, those it says unhealthy (or suspect)
	// while most of the others say healthy.
	Vantage          string
	Disagree, Judged int
	// Outlier is the target's outlier state of an OUTLIER_STARTED event,
	// and the one that ended of an OUTLIER_ENDED.
	Outlier *outlier.State
	// Source is the target source a discovery event is about, as its
	// targets' Spec.Source says it (e.g. "discovery:api"), and SDConfig
	// the source within it (e.g. "http_sd 0"; empty when the group's
	// whole answer was refused). Empty for other events.
	Source, SDConfig string
	// Error is a DISCOVERY_FAILED event's error.
	Error string
}

// Event is one change to the registry. The checker numbers events with one
// revision counter: each event's Revision is one more than the previous
// event's. An event carries the one payload its kind names: Transition for
// EventTransition, Policy for a policy kind, Status (and, for
// EventModeChanged, Mode) for the others; the watch history keeps that
// one alone.
type Event struct {
	Revision uint64
	Kind     EventKind
	Time     time.Time
	// Transition is the state change, for EventTransition.
	Transition Transition
	// Status is the target after the event for EventAdded and
	// EventUpdated, and as it was when removed for EventRemoved.
	Status Status
	// Policy details a policy event (Kind.IsPolicy).
	Policy PolicyChange
	// Mode details an EventModeChanged.
	Mode ModeChange

	prevGroup string // EventUpdated: the group before, for group filters
}

// Target returns the name of the target the event is about; "" for panic
// and checker events.
func (e Event) Target() string {
	switch {
	case e.Kind == EventTransition:
		return e.Transition.Target
	case e.Kind.IsPolicy():
		return e.Policy.Target
	}
	return e.Status.Spec.Name
}

// Group returns the group of the target the event is about (after the
// event, for EventUpdated), or of the group a panic event is about; "" for
// checker events.
func (e Event) Group() string {
	switch {
	case e.Kind == EventTransition:
		return e.Transition.Group
	case e.Kind.IsPolicy():
		return e.Policy.Group
	}
	return e.Status.Spec.Group
}

// Filter selects the events a Watcher receives. Empty fields match
// everything; when both are set an event must match both. A target moved
// to another group by an update matches both groups' filters for that
// update. Policy events about a group (panic) match on the group alone,
// whatever the names; checker events (overload) match every filter.
type Filter struct {
	Group string
	Names []string
	// Source names the client that asks, for Config.MaxWatchersPerSource:
	// its IP address. Empty for pulsed's own watchers, which only
	// Config.MaxWatchers bounds.
	Source string
}

// Errors a Watch or a Watcher returns; test for them with errors.Is and read
// the details with errors.As.
var (
	// ErrCompacted: the requested start revision is older than the history.
	ErrCompacted = errors.New("revision compacted")
	// ErrFutureRevision: the requested start revision is ahead of the
	// checker's.
	ErrFutureRevision = errors.New("revision is in the future")
)

// CompactedError says a watch cannot resume from Requested: the events
// after it are no longer held. Oldest is the oldest revision a watch can
// still resume from.
type CompactedError struct{ Requested, Oldest uint64 }

func (e *CompactedError) Error() string {
	return fmt.Sprintf("start revision %d is older than the history: the oldest revision a watch can resume from is %d", e.Requested, e.Oldest)
}

// Is makes errors.Is(err, ErrCompacted) true.
func (e *CompactedError) Is(target error) bool { return target == ErrCompacted }

// FutureRevisionError says Requested is ahead of the checker's Current
// revision.
type FutureRevisionError struct{ Requested, Current uint64 }

func (e *FutureRevisionError) Error() string {
	return fmt.Sprintf("start revision %d is ahead of the current revision %d", e.Requested, e.Current)
}

// Is makes errors.Is(err, ErrFutureRevision) true.
func (e *FutureRevisionError) Is(target error) bool { return target == ErrFutureRevision }

// BehindError ends a Watcher that fell further behind than the history
// holds. Every matching event up to LastDelivered was delivered, so a new
// watch can resume from it.
type BehindError struct{ LastDelivered uint64 }

func (e *BehindError) Error() string {
	return fmt.Sprintf("%v: the last revision delivered is %d", ErrSubscriberTooSlow, e.LastDelivered)
}

// Is makes errors.Is(err, ErrSubscriberTooSlow) true.
func (e *BehindError) Is(target error) bool { return target == ErrSubscriberTooSlow }
