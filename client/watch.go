package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// Filter selects the targets a Watch or a View follows. Empty fields match
// everything; when both are set a target must match both.
type Filter struct {
	Group string
	Names []string
}

// Matches reports whether a target called name in group passes f.
func (f Filter) Matches(name, group string) bool {
	return (f.Group == "" || f.Group == group) && (len(f.Names) == 0 || slices.Contains(f.Names, name))
}

// EventKind says what an Event is.
type EventKind int

// The kinds of events a Watch delivers.
const (
	// EventSnapshot: Snapshot holds every matching target at Revision. It
	// replaces whatever the caller built before. Resnapshot is true when
	// the watch had to start over (Err says why: pulsed could not resume
	// from the last revision).
	EventSnapshot EventKind = iota + 1
	// EventAdded: Status is a target AddTarget created.
	EventAdded
	// EventUpdated: Status is a target whose spec AddTarget replaced. A
	// target that moved to a group the filter does not match comes as
	// updated too: drop it.
	EventUpdated
	// EventRemoved: the target Name of Group is gone.
	EventRemoved
	// EventTransition: Transition is a change of a target's state.
	EventTransition
	// EventPolicy: Policy is a change of a group's panic, a target's
	// flapping or pulsed's overload; it changes no state by itself.
	EventPolicy
	// EventProgress: nothing matching happened up to Revision.
	EventProgress
	// EventDisconnected: the stream broke (Err); the follower resumes from
	// Revision after RetryIn, on another replica if need be.
	EventDisconnected
	// EventStopped: the follower stopped for good (Err): a filter pulsed
	// refuses, or the client was closed. It is the last event.
	EventStopped
	// EventResumed: pulsed accepted a stream that resumes after Revision,
	// with no snapshot: after a disconnection, or FromRevision's first. (A
	// stream that cannot resume gets an EventSnapshot with Resnapshot
	// instead.)
	EventResumed
	// EventMode: Mode is a change of a target's administrative mode; the
	// transition it makes, if any, follows as an EventTransition.
	EventMode
)

