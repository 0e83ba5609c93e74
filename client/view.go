package client

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// View is a local cache of the targets a Filter selects, kept up to date by
// a follower of pulsed's watch stream (an informer): reads are answered from
// memory, and while pulsed is unreachable the view keeps what it last knew.
//
// At every revision it reports, the view holds what ListTargets showed at
// that revision for the filter's targets: the spec, the state and whether
// the target is routable (see Status for the fields events do not carry).
// A snapshot replaces it at once, never half-applied.
//
// A View follows until its context ends, Close, or pulsed refuses its
// filter: the context given to Client.View or Start is the view's lifetime,
// not a bound on its start (bound WaitSynced with a context of its own).
// Once it has stopped, Done is closed and Err says why; it keeps answering
// with what it last knew, which no longer changes.
//
// A View is safe for concurrent use. Create it with Client.View; Close it
// (or end its context) when done.
type View struct {
	filter Filter

	run    func(context.Context) // follows until its context ends
	done   chan struct{}         // closed when the follower returned
	synced chan struct{}         // closed by the first snapshot

	// deliver is held while subscribers are called, so that a new
	// subscriber's replay of the view comes before, or after, an event's
	// changes, never among them. Lock order: deliver, then mu; apply
	// never holds both.
	deliver sync.Mutex

	mu      sync.Mutex            // protects the fields below
	cancel  context.CancelFunc    // ends the follower; nil before Start
	targets map[string]*Status    // by name
	groups  map[string]*viewGroup // by group name
	rev     uint64                // the revision of the last event applied
	err     error                 // why the view stopped following; nil while it follows
	lastErr error                 // the stream's last error since it last delivered; nil while it is up
	subs    map[int]func(Change)  // by subscription number
	nextSub int                   // the number of the next subscription
	subList []func(Change)        // subs in number order; nil: to build again

	scratch []Change // the changes of one event, reused; only apply uses it
}

// viewGroup indexes one group's targets.
type viewGroup struct {
	members  []*Status // sorted by name
	routable []Status  // sorted by name; replaced, never modified
	stale    bool      // routable must be computed again
}

// Change is one change of a View: a target that entered it (From is
// StateUnknown), left it (To is StateUnknown), changed state, or changed
// spec or outlier state (From equals To).
type Change struct {
	Revision uint64
	Name     string
	// Group is the target's group after the change (before it, when it
	// left).
	Group    string
	From, To State
	// Status is the target after the change; zero when it left.
	Status Status
	// Reason says why: "snapshot", "added", "updated", "removed", "moved
	// to group g", "transition", "outlier_started", "outlier_ended", or
	// pulsed's own reason for a transition no probe made.
	Reason string
	// Err is the probe error that tipped a transition, if any.
	Err string
	// More is true when more changes of the same revision follow at once:
	// a subscriber that acts once per revision acts on the one with More
	// false.
	More bool
}

// String returns the change's text, "<name>: <from> -> <to>", with
// "absent" for a target not in the view before or after.
func (c Change) String() string { return fmt.Sprintf("%s: %s -> %s", c.Name, c.From, c.To) }

// View starts following the targets f selects and returns their view,
// empty until the first snapshot arrives (Synced). It follows until ctx ends,
// Close, or pulsed refuses f: give it a context that lasts as long as the
// view is used. FromRevision does not apply: a view starts from a snapshot.
func (c *Client) View(ctx context.Context, f Filter, opts ...WatchOption) *View {
	v := c.NewView(f, opts...)
	v.Start(ctx)
	return v
}

// NewView returns a view of the targets f selects that does not follow
// yet: Start starts it. Callbacks given as options (BeforeStream, OnEvent,
// OnStreamState) may use the view, as it exists before they can run.
func (c *Client) NewView(f Filter, opts ...WatchOption) *View {
	v := newView(f)
	fl := c.newFollower(f, opts)
	fl.rev, fl.synced, fl.snaps = 0, false, 0
	fl.onEventAfter = true
	v.run = func(ctx context.Context) {
		fl.run(ctx, func(ev Event) bool {
			v.apply(ev)
			if fl.opts.onEvent != nil {
				fl.opts.onEvent(ev)
			}
			return true
		})
	}
	return v
}

