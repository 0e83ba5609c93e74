package etcdreg

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/outlier"
)

// Group guards: the panic threshold across replicas (checker.SharedGroups).
//
// Two more kinds of keys, under the prefix:
//
//	guards/<group>    the group's guard: rewritten by every transaction that
//	                  changes the group's unhealthy set, holds, size or policy
//	policies/<group>  the group's panic threshold (SetGroupPolicy)
//
// A group write (ProposeGroup) puts the states its writer decided and the
// guard, if the guard's mod revision is still the one the writer decided
// at: two replicas deciding from the same view cannot both commit. A
// target joining or leaving a group (PutSpec, DeleteTarget) and a policy
// change rewrite the guard in their own transaction, so a decision made
// before them is refused too. The guard's put is the transaction's last
// operation: its event comes after the states it guards.

type guardRecord struct {
	V      int       `json:"v"`
	Writer string    `json:"writer"`
	Time   time.Time `json:"time"`
	Why    string    `json:"why"`
}

type policyRecord struct {
	V                    int            `json:"v"`
	MaxUnhealthyFraction float64        `json:"max_unhealthy_fraction"`
	SlowStart            time.Duration  `json:"slow_start,omitempty"`
	RemoveAfterUnhealthy time.Duration  `json:"remove_after_unhealthy,omitempty"`
	Objective            float64        `json:"objective,omitempty"`
	ObjectiveWindow      time.Duration  `json:"objective_window,omitempty"`
	Vantages             int            `json:"vantages,omitempty"`
	Quorum               int            `json:"quorum,omitempty"`
	Outlier              outlier.Policy `json:"outlier,omitzero"`
}

func (pr policyRecord) policy() checker.GroupPolicy {
	return checker.GroupPolicy{MaxUnhealthyFraction: pr.MaxUnhealthyFraction, SlowStart: pr.SlowStart, RemoveAfterUnhealthy: pr.RemoveAfterUnhealthy,
		Objective: pr.Objective, ObjectiveWindow: pr.ObjectiveWindow, Vantages: pr.Vantages, Quorum: pr.Quorum, Outlier: pr.Outlier}
}

func (r *Registry) guardKey(group string) string  { return r.prefix + "guards/" + group }
func (r *Registry) policyKey(group string) string { return r.prefix + "policies/" + group }

// putGuard is the operation that rewrites group's guard.
func (r *Registry) putGuard(group, why string) clientv3.Op {
	v, _ := json.Marshal(guardRecord{V: 1, Writer: r.id, Time: time.Now().UTC(), Why: why})
	return clientv3.OpPut(r.guardKey(group), string(v))
}

// fences returns the comparisons that fence a write by this replica: its
// lease (its member key is the one it created) and its view of the
// members.
func (r *Registry) fences() ([]clientv3.Cmp, error) {
	r.mu.Lock()
	createRev, joined := r.createRev, r.joinedRev
	r.mu.Unlock()
	if createRev == 0 {
		return nil, fmt.Errorf("%w: this replica has lost its lease and not yet taken a new one", checker.ErrFenced)
	}
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(r.memberKey(r.id)), "=", createRev),
		// No replica joined (or came back) since this one's view of the
		// members: ownership is still what this replica thinks. One that
		// left only gave it more.
		clientv3.Compare(clientv3.ModRevision(r.prefix+"members/"), "<", joined+1).WithPrefix(),
	}, nil
}

// ProposeGroup implements checker.SharedGroups: one transaction puts the
// states and the guard, fenced by this replica's lease and view of the
// members, by the guard's revision and by each state's revision.
func (r *Registry) ProposeGroup(ctx context.Context, g checker.GroupProposal) (uint64, error) {
	cmps, err := r.fences()
	if err != nil {
		return 0, err
	}
	cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(r.guardKey(g.Group)), "=", int64(g.GuardRev)))
	ops := make([]clientv3.Op, 0, len(g.Writes)+1)
	for _, w := range g.Writes {
		v, err := json.Marshal(stateRecordOf(w, r.id))
		if err != nil {
			return 0, err
		}
		cmps = append(cmps,
			clientv3.Compare(clientv3.ModRevision(r.stateKey(w.Name)), "=", int64(w.StateRev)),
			clientv3.Compare(clientv3.Version(r.specKey(w.Name)), ">", 0))
		ops = append(ops, clientv3.OpPut(r.stateKey(w.Name), string(v)))
	}
	ops = append(ops, r.putGuard(g.Group, "states"))
	resp, err := r.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return 0, fmt.Errorf("etcd: %w", err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("%w: group %s: %s's lease, its view of the members, the group's guard at revision %d, a state or a target is out of date", checker.ErrFenced, g.Group, r.id, g.GuardRev)
	}
	return uint64(resp.Header.Revision), nil
}

