package checker

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"
)

// Shared is a registry that several checkers, one per pulsed replica, share
// (package etcdreg keeps it on etcd). With Config.Shared set a checker
// changes nothing on its own authority:
//
//   - Add and Remove write the change through Shared and return once it has
//     come back through ApplyShared, so a replica reads its own writes;
//   - each replica probes only the targets it owns (Owns), and writes the
//     states its results decide through ProposeState, which the shared
//     registry refuses to a replica that no longer holds its lease;
//   - every replica applies the same changes in the same order through
//     ApplyShared, and numbers its events with the shared registry's
//     revisions, so a watcher can resume on any replica.
//
// Panic thresholds, flap damping and passive outcomes need one view of a
// target's recent results, which only its owner has: a shared checker
// refuses them (ErrNotShared, or a FieldError for a spec that asks for
// them). Events that concern one replica alone (overload) are logged, not
// streamed.
type Shared interface {
	// Load returns every target and its last state, and the revision they
	// were read at.
	Load() ([]SharedTarget, uint64, error)
	// PutSpec stores a target's spec and returns the revision it was
	// committed at.
	PutSpec(ctx context.Context, spec Spec) (rev uint64, err error)
	// DeleteTarget removes a target's spec and state; existed reports
	// whether it was there.
	DeleteTarget(ctx context.Context, name string) (rev uint64, existed bool, err error)
	// ProposeState stores a target's new state if this replica still holds
	// its lease and the stored state is still the one at p.StateRev. It
	// returns an error wrapping ErrFenced when not.
	ProposeState(ctx context.Context, p StateProposal) error
	// Owns reports whether this replica probes the named target. It is
	// called with the checker's lock held and must not call the checker.
	Owns(name string) bool
}

// SharedTarget is a target as a Shared registry keeps it.
type SharedTarget struct {
	Spec     Spec
	State    *SharedState // nil until a replica stored one
	StateRev uint64       // the revision State was stored at
}

// SharedState is a target's state as its owner stored it.
type SharedState struct {
	State  State
	From   State
	Time   time.Time
	Result Result // the result that decided it, unless Reason is set
	Reason string
	Writer string // the replica that stored it
}

// StateProposal is a state an owner asks the shared registry to store.
type StateProposal struct {
	Name     string
	State    SharedState
	StateRev uint64 // the revision of the state it replaces; 0 for none
}

// SharedChangeKind says what a SharedChange is.
type SharedChangeKind int

// The kinds of shared changes.
const (
	// SharedSpecPut: a target was added or its spec replaced.
	SharedSpecPut SharedChangeKind = iota + 1
	// SharedSpecDeleted: a target was removed.
	SharedSpecDeleted
	// SharedStatePut: a target's owner stored its state.
	SharedStatePut
	// SharedMembersChanged: a replica joined or left; ownership moves.
	SharedMembersChanged
)

// SharedChange is one change to a shared registry, at its revision.
type SharedChange struct {
	Kind  SharedChangeKind
	Rev   uint64
	Spec  Spec        // SharedSpecPut
	Name  string      // SharedSpecDeleted, SharedStatePut
	State SharedState // SharedStatePut
}

var (
	// ErrFenced: a shared registry refused a write from a replica that no
	// longer holds its lease, or whose view of the state was stale.
	ErrFenced = errors.New("write fenced")
	// ErrNotShared: the call needs a view that only one replica has, and the
	// registry is shared.
	ErrNotShared = errors.New("not supported with a shared registry")
	// ErrUncertain: a write to the shared registry timed out; it may have
	// been committed or not.
	ErrUncertain = errors.New("the shared registry did not confirm the change in time; it may or may not be stored")
	// ErrLagging: a change is stored in the shared registry, but this
	// replica has not applied it yet (its watch is behind or cut off).
	ErrLagging = errors.New("the change is stored, but this replica has not caught up with it yet")
)

// sharedWait bounds how long Add and Remove wait for their own change to
// come back through ApplyShared.
const sharedWait = 10 * time.Second

// validateShared refuses what a shared checker cannot do.
func validateShared(spec Spec) error {
	switch {
	case spec.FlapThreshold > 0:
		return &FieldError{"flap_threshold", "flap damping is not supported with a shared registry (-registry etcd): leave it 0"}
	case spec.PassiveOutcomes:
		return &FieldError{"passive_outcomes", "passive outcomes are not supported with a shared registry (-registry etcd): leave it false"}
	}
	return nil
}