// Start starts following, until ctx ends, Close, or pulsed refuses the
// view's filter. It must be called once.
func (v *View) Start(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	v.mu.Lock()
	v.cancel = cancel
	v.mu.Unlock()
	go func() {
		defer close(v.done)
		v.run(ctx)
		v.mu.Lock()
		if v.err == nil {
			v.err = ctx.Err() // ended by its context or Close
		}
		v.mu.Unlock()
	}()
}

// Done returns a channel closed once the view has stopped following: its
// context ended, Close, or pulsed refused its filter (Err says which).
func (v *View) Done() <-chan struct{} { return v.done }

// Err returns why the view stopped following: the error of a filter pulsed
// refuses (ErrInvalidArgument), or the context's error after its context
// ended or Close. It is nil while the view follows.
func (v *View) Err() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.err
}

func newView(f Filter) *View {
	return &View{
		filter:  Filter{Group: f.Group, Names: slices.Clone(f.Names)},
		targets: make(map[string]*Status),
		groups:  make(map[string]*viewGroup),
		synced:  make(chan struct{}),
		subs:    make(map[int]func(Change)),
		done:    make(chan struct{}),
	}
}

// Close stops following and waits until the follower has returned; no
// subscriber is called after it. The view keeps answering with what it last
// knew. It is safe to call more than once, and before Start.
func (v *View) Close() {
	v.mu.Lock()
	cancel := v.cancel
	v.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-v.done
}

// Synced returns a channel closed once the first snapshot is applied.
func (v *View) Synced() <-chan struct{} { return v.synced }

// WaitSynced waits until the first snapshot is applied, the view stops
// (its error: a filter pulsed refuses fails it at once), or ctx ends (its
// error, with the stream's last one while pulsed cannot be reached or
// refuses the client, e.g. for its token).
func (v *View) WaitSynced(ctx context.Context) error {
	select {
	case <-v.synced:
		return nil
	case <-v.done:
		select {
		case <-v.synced:
			return nil
		default:
		}
		return fmt.Errorf("the view stopped before its first snapshot: %w", v.Err())
	case <-ctx.Done():
		v.mu.Lock()
		last := v.lastErr
		v.mu.Unlock()
		if last != nil {
			return fmt.Errorf("%w; the stream's last error: %w", ctx.Err(), last)
		}
		return ctx.Err()
	}
}

// Revision returns the revision of the last event applied: the view is
// what ListTargets showed at it. 0 before the first snapshot.
func (v *View) Revision() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.rev
}

// Get returns the target called name, and whether the view has it. The
// Status's slices and maps are shared: do not modify them.
func (v *View) Get(name string) (Status, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	st, ok := v.targets[name]
	if !ok {
		return Status{}, false
	}
	return *st, true
}

// List returns every target of the view, sorted by name, and the revision
// it is at.
func (v *View) List() ([]Status, uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]Status, 0, len(v.targets))
	for _, name := range slices.Sorted(maps.Keys(v.targets)) {
		out = append(out, *v.targets[name])
	}
	return out, v.rev
}

// Routable returns the routable targets of group, sorted by name. The slice
// is shared with other callers until the group next changes: do not modify
// it.
func (v *View) Routable(group string) []Status {
	v.mu.Lock()
	defer v.mu.Unlock()
	g := v.groups[group]
	if g == nil {
		return nil
	}
	if g.stale {
		n := 0
		for _, st := range g.members {
			if st.Routable {
				n++
			}
		}
		g.routable = make([]Status, 0, n)
		for _, st := range g.members {
			if st.Routable {
				g.routable = append(g.routable, *st)
			}
		}
		g.stale = false
	}
	return g.routable
}

