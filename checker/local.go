package checker

import (
	"slices"
	"time"
)

// localLink is the log of a checker that shares its registry with no one:
// a registry of one member. Decisions go through it exactly as they go
// through a shared registry (a state or flap record proposed, a group's
// decisions written together, an overload published), and it applies each
// at once, under the registry's lock, as the shared registry's write would
// come back: one path decides and applies, alone or on replicas. The
// committer makes what it applied durable before its events are published
// (see committer.go).
type localLink struct {
	reg *registry
	// dirty are the groups to decide again; flushing is set while they
	// are, so that a decision that marks its own group again is taken up
	// by the same loop. Both guarded by the registry's lock.
	dirty    map[string]struct{}
	flushing bool
}

func newLocalLink(reg *registry) *localLink {
	return &localLink{reg: reg, dirty: make(map[string]struct{})}
}

// owns: the only member probes every target.
func (*localLink) owns(string) bool { return true }

// guarded: the panic threshold decides a group's states in group writes,
// as on replicas.
func (*localLink) guarded() bool { return true }

// propose applies a state record at once.
func (l *localLink) propose(p proposal) {
	l.reg.mirrorStateLocked(p.p.Name, p.p.State, l.reg.rev)
}

// publishOverload applies this checker's overload state at once.
func (l *localLink) publishOverload(o ReplicaOverload) {
	l.reg.applyOverloadLocked(o, o.Since)
}

// markGroup decides the group's states again, now: its decisions are
// applied before the call that led to them returns.
func (l *localLink) markGroup(group string) {
	l.dirty[group] = struct{}{}
	if l.flushing {
		return
	}
	l.flushing = true
	defer func() { l.flushing = false }()
	r := l.reg
	// Every round applies at least one write or ends the loop: a write
	// never undoes itself, so the loop ends; the bound only guards
	// against a decision that would.
	for range maxGroupRounds {
		if len(l.dirty) == 0 {
			return
		}
		groups := make([]string, 0, len(l.dirty))
		for g := range l.dirty {
			groups = append(groups, g)
		}
		clear(l.dirty)
		slices.Sort(groups)
		for _, g := range groups {
			l.decideLocked(g, r.clock.Now())
		}
	}
	r.logger.Error("a group's decisions did not settle; they are taken up again at its next change", "groups", len(l.dirty))
	clear(l.dirty)
}

// maxGroupRounds bounds the rounds of one markGroup.
const maxGroupRounds = 1000

// decideLocked makes and applies the group's decisions, as a group write
// and its guard's change would be applied on replicas.
func (l *localLink) decideLocked(group string, now time.Time) {
	r := l.reg
	p := r.pools[group]
	if p == nil {
		return
	}
	if gp, ok := r.buildGroupLocked(group, now); ok {
		for _, w := range gp.Writes {
			r.mirrorStateLocked(w.Name, w.State, r.rev)
		}
	}
	r.announcePanicLocked(group, p, now)
}