// loadShared registers the shared registry's targets without events.
func (c *Checker) loadShared() (uint64, error) {
	targets, rev, err := c.shared.Load()
	if err != nil {
		return 0, fmt.Errorf("load the shared registry: %w", err)
	}
	now := c.clock.Now()
	for _, st := range targets {
		c.putSharedLocked(st.Spec, st.State, st.StateRev, now, false)
	}
	return rev, nil
}

// addShared is Add with a shared registry.
func (c *Checker) addShared(spec Spec) (Status, bool, error) {
	if err := validateShared(spec); err != nil {
		return Status{}, false, err
	}
	c.mu.Lock()
	old := c.targets[spec.Name]
	if old != nil {
		spec.InitialState = old.spec.InitialState
	}
	same := old != nil && reflect.DeepEqual(old.spec, spec)
	closed := c.closed
	limitErr := c.checkLimitsLocked(old, spec)
	var st Status
	if same {
		st = c.statusLocked(old, c.clock.Now())
	}
	c.mu.Unlock()
	switch {
	case closed:
		return Status{}, false, ErrClosed
	case limitErr != nil:
		return Status{}, false, limitErr
	case same:
		return st, false, nil
	}
	// Every replica builds the prober when the spec comes back; building
	// one here refuses a probe this replica's rules refuse before it is
	// stored.
	p, err := c.newProber(spec.Probe)
	if err != nil {
		return Status{}, false, wrapProbeErr(err)
	}
	closeProber(p)
	ctx, cancel := context.WithTimeout(c.sched.closing(), sharedWait)
	defer cancel()
	rev, err := c.shared.PutSpec(ctx, spec)
	if err != nil {
		return Status{}, false, sharedWriteErr(err)
	}
	if err := c.waitApplied(ctx, rev); err != nil {
		return Status{}, false, err
	}
	st, err = c.Status(spec.Name)
	if err != nil { // removed again meanwhile
		return Status{}, false, fmt.Errorf("%w %q: stored at revision %d, then removed by another call", ErrUnknownTarget, spec.Name, rev)
	}
	return st, old == nil, nil
}

// removeShared is Remove with a shared registry.
func (c *Checker) removeShared(name string) (bool, error) {
	ctx, cancel := context.WithTimeout(c.sched.closing(), sharedWait)
	defer cancel()
	rev, existed, err := c.shared.DeleteTarget(ctx, name)
	if err != nil {
		return false, sharedWriteErr(err)
	}
	if err := c.waitApplied(ctx, rev); err != nil {
		return false, err
	}
	return existed, nil
}

// sharedWriteErr wraps a failed write to the shared registry: ErrStore
// (nothing changed), or ErrUncertain when the write timed out and may
// have been committed all the same.
func sharedWriteErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %v", ErrUncertain, err)
	}
	return fmt.Errorf("%w: %v", ErrStore, err)
}

// waitApplied waits until ApplyShared has applied rev, for Add and Remove
// to read their own write.
func (c *Checker) waitApplied(ctx context.Context, rev uint64) error {
	err := c.awaitRevision(ctx, rev)
	if err == nil || errors.Is(err, ErrClosed) {
		return err
	}
	return fmt.Errorf("%w: revision %d", ErrLagging, rev)
}

// WaitRevision waits until the checker has applied rev, for a watcher that
// resumes on this replica from a revision another replica gave it. It
// returns ctx's error if ctx ends first. Without a shared registry it
// returns at once.
func (c *Checker) WaitRevision(ctx context.Context, rev uint64) error {
	if c.shared == nil {
		return nil
	}
	return c.awaitRevision(ctx, rev)
}

// awaitRevision waits until rev is applied, ctx ends (its error) or the
// checker closes (ErrClosed).
func (c *Checker) awaitRevision(ctx context.Context, rev uint64) error {
	return c.hub.wait(ctx, rev, c.sched.closing().Done())
}

// ApplyShared applies changes read from the shared registry, in revision
// order, then moves the checker's revision to rev (at least that of the
// last change): every replica applies the same changes and so shows the
// same targets, states and events. One goroutine calls it.
func (c *Checker) ApplyShared(changes []SharedChange, rev uint64) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	now := c.clock.Now()
	for _, ch := range changes {
		c.applying = ch.Rev
		switch ch.Kind {
		case SharedSpecPut:
			c.putSharedLocked(ch.Spec, nil, 0, now, true)
		case SharedSpecDeleted:
			c.deleteSharedLocked(ch.Name, now)
		case SharedStatePut:
			c.mirrorStateLocked(ch.Name, ch.State, ch.Rev)
		case SharedMembersChanged:
			c.reownLocked(now)
		}
		rev = max(rev, ch.Rev)
	}
	c.applying = 0
	if rev > c.rev {
		c.rev = rev
	}
	c.hub.advance(c.rev)
	c.unlockAndReport()
}