// Subscribe calls fn with every change of the view, in revision order:
// first, before Subscribe returns, one change per target the view has
// already (From absent, Reason "subscribed", at the view's revision), then
// every later change, from the view's follower goroutine, after the change
// is applied (Get within fn sees it). fn must not block for long: the view
// waits for it; it must not call Subscribe. cancel ends the subscription.
func (v *View) Subscribe(fn func(Change)) (cancel func()) {
	v.deliver.Lock()
	defer v.deliver.Unlock()
	v.mu.Lock()
	id := v.nextSub
	v.nextSub++
	v.subs[id] = fn
	v.subList = nil
	replay := make([]Change, 0, len(v.targets))
	for _, name := range slices.Sorted(maps.Keys(v.targets)) {
		st := v.targets[name]
		replay = append(replay, Change{Revision: v.rev, Name: name, Group: st.Target.Group, To: st.State, Status: *st, Reason: "subscribed"})
	}
	v.mu.Unlock()
	for i := range replay {
		replay[i].More = i < len(replay)-1
		fn(replay[i])
	}
	return func() {
		v.mu.Lock()
		defer v.mu.Unlock()
		delete(v.subs, id)
		v.subList = nil
	}
}

// apply applies one event of the follower and calls the subscribers with
// its changes.
func (v *View) apply(ev Event) {
	v.mu.Lock()
	ch := v.scratch[:0]
	switch ev.Kind {
	case EventSnapshot:
		ch = v.replaceLocked(ev, ch)
	case EventAdded, EventUpdated:
		ch = v.putLocked(ev.Status, ev.Revision, ev.Kind, ch)
	case EventRemoved:
		if old, ok := v.targets[ev.Name]; ok {
			ch = append(ch, Change{Revision: ev.Revision, Name: ev.Name, Group: old.Target.Group, From: old.State, Reason: "removed"})
			v.deleteLocked(ev.Name)
		}
	case EventTransition:
		tr := ev.Transition
		if st, ok := v.targets[tr.Target]; ok {
			st.State, st.Routable = tr.To, tr.To.Routable()
			st.LastTransition, st.Mode, st.SlowStartEnd = tr.Time, tr.Mode, tr.SlowStartEnd
			if len(tr.Vantages) > 0 {
				st.Vantages = tr.Vantages // the verdicts that decided it
			}
			v.staleLocked(st.Target.Group)
			c := Change{Revision: ev.Revision, Name: tr.Target, Group: st.Target.Group, From: tr.From, To: tr.To, Status: *st, Reason: tr.Reason}
			if c.Reason == "" {
				c.Reason = "transition"
			}
			if tr.Result != nil {
				c.Err = tr.Result.Error
			}
			ch = append(ch, c)
		}
	case EventPolicy:
		ch = v.outlierLocked(ev, ch)
	case EventMode:
		if st, ok := v.targets[ev.Mode.Target]; ok { // its routability follows as a transition
			st.Mode, st.ModeReason = ev.Mode.To, ev.Mode.Reason
			st.ModeSince, st.ModeUntil, st.RemoveTime = ev.Mode.Time, ev.Mode.Until, ev.Mode.RemoveTime
		}
	}
	switch ev.Kind {
	case EventDisconnected:
		v.lastErr = ev.Err
	case EventStopped:
		v.err = ev.Err
	case EventResumed:
		v.lastErr = nil
	default:
		v.rev, v.lastErr = ev.Revision, nil
	}
	subs := v.subList
	if subs == nil && len(v.subs) > 0 {
		for _, id := range slices.Sorted(maps.Keys(v.subs)) {
			subs = append(subs, v.subs[id])
		}
		v.subList = subs
	}
	v.scratch = ch
	v.mu.Unlock()
	// The subscribers were taken with the changes: one that subscribes now
	// has them in its replay, and is not called with them.
	v.deliver.Lock()
	defer v.deliver.Unlock()
	for i := range ch {
		ch[i].More = i < len(ch)-1
		for _, fn := range subs {
			fn(ch[i])
		}
	}
	clear(ch) // drop the references to Statuses until the next event
}

// outlierLocked applies an OUTLIER event to its target's Status.Outlier,
// as a change with From equal to To.
func (v *View) outlierLocked(ev Event, ch []Change) []Change {
	p := ev.Policy
	if p.Kind != PolicyOutlierStarted && p.Kind != PolicyOutlierEnded {
		return ch
	}
	st, ok := v.targets[p.Target]
	if !ok {
		return ch
	}
	st.Outlier = nil
	if o := p.Outlier; p.Kind == PolicyOutlierStarted && o != nil {
		o := *o
		st.Outlier = &o
	}
	v.staleLocked(st.Target.Group)
	return append(ch, Change{Revision: ev.Revision, Name: p.Target, Group: st.Target.Group, From: st.State, To: st.State, Status: *st, Reason: p.Kind.String()})
}