// PutGroupPolicy implements checker.SharedGroups.
func (r *Registry) PutGroupPolicy(ctx context.Context, group string, p checker.GroupPolicy) (uint64, error) {
	v, err := json.Marshal(policyRecord{V: 1, MaxUnhealthyFraction: p.MaxUnhealthyFraction, SlowStart: p.SlowStart, RemoveAfterUnhealthy: p.RemoveAfterUnhealthy,
		Objective: p.Objective, ObjectiveWindow: p.ObjectiveWindow, Vantages: p.Vantages, Quorum: p.Quorum, Outlier: p.Outlier})
	if err != nil {
		return 0, err
	}
	resp, err := r.cli.Txn(ctx).Then(
		clientv3.OpPut(r.policyKey(group), string(v)),
		r.putGuard(group, "policy"),
	).Commit()
	if err != nil {
		return 0, fmt.Errorf("etcd: %w", err)
	}
	return uint64(resp.Header.Revision), nil
}

// LoadedGroups implements checker.SharedGroups.
func (r *Registry) LoadedGroups() []checker.SharedGroup {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]checker.SharedGroup, 0, len(r.groups))
	for _, g := range r.groups {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b checker.SharedGroup) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// loadGroupKey records a guard or policy key read by Load; r.mu is held.
func (r *Registry) loadGroupKey(kind, group string, modRev int64, v []byte) error {
	g := r.groups[group]
	g.Name = group
	switch kind {
	case "guards":
		g.GuardRev = uint64(modRev)
	case "policies":
		var pr policyRecord
		if err := json.Unmarshal(v, &pr); err != nil {
			return fmt.Errorf("policy of group %q in etcd: %w", group, err)
		}
		g.Policy = pr.policy()
	}
	r.groups[group] = g
	return nil
}

// groupChange turns a guard or policy event into the checker's change.
func (r *Registry) groupChange(kind, group string, ev *clientv3.Event) (checker.SharedChange, bool) {
	rev := uint64(ev.Kv.ModRevision)
	put := ev.Type == clientv3.EventTypePut
	switch kind {
	case "guards":
		if !put {
			return checker.SharedChange{}, false
		}
		var gr guardRecord
		if err := json.Unmarshal(ev.Kv.Value, &gr); err != nil {
			r.logger.Error("a group's guard in etcd does not decode; applying it without its time", "key", string(ev.Kv.Key), "error", err)
		}
		return checker.SharedChange{Kind: checker.SharedGroupChanged, Rev: rev, GuardRev: rev, Name: group, Time: gr.Time}, true
	case "policies":
		var pr policyRecord
		if put {
			if err := json.Unmarshal(ev.Kv.Value, &pr); err != nil {
				r.logger.Error("ignoring a group policy in etcd that does not decode", "key", string(ev.Kv.Key), "error", err)
				return checker.SharedChange{}, false
			}
		}
		return checker.SharedChange{Kind: checker.SharedPolicyPut, Rev: rev, Name: group, Policy: pr.policy()}, true
	}
	return checker.SharedChange{}, false
}

