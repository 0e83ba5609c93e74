package checker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pulsehealth/pulse/checker/outlier"
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
// Every policy takes the same path as on a single checker, through the
// parts Shared is made of: specs in batches (SharedSpecBatch), a guard per
// group that holds the panic threshold, slow starts and automatic removals
// across replicas (SharedGroups, group.go), several vantages
// (SharedVantages), passive outcomes forwarded to the owner
// (SharedOutcomes), each replica's overload (SharedOverloads), outlier
// samples and judgements (SharedOutliers) and announced events
// (SharedAnnouncements). Flap damping travels with the states (flap.go).
// Reads follow the writes acknowledged before them on any replica
// (SharedProgress, catchup.go).
type Shared interface {
	// Load returns every target and its last state, and the revision they
	// were read at.
	Load() ([]SharedTarget, uint64, error)
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
	// Owner returns the member that probes the named target, from the
	// view Owns answers from; "" when there is none. It is called with the
	// checker's lock held and must not call the checker.
	Owner(name string) string
	// ID returns this replica's member ID; Members every live replica's,
	// sorted.
	ID() string
	Members() []string

	SharedSpecBatch
	SharedGroups
	SharedVantages
	SharedOutcomes
	SharedOverloads
	SharedOutliers
	SharedAnnouncements
	SharedProgress
}

// SharedSpecBatch is the part of Shared that stores many specs in few
// transactions; AddMany and a group's mode change use it.
type SharedSpecBatch interface {
	// PutSpecs stores specs in order, several in each transaction, and
	// returns the revision of the last and how many specs, from the first,
	// are stored: on an error, those and no others.
	PutSpecs(ctx context.Context, specs []Spec) (rev uint64, stored int, err error)
}

// SharedTarget is a target as a Shared registry keeps it.
type SharedTarget struct {
	Spec     Spec
	State    *SharedState // nil until a replica stored one
	StateRev uint64       // the revision State was stored at
	// Verdicts are its vantages' stored verdicts (see SharedVantages),
	// each with its revision.
	Verdicts []VantageVerdict
}

// SharedState is a target's state as its owner stored it.
type SharedState struct {
	State  State
	From   State
	Time   time.Time
	Result Result // the result that decided it, unless Reason is set
	Reason string
	Writer string // the replica that stored it
	// Flap is the owner's flap log (see flap.go); nil in a record
	// that has none.
	Flap *FlapRecord
	// Held: the target's owner wants it unhealthy, but its group's panic
	// threshold holds it in State, routable (see SharedGroups).
	Held bool
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
	// SharedGroupChanged: a group's guard was written (see SharedGroups);
	// it comes after the other changes of its write, at the same revision.
	SharedGroupChanged
	// SharedPolicyPut: a group's policy was stored.
	SharedPolicyPut
	// SharedVerdictPut: a vantage stored its verdict on a target (see
	// SharedVantages); SharedVerdictDeleted: it was removed (Verdict has
	// the member alone).
	SharedVerdictPut
	SharedVerdictDeleted
	// SharedVantagePut: a judge stored its record of a vantage (Vantage).
	SharedVantagePut
	// SharedSamplesPut: a replica stored outlier samples of the group
	// Name (Samples); SharedOutliersPut: a judge stored a group's record
	// (Outliers). See SharedOutliers.
	SharedSamplesPut
	SharedOutliersPut
)

// SharedChange is one change to a shared registry, at its revision.
type SharedChange struct {
	Kind  SharedChangeKind
	Rev   uint64
	Spec  Spec        // SharedSpecPut
	Name  string      // SharedSpecDeleted, SharedStatePut; the group for SharedGroupChanged, SharedPolicyPut
	State SharedState // SharedStatePut

	Outcome  SharedOutcome   // SharedOutcomePut (passive.go)
	Overload ReplicaOverload // SharedOverloadPut (overload.go)
	// Announcement is a replica's announced event (SharedAnnounced).
	Announcement Announcement
	// Time is when the guard's writer wrote it (SharedGroupChanged), or
	// the spec's writer stored or removed it (SharedSpecPut,
	// SharedSpecDeleted; zero if it did not say): the time of the events
	// it leads to, the same on every replica.
	Time time.Time
	// GuardRev is the revision the guard was written at
	// (SharedGroupChanged): Rev, unless the registry was read again after
	// it lost its history, when Rev is the revision of that read.
	GuardRev uint64
	// Policy is the group's stored policy (SharedPolicyPut); its zero
	// fields take the defaults.
	Policy GroupPolicy
	// Verdict is a vantage's verdict on the target Name
	// (SharedVerdictPut, SharedVerdictDeleted).
	Verdict VantageVerdict
	// Vantage is a judge's record of a vantage (SharedVantagePut).
	Vantage VantageRecord
	// Samples and Outliers: SharedSamplesPut, SharedOutliersPut.
	Samples  []outlier.Sample
	Outliers outlier.Record
}