// SetSharedErr records that the shared registry cannot be reached (or nil
// once it can again): readiness and ListTargets report it.
func (c *Checker) SetSharedErr(err error) { c.setStoreErr(err) }

// putSharedLocked adds a target, or replaces its spec, as the shared
// registry says; events says whether to emit them (not while loading).
func (c *Checker) putSharedLocked(spec Spec, st *SharedState, stateRev uint64, now time.Time, events bool) {
	spec = spec.WithDefaults(c.defaults)
	t := c.targets[spec.Name]
	if t == nil {
		p, err := c.newProber(spec.Probe)
		if err != nil {
			// Another replica's rules allowed it; this one's refuse it.
			c.logger.Warn("shared target's probe is refused here; it fails its probes on this replica", "target", spec.Name, "error", err)
			p = refusedProber{err}
		}
		state := spec.InitialState
		if st != nil {
			state = st.State
		}
		t = newTarget(spec, p, state)
		t.index = -1
		t.stateRev = stateRev
		if st != nil {
			t.lastTr = st.Time
			t.carried = true
		}
		c.targets[spec.Name] = t
		c.joinPoolLocked(t)
		c.ownLocked(t, c.shared.Owns(spec.Name), now)
		if events {
			c.emitLocked(Event{Kind: EventAdded, Time: now, Status: c.statusLocked(t, now)})
		}
		return
	}
	spec.InitialState = t.spec.InitialState
	if reflect.DeepEqual(t.spec, spec) {
		return
	}
	if !reflect.DeepEqual(t.spec.Probe, spec.Probe) {
		p, err := c.newProber(spec.Probe)
		if err != nil {
			c.logger.Warn("shared target's probe is refused here; it fails its probes on this replica", "target", spec.Name, "error", err)
			p = refusedProber{err}
		}
		closeProber(t.prober) // a probe in flight keeps its own prober value
		t.prober = p
		t.gen++
	}
	prevGroup := c.setSpecLocked(t, spec)
	if prevGroup != spec.Group {
		c.dropPoolLocked(prevGroup)
	}
	c.emitLocked(Event{Kind: EventUpdated, Time: now, Status: c.statusLocked(t, now), prevGroup: prevGroup})
	if _, changed := t.m.SetModel(spec.Model); changed && t.owned {
		// The owner stores what the new model makes of the state.
		c.updateLocked(t, now, cause{reason: "model changed to " + spec.Model.String()})
	}
	if t.owned {
		c.sched.hurryLocked(t, now)
	}
}

// deleteSharedLocked removes a target as the shared registry says.
func (c *Checker) deleteSharedLocked(name string, now time.Time) {
	t, ok := c.targets[name]
	if !ok {
		return
	}
	delete(c.targets, name)
	c.sched.removeLocked(t)
	t.index = -1
	c.leavePoolLocked(t)
	c.emitLocked(Event{Kind: EventRemoved, Time: now, Status: c.statusLocked(t, now)})
	c.dropPoolLocked(t.spec.Group)
	closeProber(t.prober)
}

// mirrorStateLocked applies a state a target's owner stored.
func (c *Checker) mirrorStateLocked(name string, st SharedState, rev uint64) {
	t, ok := c.targets[name]
	if !ok {
		return
	}
	t.stateRev = rev
	t.proposing = false
	why := cause{result: st.Result, reason: st.Reason}
	c.mirroring = true
	c.setStateLocked(t, st.State, st.Time, why)
	c.mirroring = false
	if !t.owned {
		t.m.State = st.State
		t.m.PassStreak, t.m.FailStreak = 0, 0
		return
	}
	// The owner's verdict may have moved on while the write was on its way.
	c.updateLocked(t, c.clock.Now(), cause{result: t.last}) // zero before the first result
}

// reownLocked asks the shared registry which targets this replica owns now
// that its members changed, and starts or stops probing them.
func (c *Checker) reownLocked(now time.Time) {
	for _, t := range c.targets {
		c.ownLocked(t, c.shared.Owns(t.spec.Name), now)
	}
}