// specGroup reads a target's spec and returns its group and the spec's
// mod revision; 0 when there is none.
func (r *Registry) specGroup(ctx context.Context, name string) (group string, modRev int64, err error) {
	resp, err := r.cli.Get(ctx, r.specKey(name))
	if err != nil {
		return "", 0, fmt.Errorf("etcd: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return "", 0, nil
	}
	var sr specRecord
	if err := json.Unmarshal(resp.Kvs[0].Value, &sr); err != nil {
		return "", 0, fmt.Errorf("target %q in etcd: %w", name, err)
	}
	return sr.Spec.Group, resp.Kvs[0].ModRevision, nil
}

// maxSpecRetries bounds how often PutSpec and DeleteTarget read the spec
// again when another write changed it between their read and their
// transaction.
const maxSpecRetries = 8

// PutSpec stores one spec in a transaction of its own (the checker writes
// through PutSpecs). A target that joins or leaves a group rewrites the
// group's guard in the same transaction, and one that moves also its
// state (see restate).
func (r *Registry) PutSpec(ctx context.Context, spec checker.Spec) (uint64, error) {
	v, err := json.Marshal(specRecord{V: 1, Spec: spec, Time: time.Now().UTC()})
	if err != nil {
		return 0, err
	}
	key := r.specKey(spec.Name)
	for range maxSpecRetries {
		old, modRev, err := r.specGroup(ctx, spec.Name)
		if err != nil {
			return 0, err
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", modRev)}
		ops := []clientv3.Op{clientv3.OpPut(key, string(v))}
		if modRev != 0 && old != spec.Group {
			// The target moves: its state is written again (not held), so
			// that a state write decided in its old group, or ungrouped,
			// and still in flight is refused.
			c, o, err := r.restate(ctx, spec.Name)
			if err != nil {
				return 0, err
			}
			cmps, ops = append(cmps, c...), append(ops, o...)
		}
		if modRev == 0 || old != spec.Group {
			if spec.Group != "" {
				ops = append(ops, r.putGuard(spec.Group, "target joined"))
			}
			if modRev != 0 && old != "" {
				ops = append(ops, r.putGuard(old, "target left"))
			}
		}
		resp, err := r.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return 0, fmt.Errorf("etcd: %w", err)
		}
		if resp.Succeeded {
			return uint64(resp.Header.Revision), nil
		}
	}
	return 0, fmt.Errorf("etcd: target %q kept changing under this write", spec.Name)
}

// restate returns the comparison and the put that write a target's stored
// state again, not held; none when it has no state yet.
func (r *Registry) restate(ctx context.Context, name string) ([]clientv3.Cmp, []clientv3.Op, error) {
	resp, err := r.cli.Get(ctx, r.stateKey(name))
	if err != nil {
		return nil, nil, fmt.Errorf("etcd: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil, nil
	}
	var sr stateRecord
	if err := json.Unmarshal(resp.Kvs[0].Value, &sr); err != nil {
		return nil, nil, fmt.Errorf("state of %q in etcd: %w", name, err)
	}
	sr.Held = false
	v, err := json.Marshal(sr)
	if err != nil {
		return nil, nil, err
	}
	return []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(r.stateKey(name)), "=", resp.Kvs[0].ModRevision)},
		[]clientv3.Op{clientv3.OpPut(r.stateKey(name), string(v))}, nil
}

// DeleteTarget implements checker.Shared: the spec, the state and the
// group's guard go in one transaction.
func (r *Registry) DeleteTarget(ctx context.Context, name string) (uint64, bool, error) {
	key := r.specKey(name)
	for range maxSpecRetries {
		group, modRev, err := r.specGroup(ctx, name)
		if err != nil {
			return 0, false, err
		}
		if modRev == 0 {
			return 0, false, nil // nothing changed: nothing to wait for
		}
		mark, err := r.removalMark(ctx, name)
		if err != nil {
			return 0, false, err
		}
		ops := []clientv3.Op{mark, clientv3.OpDelete(key), clientv3.OpDelete(r.stateKey(name)), clientv3.OpDelete(r.outcomeKey(name)),
			clientv3.OpDelete(r.verdictKey(name, ""), clientv3.WithPrefix())}
		if group != "" {
			ops = append(ops, r.putGuard(group, "target left"), clientv3.OpDelete(r.sampleKey(group, name)))
		}
		resp, err := r.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", modRev)).Then(ops...).Commit()
		if err != nil {
			return 0, false, fmt.Errorf("etcd: %w", err)
		}
		if resp.Succeeded {
			return uint64(resp.Header.Revision), true, nil
		}
	}
	return 0, false, fmt.Errorf("etcd: target %q kept changing under this removal", name)
}

// removalRecord marks a target's removal with its writer's time.
type removalRecord struct {
	V    int       `json:"v"`
	Time time.Time `json:"time"`
}

func (r *Registry) removedKey(name string) string { return r.prefix + "removed/" + name }

// removalMarkTTL is how long a removal's mark stays in etcd: long enough
// for every replica's watch to see it with the removal, short enough that
// marks of names never added again do not pile up.
const removalMarkTTL = 2 * time.Minute

// removalMark is the put, in a removal's transaction, of the mark that
// gives every replica the removal's time. The marks share a lease,
// granted again once half its time has passed, so they go by themselves.
func (r *Registry) removalMark(ctx context.Context, name string) (clientv3.Op, error) {
	r.rmMu.Lock()
	defer r.rmMu.Unlock()
	if r.rmLease == 0 || time.Since(r.rmLeaseAt) > removalMarkTTL/2 {
		l, err := r.cli.Grant(ctx, int64(removalMarkTTL/time.Second))
		if err != nil {
			return clientv3.Op{}, fmt.Errorf("etcd: %w", err)
		}
		r.rmLease, r.rmLeaseAt = l.ID, time.Now()
	}
	v, _ := json.Marshal(removalRecord{V: 1, Time: time.Now().UTC()})
	return clientv3.OpPut(r.removedKey(name), string(v), clientv3.WithLease(r.rmLease)), nil
}