var (
	// ErrFenced: a shared registry refused a write from a replica that no
	// longer holds its lease, or whose view of the state was stale.
	ErrFenced = errors.New("write fenced")
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

// The façade's calls for a shared registry: they only concern the
// replication, and live beside it to keep checker.go a short read.

// ApplyShared applies changes read from the shared registry, in revision
// order, then moves the checker's revision to rev (at least that of the
// last change): every replica applies the same changes and so shows the
// same targets, states and events. One goroutine calls it. Without a
// shared registry it does nothing.
func (c *Checker) ApplyShared(changes []SharedChange, rev uint64) {
	if c.repl != nil {
		c.repl.apply(changes, rev)
	}
}

// SetSharedErr records that the shared registry cannot be reached (or nil
// once it can again): readiness and ListTargets report it. Without a
// shared registry it does nothing.
func (c *Checker) SetSharedErr(err error) {
	if c.repl != nil {
		c.repl.setErr(err)
	}
}

// Replica returns this replica's member ID and the live members, sorted,
// when the shared registry tells them; empty otherwise.
func (c *Checker) Replica() (id string, members []string) {
	if c.repl == nil {
		return "", nil
	}
	return c.repl.replica()
}

// replication is the etcd-mode adapter between the registry and a Shared
// registry: it writes specs and the states the registry proposes through
// Shared, and applies what comes back (ApplyShared) to the registry, then
// moves the hub to the shared revision. Its lock guards only the queue of
// proposals; the registry queues them with its own lock held (lock order:
// the registry's, then the replication's, then the hub's).
type replication struct {
	shared  Shared
	reg     *registry
	hub     *hub
	logger  *slog.Logger
	closing context.Context // ends when the checker closes
	lastErr errBox          // the shared registry cannot be reached; see SetSharedErr
	// catchUpPaused is when CatchUp reads the shared registry's revision
	// again (Unix nanoseconds) after it could not; see catchup.go.
	catchUpPaused atomic.Int64
	revisions     *revisionReads // CatchUp's reads of that revision

	guard *guardWriter // writes the groups' decisions

	wake chan struct{} // there are proposals
	done chan struct{} // closed when proposeLoop (and the guard's writer) have returned

	mu        sync.Mutex // protects proposals
	proposals []proposal

	ovl     overloadPub   // this replica's overload state to publish; see overload.go
	judging chan struct{} // closed when judgeLoop has returned
	// events are those of the changes being applied, published together
	// once they are all applied: several events share a revision (a group
	// write, a read after a lost history), and a watcher reading between
	// two of them would skip the second. Guarded by the registry's lock.
	events []Event
}

// newReplication loads the shared registry into reg and returns its
// adapter, not yet started (see start).
func newReplication(shared Shared, reg *registry, logger *slog.Logger, closing context.Context) (*replication, error) {
	targets, rev, err := shared.Load()
	if err != nil {
		return nil, fmt.Errorf("load the shared registry: %w", err)
	}
	rp := &replication{
		shared:    shared,
		reg:       reg,
		logger:    logger,
		closing:   closing,
		revisions: &revisionReads{read: shared.CurrentRevision, closing: closing},
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		ovl:       overloadPub{wake: make(chan struct{}, 1), done: make(chan struct{})},
	}
	rp.guard = newGuardWriter(shared, rp)
	reg.vantages, reg.self = shared, shared.Self()
	reg.link, reg.remote = rp, true
	reg.loadShared(targets, rev)
	rp.loadOverloads()
	reg.mu.Lock()
	reg.loadGroupsLocked(shared.LoadedGroups())
	reg.mu.Unlock()
	reg.loadVerdicts(targets)
	rp.loadOutliers()
	return rp, nil
}

// start makes h the hub ApplyShared moves and runs the proposers until
// the checker closes.
func (rp *replication) start(h *hub) {
	rp.hub = h
	go func() {
		defer close(rp.done)
		var wg sync.WaitGroup
		wg.Go(rp.guard.run)
		rp.proposeLoop()
		wg.Wait()
	}()
	go rp.publishLoop()
	rp.judging = make(chan struct{})
	go rp.judgeLoop()
}

// wait waits for the proposer and the publisher to stop, after the
// checker's context ended.
func (rp *replication) wait() {
	<-rp.done
	<-rp.ovl.done
	<-rp.judging
	rp.revisions.close()
}

// owns is Shared.Owns, for the registry.
func (rp *replication) owns(name string) bool { return rp.shared.Owns(name) }

// owner is Shared.Owner, for the registry.
func (rp *replication) owner(name string) string { return rp.shared.Owner(name) }

// markGroup asks the guard's writer to look at group again.
func (rp *replication) markGroup(group string) { rp.guard.mark(group) }

// propose queues a state to write; the registry calls it with its lock
// held.
func (rp *replication) propose(p proposal) {
	rp.mu.Lock()
	rp.proposals = append(rp.proposals, p)
	rp.mu.Unlock()
	select {
	case rp.wake <- struct{}{}:
	default:
	}
}

// putSpecs writes specs through the shared registry, in few transactions
// (a group's mode change of up to 128 targets in one), and waits until they have come back through
// ApplyShared. Every replica builds the probers when the specs come back:
// the ones built to check the specs are closed.
func (rp *replication) putSpecs(specs []Spec, probers []Prober) (int, error) {
	for _, p := range probers {
		closeProber(p)
	}
	if len(specs) == 0 {
		return 0, nil
	}
	// Each transaction carries a few dozen specs: allow for a large batch.
	ctx, cancel := context.WithTimeout(rp.closing, sharedWait+time.Duration(len(specs))*time.Millisecond)
	defer cancel()
	rev, stored, err := rp.shared.PutSpecs(ctx, specs)
	if err != nil {
		err = sharedWriteErr(err)
	}
	if stored > 0 {
		if werr := rp.waitApplied(ctx, rev); err == nil {
			err = werr
		}
	}
	return stored, err
}

// deleteTarget removes a target through the shared registry and waits
// until the removal has come back. The stream shows the removal; its
// reason, this replica's, is logged.
func (rp *replication) deleteTarget(name, reason string) (bool, error) {
	ctx, cancel := context.WithTimeout(rp.closing, sharedWait)
	defer cancel()
	rev, existed, err := rp.shared.DeleteTarget(ctx, name)
	if err != nil {
		return false, sharedWriteErr(err)
	}
	if err := rp.waitApplied(ctx, rev); err != nil {
		return false, err
	}
	if existed && reason != "" {
		rp.logger.Warn(name+": removed, "+reason, "target", name)
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
func (rp *replication) waitApplied(ctx context.Context, rev uint64) error {
	err := rp.await(ctx, rev)
	if err == nil || errors.Is(err, ErrClosed) {
		return err
	}
	return fmt.Errorf("%w: revision %d", ErrLagging, rev)
}

// await waits until rev is applied, ctx ends (its error) or the checker
// closes (ErrClosed).
func (rp *replication) await(ctx context.Context, rev uint64) error {
	return rp.hub.wait(ctx, rev, rp.closing.Done())
}

// apply is ApplyShared: the registry applies the changes and the hub moves
// to the revision after them, under the registry's lock, so that a watch
// never starts between the two.
func (rp *replication) apply(changes []SharedChange, rev uint64) {
	rp.reg.lock()
	rev, ok := rp.reg.applySharedLocked(changes, rev)
	if ok {
		if len(rp.events) > 0 {
			rp.hub.publish(rp.events...)
			clear(rp.events)
			rp.events = rp.events[:0]
		}
		rp.hub.advance(rev)
	}
	rp.reg.unlockAndReport()
	if ok && slices.ContainsFunc(changes, func(ch SharedChange) bool { return ch.Kind == SharedMembersChanged }) {
		rp.reg.reportMembers() // the owners moved: no event says so
	}
}

// queueEvent is the registry's sink with a shared registry: it keeps the
// events of the changes being applied for apply to publish. The registry
// calls it with its lock held.
func (rp *replication) queueEvent(e Event) { rp.events = append(rp.events, e) }

type proposal struct {
	t   *target
	gen uint32 // t.gen when proposed: a target given up since is not written
	p   StateProposal
	// verdict, when set, is this replica's verdict to store instead of a
	// state (see vantage.go).
	verdict *VerdictProposal
}

// name is the proposal's target. It is read off the proposal, not the
// target, whose spec the registry may replace while a write is in flight.
func (pr proposal) name() string {
	if pr.verdict != nil {
		return pr.verdict.Target
	}
	return pr.p.Name
}

// write stores the proposal in the shared registry.
func (pr proposal) write(ctx context.Context, rp *replication) error {
	if pr.verdict != nil {
		return rp.reg.vantages.ProposeVerdict(ctx, *pr.verdict)
	}
	return rp.shared.ProposeState(ctx, pr.p)
}

// proposeConcurrency bounds the state writes in flight at once: each waits
// for its commit, and etcd commits many together, so a mass transition
// (start-up, an outage) is stored at etcd's pace rather than one round
// trip at a time.
const proposeConcurrency = 64

// proposeBatch writes a batch of proposed states, proposeConcurrency at a
// time, and returns those to retry with the last error that asked for it.
func (rp *replication) proposeBatch(batch []proposal) (retry []proposal, lastErr error) {
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex // protects retry and lastErr
		sem = make(chan struct{}, proposeConcurrency)
	)
	for _, pr := range batch {
		if !rp.reg.proposalValid(pr) {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(rp.closing, sharedWait)
			err := pr.write(ctx, rp)
			cancel()
			switch {
			case err == nil:
			case errors.Is(err, ErrFenced):
				rp.logger.Debug("state write fenced: this replica no longer owns the target or its view was stale", "target", pr.name(), "error", err)
				rp.reg.fenced(pr)
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
func (rp *replication) proposeLoop() {
	backoff := 50 * time.Millisecond
	for {
		select {
		case <-rp.wake:
		case <-rp.closing.Done():
			return
		}
		for {
			rp.mu.Lock()
			batch := rp.proposals
			rp.proposals = nil
			rp.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			retry, lastErr := rp.proposeBatch(batch)
			rp.lastErr.set(lastErr)
			if len(retry) == 0 {
				backoff = 50 * time.Millisecond
				continue
			}
			rp.logger.Error("storing states in the shared registry failed; retrying", "error", lastErr, "states", len(retry))
			rp.mu.Lock()
			rp.proposals = append(retry, rp.proposals...)
			rp.mu.Unlock()
			select {
			case <-time.After(backoff):
				backoff = min(2*backoff, 2*time.Second)
			case <-rp.closing.Done():
				return
			}
		}
	}
}

// err returns the last error writing to the shared registry, or the one
// SetSharedErr recorded.
func (rp *replication) err() error { return rp.lastErr.get() }

// setErr is SetSharedErr.
func (rp *replication) setErr(err error) { rp.lastErr.set(err) }

// replica is Replica.
func (rp *replication) replica() (id string, members []string) {
	return rp.shared.ID(), rp.shared.Members()
}

// refusedProber stands for a shared target whose probe this replica's rules
// refuse (another replica's allowed it): every probe fails with the reason.
type refusedProber struct{ err error }

func (r refusedProber) Probe(context.Context) error {
	return fmt.Errorf("refused by this replica's rules: %w", r.err)
}

// errBox holds an error for concurrent use.
type errBox struct {
	mu  sync.Mutex // protects err
	err error
}

func (b *errBox) set(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.err = err
}

func (b *errBox) get() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}