// String returns the kind's name in lower case, e.g. "transition".
func (k EventKind) String() string {
	names := [...]string{"", "snapshot", "added", "updated", "removed", "transition", "policy", "progress", "disconnected", "stopped", "resumed", "mode"}
	if k > 0 && int(k) < len(names) {
		return names[k]
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is one step of a Watch. Revision orders events: the follower never
// delivers one at or below a revision it delivered before, except a new
// EventSnapshot, which starts over.
type Event struct {
	Kind     EventKind
	Revision uint64

	Snapshot   []Status    // EventSnapshot
	Resnapshot bool        // EventSnapshot: not the first
	Status     Status      // EventAdded, EventUpdated
	Name       string      // EventRemoved
	Group      string      // EventRemoved
	Transition Transition  // EventTransition
	Policy     PolicyEvent // EventPolicy
	Mode       ModeChange  // EventMode

	// Err is why (EventDisconnected, EventStopped, and EventSnapshot with
	// Resnapshot).
	Err error
	// RetryIn is the delay before the next attempt (EventDisconnected).
	RetryIn time.Duration

	raw []*pb.WatchTransitionsResponse // with WithMessages: the wire messages
}

// Messages returns, when the watch has WithMessages, the wire messages the
// event was made of, as pulsed sent them: for a snapshot each target's
// message, then snapshot_complete; nil for the follower's own events
// (disconnected, resumed, stopped). They are shared: do not modify them.
//
// This is the one place the package hands out generated types (as
// proto.Message, to marshal with protojson or prototext): for tools that
// print the wire form, such as pulsectl watch -o json.
func (e Event) Messages() []proto.Message {
	if e.raw == nil {
		return nil
	}
	out := make([]proto.Message, len(e.raw))
	for i, m := range e.raw {
		out[i] = m
	}
	return out
}

// WatchOption configures Watch and View.
type WatchOption func(*watchOptions)

type watchOptions struct {
	from        uint64
	streamState func(error)
	before      func(context.Context) error
	onEvent     func(Event)
	messages    bool
}

// WithMessages keeps each event's wire messages for Event.Messages.
func WithMessages() WatchOption { return func(o *watchOptions) { o.messages = true } }

// FromRevision makes a Watch resume after revision rev (from an earlier
// event) instead of starting with a snapshot. If pulsed cannot resume from
// it, the watch starts with a snapshot, Resnapshot true. A View ignores it.
func FromRevision(rev uint64) WatchOption { return func(o *watchOptions) { o.from = rev } }

// OnStreamState calls fn with the error each time the stream breaks, and
// with nil when a stream delivers again after that. fn is called from the
// follower's goroutine and must not block.
func OnStreamState(fn func(err error)) WatchOption {
	return func(o *watchOptions) { o.streamState = fn }
}

// BeforeStream calls fn before each stream the follower opens, the first
// included, with the follower's context; an error counts as a failed
// attempt (EventDisconnected, then a retry after the backoff). A client
// that registers its own targets does it here, so that a pulsed that lost
// them gets them back before the watch.
func BeforeStream(fn func(ctx context.Context) error) WatchOption {
	return func(o *watchOptions) { o.before = fn }
}

// OnEvent calls fn with every event the follower delivers, from its
// goroutine: for a View after the view applied it (Get within fn sees it),
// for a Watch before it is sent on the channel. fn must not block for long.
func OnEvent(fn func(Event)) WatchOption { return func(o *watchOptions) { o.onEvent = fn } }

// Watch follows pulsed's WatchTransitions stream for the targets f selects
// and delivers its events, in order, on the returned channel until ctx ends
// (then the channel is closed). It keeps the stream's contract so that the
// caller need not:
//
//   - it starts with a snapshot: one EventSnapshot with every matching
//     target, then the events after it;
//   - it never delivers an event twice: a resumed stream replays some,
//     and the follower drops them. With replicas one revision can carry
//     several events (a transaction that changed several targets); a
//     stream that broke inside one resumes from the revision before it and
//     drops the events of it already delivered;
//   - a progress event moves its resume point;
//   - when the stream breaks (pulsed down, UNAVAILABLE, a silent stream
//     past the idle timeout) it delivers EventDisconnected and resumes after
//     a jittered backoff from the last revision, on another replica when
//     the client has several; after RESOURCE_EXHAUSTED, or UNAVAILABLE as
//     pulsed shuts down, it resumes from exactly the revision pulsed names,
//     so a pulsed restarted on its store resumes the stream, no snapshot;
//   - a refused token (UNAUTHENTICATED, PERMISSION_DENIED) is retried
//     with the backoff too, each EventDisconnected carrying
//     ErrUnauthenticated or ErrPermissionDenied: pulsed reads its token
//     file as it starts, so a pulsed restarted with the token is followed
//     again. A caller that takes the refusal as final cancels ctx;
//   - when pulsed cannot resume (OUT_OF_RANGE: too old; FAILED_PRECONDITION:
//     another server's revision) it starts over at once with a snapshot,
//     delivered with Resnapshot set;
//   - events of kinds this package does not know (from a newer pulsed)
//     move the resume point and are not delivered.
//
// The caller must keep reading: a reader that stalls stalls the stream,
// and pulsed ends a stream that falls too far behind (the follower then
// resumes or starts over, as above).
func (c *Client) Watch(ctx context.Context, f Filter, opts ...WatchOption) <-chan Event {
	ch := make(chan Event)
	fl := c.newFollower(f, opts)
	go func() {
		defer close(ch)
		fl.run(ctx, func(ev Event) bool {
			select {
			case ch <- ev:
				return true
			case <-ctx.Done():
				return false
			}
		})
	}()
	return ch
}

// follower follows one filter's stream. It is used by one goroutine.
type follower struct {
	c      *Client
	filter Filter
	opts   watchOptions

	rev uint64 // the last revision delivered (event, progress or snapshot)
	// seen counts the events delivered at rev when rev may not be
	// complete: with replicas one revision can carry several events, and a
	// stream can break between them. 0 when rev is complete (a snapshot,
	// a progress event, FromRevision).
	seen   int
	synced bool  // rev is a resume point: a snapshot was delivered, or opts.from
	snaps  int   // snapshots delivered
	reason error // why the next snapshot is a re-snapshot
	down   bool  // the last stream broke and none was accepted since
	up     bool  // a stream was accepted once

	onEventAfter bool // the caller's emit calls opts.onEvent itself (a View)
}

func (c *Client) newFollower(f Filter, opts []WatchOption) *follower {
	fl := &follower{c: c, filter: Filter{Group: f.Group, Names: slices.Clone(f.Names)}}
	for _, o := range opts {
		o(&fl.opts)
	}
	if fl.opts.from > 0 {
		fl.rev, fl.synced, fl.snaps = fl.opts.from, true, 1
	}
	return fl
}

// run follows until ctx ends, emit returns false, or an error no retry
// can fix.
func (f *follower) run(ctx context.Context, emit func(Event) bool) {
	if f.opts.onEvent != nil && !f.onEventAfter {
		inner := emit
		emit = func(ev Event) bool {
			f.opts.onEvent(ev)
			return inner(ev)
		}
	}
	attempt := 0
	var named uint64 // the revision the last stream's end named, if any
	for {
		start := uint64(0)
		if f.synced {
			start = f.rev
			if f.seen > 0 {
				// rev may have more events than were delivered: replay
				// it and drop the ones already delivered.
				start = f.rev - 1
			}
			if named > 0 {
				// Resume from the revision pulsed named; the events from
				// there to the last one delivered are replayed and dropped.
				start = min(start, named)
			}
		}
		named = 0
		delivered, stop, err := f.session(ctx, start, emit)
		if stop || ctx.Err() != nil {
			return
		}
		if delivered {
			attempt = 0
		}
		switch code := status.Code(err); {
		case code == codes.OutOfRange || code == codes.FailedPrecondition:
			if start > 0 {
				// Start over at once: pulsed is evidently up.
				f.synced, f.reason = false, wrap("WatchTransitions", err)
				continue
			}
		case code == codes.ResourceExhausted:
			named = f.named(namedRevision(err))
		case code == codes.Unavailable:
			named = f.named(shutdownRevision(err))
		case (code == codes.InvalidArgument || code == codes.Unimplemented) && !errors.As(err, new(beforeError)) ||
			f.c.conn.GetState() == connectivity.Shutdown:
			emit(Event{Kind: EventStopped, Revision: f.rev, Err: f.c.wrap("WatchTransitions", err)})
			return
		}
		delay := f.backoff(attempt)
		attempt++
		werr := wrap("WatchTransitions", err)
		f.down = true
		if f.opts.streamState != nil {
			f.opts.streamState(werr)
		}
		if !emit(Event{Kind: EventDisconnected, Revision: f.rev, Err: werr, RetryIn: delay}) {
			return
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// session watches from start until the stream ends. delivered reports
// whether the stream sent anything; stop, whether emit asked to stop.
func (f *follower) session(ctx context.Context, start uint64, emit func(Event) bool) (delivered, stop bool, err error) {
	if f.opts.before != nil {
		if err := f.opts.before(ctx); err != nil {
			return false, false, beforeError{err}
		}
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	idle := newIdleTimer(f.c.opts.idleTimeout, cancel)
	defer idle.stop()
	stream, err := f.c.api.WatchTransitions(sctx, &pb.WatchTransitionsRequest{Group: f.filter.Group, Names: f.filter.Names, StartRevision: start})
	if err != nil {
		return false, false, err
	}
	// Headers come once pulsed has registered the watch; an error comes as
	// nil headers, and then from Recv.
	if md, _ := stream.Header(); md != nil && (f.down || !f.up) {
		if f.down && f.opts.streamState != nil {
			f.opts.streamState(nil)
		}
		f.down, f.up = false, true
		if start > 0 && !emit(Event{Kind: EventResumed, Revision: start}) {
			return false, true, nil
		}
	}
	var snapshot []Status
	var raw []*pb.WatchTransitionsResponse // with WithMessages
	snapshotting := start == 0
	skip := 0 // events of f.rev a resumed stream replays and were delivered
	if !snapshotting && start < f.rev {
		skip = f.seen
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() == nil && sctx.Err() != nil {
				err = status.Errorf(codes.Unavailable, "no message from pulsed for %v (idle timeout): %v", f.c.opts.idleTimeout, err)
			}
			return delivered, false, err
		}
		delivered = true
		idle.reset()
		rev := resp.GetRevision()
		switch e := resp.GetEvent().(type) {
		case *pb.WatchTransitionsResponse_Snapshot:
			if snapshotting {
				snapshot = append(snapshot, statusFromProto(e.Snapshot))
				if f.opts.messages {
					raw = append(raw, resp)
				}
			}
			continue
		case *pb.WatchTransitionsResponse_SnapshotComplete:
			if !snapshotting {
				continue
			}
			ev := Event{Kind: EventSnapshot, Revision: rev, Snapshot: snapshot, Resnapshot: f.snaps > 0, Err: f.reason}
			if f.opts.messages {
				ev.raw = append(raw, resp)
			}
			snapshot, raw, snapshotting = nil, nil, false
			// A snapshot from another server may be below the old resume
			// point: it becomes the resume point all the same.
			f.rev, f.seen, f.synced, f.reason = rev, 0, true, nil
			f.snaps++
			if !emit(ev) {
				return true, true, nil
			}
			continue
		}
		if snapshotting || !f.fresh(resp, &skip) {
			continue // before the snapshot's end (none are sent), or a duplicate
		}
		ev, ok := eventFromProto(resp)
		if !ok {
			continue
		}
		if f.opts.messages {
			ev.raw = []*pb.WatchTransitionsResponse{resp}
		}
		if !emit(ev) {
			return true, true, nil
		}
	}
}

// fresh reports whether resp is to be delivered, and moves the resume
// point past it: events of a revision below the last one delivered are
// replays, and so are the first skip events of the last revision itself
// on a stream that resumed inside it. A progress event completes its
// revision.
func (f *follower) fresh(resp *pb.WatchTransitionsResponse, skip *int) bool {
	rev := resp.GetRevision()
	_, progress := resp.GetEvent().(*pb.WatchTransitionsResponse_Progress)
	switch {
	case rev < f.rev:
		return false
	case rev > f.rev:
		f.rev, f.seen, *skip = rev, 0, 0
		if !progress {
			f.seen = 1
		}
		return true
	case progress:
		f.seen, *skip = 0, 0
		return false
	case *skip > 0:
		*skip--
		return false
	default:
		f.seen++
		return true
	}
}

// named takes the revision rev a stream's end named (ok false: none) as a
// resume point and returns it, 0 for none. pulsed names a revision up to
// which the stream sent every matching event (a batch holds whole
// revisions), so when it is at or past the last revision delivered (past
// it: events a filter leaves out), it becomes the resume point, complete:
// the next stream resumes from it exactly, not from the revision before
// the last event (which a restarted pulsed no longer holds: it would
// answer OUT_OF_RANGE and cost a snapshot).
func (f *follower) named(rev uint64, ok bool) uint64 {
	if !ok || rev == 0 {
		return 0
	}
	if f.synced && rev >= f.rev {
		f.rev, f.seen = rev, 0
	}
	return rev
}

// beforeError is an error of the BeforeStream function: whatever its code,
// the follower retries.
type beforeError struct{ err error }

func (e beforeError) Error() string { return e.err.Error() }
func (e beforeError) Unwrap() error { return e.err }

// idleTimer calls its function after d without a reset; d 0: never.
type idleTimer struct {
	t *time.Timer
	d time.Duration
}

func newIdleTimer(d time.Duration, fn func()) idleTimer {
	if d == 0 {
		return idleTimer{}
	}
	return idleTimer{t: time.AfterFunc(d, fn), d: d}
}

func (i idleTimer) reset() {
	if i.t != nil {
		i.t.Reset(i.d)
	}
}

func (i idleTimer) stop() {
	if i.t != nil {
		i.t.Stop()
	}
}

// eventFromProto converts an event after the snapshot; ok is false for a
// kind this package does not know.
func eventFromProto(resp *pb.WatchTransitionsResponse) (Event, bool) {
	ev := Event{Revision: resp.GetRevision()}
	switch e := resp.GetEvent().(type) {
	case *pb.WatchTransitionsResponse_Transition:
		ev.Kind, ev.Transition = EventTransition, transitionFromProto(e.Transition)
	case *pb.WatchTransitionsResponse_Added:
		ev.Kind, ev.Status = EventAdded, statusFromProto(e.Added)
	case *pb.WatchTransitionsResponse_Updated:
		ev.Kind, ev.Status = EventUpdated, statusFromProto(e.Updated)
	case *pb.WatchTransitionsResponse_Removed:
		ev.Kind, ev.Name, ev.Group = EventRemoved, e.Removed.GetName(), e.Removed.GetGroup()
	case *pb.WatchTransitionsResponse_Policy:
		ev.Kind, ev.Policy = EventPolicy, policyFromProto(e.Policy)
	case *pb.WatchTransitionsResponse_Progress:
		ev.Kind = EventProgress
	case *pb.WatchTransitionsResponse_Mode:
		ev.Kind, ev.Mode = EventMode, modeChangeFromProto(e.Mode)
	default:
		return Event{}, false
	}
	return ev, true
}

// backoff returns the delay before reconnection attempt n (from 0): the
// minimum doubled n times, capped at the maximum, less a random part of up
// to half, so that clients that lost pulsed together (a restart) do not
// all come back at the same instant, the first time included.
func (f *follower) backoff(n int) time.Duration {
	lo, hi := f.c.opts.minBackoff, f.c.opts.maxBackoff
	d := hi
	if n < 30 {
		d = min(hi, lo<<n)
	}
	return d/2 + rand.N(d/2+1)
}

// namedRevision reads the revision a RESOURCE_EXHAUSTED status names
// ("...; watch again with start_revision N").
func namedRevision(err error) (uint64, bool) {
	m := revisionInMessage.FindStringSubmatch(status.Convert(err).Message())
	if m == nil {
		return 0, false
	}
	rev, perr := strconv.ParseUint(m[1], 10, 64)
	return rev, perr == nil
}

var revisionInMessage = regexp.MustCompile(`(?:start_revision|last revision delivered is) (\d+)`)

// shutdownRevision reads the revision the UNAVAILABLE status of a stream
// that pulsed ended as it shut down names ("pulsed is shutting down;
// reconnect and resume with start_revision N").
func shutdownRevision(err error) (uint64, bool) {
	m := resumeInMessage.FindStringSubmatch(status.Convert(err).Message())
	if m == nil {
		return 0, false
	}
	rev, perr := strconv.ParseUint(m[1], 10, 64)
	return rev, perr == nil
}

var resumeInMessage = regexp.MustCompile(`^pulsed is shutting down; reconnect and resume with start_revision (\d+)$`)