// putLocked applies an added or updated target. One that no longer
// matches the filter (it moved to another group) leaves the view.
func (v *View) putLocked(st Status, rev uint64, kind EventKind, ch []Change) []Change {
	name := st.Target.Name
	old, had := v.targets[name]
	st.Routable = st.State.Routable() && st.Quarantined == ""
	if !v.filter.Matches(name, st.Target.Group) {
		if had {
			ch = append(ch, Change{Revision: rev, Name: name, Group: old.Target.Group, From: old.State, Reason: fmt.Sprintf("moved to group %q", st.Target.Group)})
			v.deleteLocked(name)
		}
		return ch
	}
	c := Change{Revision: rev, Name: name, Group: st.Target.Group, To: st.State, Reason: kind.String()}
	if had {
		c.From = old.State
		if old.Target.Group != st.Target.Group {
			v.deleteLocked(name)
		}
	}
	v.insertLocked(st)
	c.Status = st
	return append(ch, c)
}

// replaceLocked replaces the view with a snapshot.
func (v *View) replaceLocked(ev Event, ch []Change) []Change {
	next := make(map[string]*Status, len(ev.Snapshot))
	for i := range ev.Snapshot {
		st := ev.Snapshot[i]
		if !v.filter.Matches(st.Target.Name, st.Target.Group) {
			continue
		}
		st.Routable = st.State.Routable() && st.Quarantined == ""
		next[st.Target.Name] = &st
	}
	for _, name := range slices.Sorted(maps.Keys(next)) {
		st := next[name]
		old, had := v.targets[name]
		if had && old.State == st.State && old.Routable == st.Routable && reflect.DeepEqual(old.Target, st.Target) && reflect.DeepEqual(old.Outlier, st.Outlier) {
			continue
		}
		c := Change{Revision: ev.Revision, Name: name, Group: st.Target.Group, To: st.State, Status: *st, Reason: "snapshot"}
		if had {
			c.From = old.State
		}
		ch = append(ch, c)
	}
	for _, name := range slices.Sorted(maps.Keys(v.targets)) {
		if _, ok := next[name]; !ok {
			old := v.targets[name]
			ch = append(ch, Change{Revision: ev.Revision, Name: name, Group: old.Target.Group, From: old.State, Reason: "snapshot"})
		}
	}
	v.targets = next
	v.groups = make(map[string]*viewGroup)
	for _, name := range slices.Sorted(maps.Keys(next)) { // each group's members in name order
		st := next[name]
		g := v.groups[st.Target.Group]
		if g == nil {
			g = &viewGroup{stale: true}
			v.groups[st.Target.Group] = g
		}
		g.members = append(g.members, st)
	}
	select {
	case <-v.synced:
	default:
		close(v.synced)
	}
	return ch
}

func (v *View) insertLocked(st Status) {
	p := &st
	v.targets[st.Target.Name] = p
	g := v.groups[st.Target.Group]
	if g == nil {
		g = &viewGroup{}
		v.groups[st.Target.Group] = g
	}
	if i, ok := g.find(st.Target.Name); ok {
		g.members[i] = p
	} else {
		g.members = slices.Insert(g.members, i, p)
	}
	g.stale = true
}

func (v *View) deleteLocked(name string) {
	st := v.targets[name]
	delete(v.targets, name)
	if g := v.groups[st.Target.Group]; g != nil {
		if i, ok := g.find(name); ok {
			g.members = slices.Delete(g.members, i, i+1)
		}
		g.stale = true
		if len(g.members) == 0 {
			delete(v.groups, st.Target.Group)
		}
	}
}

// find returns the index of the member called name, or where it would go.
func (g *viewGroup) find(name string) (int, bool) {
	return slices.BinarySearchFunc(g.members, name, func(st *Status, name string) int { return strings.Compare(st.Target.Name, name) })
}

func (v *View) staleLocked(group string) {
	if g := v.groups[group]; g != nil {
		g.stale = true
	}
}