// ownLocked makes this replica probe t, or stop probing it. A target taken
// over starts from its stored state, as after a restart, with its first
// probe within one interval.
func (c *Checker) ownLocked(t *target, own bool, now time.Time) {
	if own == t.owned {
		return
	}
	t.owned = own
	if !own {
		c.sched.removeLocked(t)
		t.index = -1
		t.gen++ // a result in flight is no longer this replica's to store
		t.proposing = false
		return
	}
	t.m = Machine{Model: t.spec.Model, Rise: t.spec.Rise, Fall: t.spec.Fall, State: t.state}
	t.carried = true
	t.slot = time.Time{}
	c.sched.addLocked(t, now.Add(firstDelay(t.spec.Name, t.spec.Interval)))
}

// proposeLocked asks the proposer to store t's new state: with a shared
// registry a state changes only once its owner's write comes back.
func (c *Checker) proposeLocked(t *target, to State, now time.Time, why cause) {
	if !t.owned || t.proposing || to == t.state {
		return
	}
	t.proposing = true
	c.proposals = append(c.proposals, proposal{t: t, gen: t.gen, p: StateProposal{
		Name:     t.spec.Name,
		StateRev: t.stateRev,
		State:    SharedState{State: to, From: t.state, Time: now, Result: why.result, Reason: why.reason},
	}})
	select {
	case c.proposeWake <- struct{}{}:
	default:
	}
}

type proposal struct {
	t   *target
	gen uint64 // t.gen when proposed: a target given up since is not written
	p   StateProposal
}

// proposeConcurrency bounds the state writes in flight at once: each waits
// for its commit, and etcd commits many together, so a mass transition
// (start-up, an outage) is stored at etcd's pace rather than one round
// trip at a time.
const proposeConcurrency = 64

// proposeBatch writes a batch of proposed states, proposeConcurrency at a
// time, and returns those to retry with the last error that asked for it.
func (c *Checker) proposeBatch(batch []proposal) (retry []proposal, lastErr error) {
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex // protects retry and lastErr
		sem = make(chan struct{}, proposeConcurrency)
	)
	for _, pr := range batch {
		c.mu.Lock()
		valid := pr.t.owned && pr.t.gen == pr.gen && c.targets[pr.p.Name] == pr.t
		c.mu.Unlock()
		if !valid {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(c.sched.closing(), sharedWait)
			err := c.shared.ProposeState(ctx, pr.p)
			cancel()
			switch {
			case err == nil:
			case errors.Is(err, ErrFenced):
				c.logger.Debug("state write fenced: this replica no longer owns the target or its view was stale", "target", pr.p.Name, "error", err)
				c.mu.Lock()
				pr.t.proposing = false
				c.mu.Unlock()
			default:
				mu.Lock()
				lastErr = err
				retry = append(retry, pr)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return retry, lastErr
}

// proposeLoop writes proposed states, each in its own transaction, and
// retries those the shared registry could not take, with backoff; fenced
// ones are dropped (the writes that fenced them come back through
// ApplyShared).
func (c *Checker) proposeLoop() {
	defer close(c.proposeDone)
	backoff := 50 * time.Millisecond
	for {
		select {
		case <-c.proposeWake:
		case <-c.sched.closing().Done():
			return
		}
		for {
			c.mu.Lock()
			batch := c.proposals
			c.proposals = nil
			c.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			retry, lastErr := c.proposeBatch(batch)
			c.setStoreErr(lastErr)
			if len(retry) == 0 {
				backoff = 50 * time.Millisecond
				continue
			}
			c.logger.Error("storing states in the shared registry failed; retrying", "error", lastErr, "states", len(retry))
			c.mu.Lock()
			c.proposals = append(retry, c.proposals...)
			c.mu.Unlock()
			select {
			case <-time.After(backoff):
				backoff = min(2*backoff, 2*time.Second)
			case <-c.sched.closing().Done():
				return
			}
		}
	}
}

// Replica returns this replica's member ID and the live members, sorted,
// when the shared registry tells them; empty otherwise.
func (c *Checker) Replica() (id string, members []string) {
	type membership interface {
		ID() string
		Members() []string
	}
	if m, ok := c.shared.(membership); ok {
		return m.ID(), m.Members()
	}
	return "", nil
}

// refusedProber stands for a shared target whose probe this replica's rules
// refuse (another replica's allowed it): every probe fails with the reason.
type refusedProber struct{ err error }

func (r refusedProber) Probe(context.Context) error {
	return fmt.Errorf("refused by this replica's rules: %w", r.err)
}
