package etcdreg

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pulsehealth/pulse/checker"
)

// The pool policies' keys, beside the registry's (etcdreg.go):
//
//	outcomes/<name>  a target's latest passive outcome and its rate-limit
//	                 bucket after it (checker.SharedOutcomes): every put is
//	                 an outcome the owner applies
//	overload/<id>    a replica's overload state (checker.SharedOverloads),
//	                 on that replica's lease: it goes when the replica does
//
// Flap damping needs no key of its own: the owner's flap log is stored
// with the state (stateRecord.Flap).

type outcomeRecord struct {
	V       int                   `json:"v"`
	Outcome checker.SharedOutcome `json:"outcome"`
}

func (r *Registry) outcomeKey(name string) string { return r.prefix + "outcomes/" + name }
func (r *Registry) overloadKey(id string) string  { return r.prefix + "overload/" + id }

// PutOutcome implements checker.SharedOutcomes: the outcome is stored only
// over the one stored at prevRev (0: none), and only while the target
// exists; otherwise the one stored is returned.
func (r *Registry) PutOutcome(ctx context.Context, name string, o checker.SharedOutcome, prevRev uint64) (uint64, *checker.SharedOutcome, error) {
	o.Replica = r.id
	v, err := json.Marshal(outcomeRecord{V: 1, Outcome: o})
	if err != nil {
		return 0, nil, err
	}
	key := r.outcomeKey(name)
	resp, err := r.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(key), "=", int64(prevRev)),
		clientv3.Compare(clientv3.Version(r.specKey(name)), ">", 0),
	).Then(clientv3.OpPut(key, string(v))).Else(clientv3.OpGet(key), clientv3.OpGet(r.specKey(name), clientv3.WithCountOnly())).Commit()
	if err != nil {
		return 0, nil, fmt.Errorf("etcd: %w", err)
	}
	if resp.Succeeded {
		return uint64(resp.Header.Revision), nil, nil
	}
	if resp.Responses[1].GetResponseRange().Count == 0 {
		return 0, nil, fmt.Errorf("%w %q", checker.ErrUnknownTarget, name)
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		// Deleted with its target, which is back: start afresh.
		return r.PutOutcome(ctx, name, o, 0)
	}
	var or outcomeRecord
	if err := json.Unmarshal(kvs[0].Value, &or); err != nil {
		return 0, nil, fmt.Errorf("outcome of %q in etcd: %w", name, err)
	}
	return uint64(kvs[0].ModRevision), &or.Outcome, nil
}

// PutOverload implements checker.SharedOverloads: the state is stored on
// this replica's lease, and stored again on a new lease should this one
// expire.
func (r *Registry) PutOverload(ctx context.Context, o checker.ReplicaOverload) error {
	o.Replica = r.id
	r.mu.Lock()
	r.overload = &o
	lease, createRev := r.lease, r.createRev
	r.mu.Unlock()
	if createRev == 0 {
		return fmt.Errorf("%w: this replica has lost its lease and not yet taken a new one", checker.ErrFenced)
	}
	return r.putOverload(ctx, o, lease)
}

func (r *Registry) putOverload(ctx context.Context, o checker.ReplicaOverload, lease clientv3.LeaseID) error {
	v, err := json.Marshal(o)
	if err != nil {
		return err
	}
	if _, err := r.cli.Put(ctx, r.overloadKey(r.id), string(v), clientv3.WithLease(lease)); err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	return nil
}

// republishOverload stores this replica's last overload state again on
// the lease it has just taken (its key went with the old one).
func (r *Registry) republishOverload() {
	r.mu.Lock()
	o, lease := r.overload, r.lease
	r.mu.Unlock()
	if o == nil || !o.Degraded {
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.ttl)
	defer cancel()
	if err := r.putOverload(ctx, *o, lease); err != nil {
		r.logger.Warn("publishing this replica's overload state again failed", "error", err)
	}
}

// Overloads implements checker.SharedOverloads: the degraded replicas Load
// read.
func (r *Registry) Overloads() []checker.ReplicaOverload {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.loadedOverloads)
}

// loadPolicy notes a policy key Load read (only overloads: outcomes
// already applied need nothing, and the next one's race brings the
// bucket). r.mu is not held.
func (r *Registry) loadPolicy(kind, name string, value []byte) {
	if kind != "overload" {
		return
	}
	var o checker.ReplicaOverload
	if err := json.Unmarshal(value, &o); err != nil || o.Replica != name {
		r.logger.Error("ignoring an overload state in etcd that does not decode", "replica", name, "error", err)
		return
	}
	r.mu.Lock()
	r.loadedOverloads = append(r.loadedOverloads, o)
	r.noteOverloadLocked(o)
	r.mu.Unlock()
}

// noteOverloadLocked keeps which replicas are degraded, for resync.
func (r *Registry) noteOverloadLocked(o checker.ReplicaOverload) {
	if r.degraded == nil {
		r.degraded = make(map[string]bool)
	}
	if o.Degraded {
		r.degraded[o.Replica] = true
	} else {
		delete(r.degraded, o.Replica)
	}
}

// resyncOverloads returns, for a resync at rev, the overload keys read
// (kvs, already at rev) as puts, and a deletion for each replica that was
// degraded and has no key any more.
func (r *Registry) resyncOverloads(kvs []*mvccpb.KeyValue, rev int64) []*clientv3.Event {
	seen := map[string]bool{}
	var evs []*clientv3.Event
	for _, kv := range kvs {
		_, name, _ := r.split(string(kv.Key))
		seen[name] = true
		evs = append(evs, &clientv3.Event{Type: clientv3.EventTypePut, Kv: kv})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := range r.degraded {
		if !seen[id] {
			evs = append(evs, &clientv3.Event{Type: clientv3.EventTypeDelete, Kv: &mvccpb.KeyValue{Key: []byte(r.overloadKey(id)), ModRevision: rev}})
		}
	}
	return evs
}

// policyChange turns an event on a policy key into the checker's change;
// ok is false for other keys and for what needs no change. r.mu is held.
func (r *Registry) policyChange(kind, name string, ev *clientv3.Event) (ch checker.SharedChange, ok bool) {
	rev := uint64(ev.Kv.ModRevision)
	put := ev.Type == clientv3.EventTypePut
	switch kind {
	case "outcomes":
		if !put {
			return ch, false // deleted with its target
		}
		var or outcomeRecord
		if err := json.Unmarshal(ev.Kv.Value, &or); err != nil {
			r.logger.Error("ignoring an outcome in etcd that does not decode", "key", string(ev.Kv.Key), "error", err)
			return ch, false
		}
		return checker.SharedChange{Kind: checker.SharedOutcomePut, Rev: rev, Name: name, Outcome: or.Outcome}, true
	case "overload":
		o := checker.ReplicaOverload{Replica: name, Since: time.Now().UTC(), Reason: "left the replicas"}
		if put {
			if err := json.Unmarshal(ev.Kv.Value, &o); err != nil || o.Replica != name {
				r.logger.Error("ignoring an overload state in etcd that does not decode", "key", string(ev.Kv.Key), "error", err)
				return ch, false
			}
		}
		r.noteOverloadLocked(o)
		return checker.SharedChange{Kind: checker.SharedOverloadPut, Rev: rev, Overload: o}, true
	case "announce":
		if !put {
			return ch, false
		}
		var a checker.Announcement
		if err := json.Unmarshal(ev.Kv.Value, &a); err != nil {
			r.logger.Error("ignoring an announced event in etcd that does not decode", "key", string(ev.Kv.Key), "error", err)
			return ch, false
		}
		return checker.SharedChange{Kind: checker.SharedAnnounced, Rev: rev, Announcement: a}, true
	}
	return ch, false
}

// announceKey is where the events announced about source go: one key a
// source, each announcement replacing the last (a watch sees them all).
func (r *Registry) announceKey(source string) string {
	if source == "" {
		source = "-"
	}
	return r.prefix + "announce/" + strings.ReplaceAll(source, "/", "_")
}

// PutAnnouncement implements checker.SharedAnnouncements: every replica
// streams the event when it applies the write.
func (r *Registry) PutAnnouncement(ctx context.Context, a checker.Announcement) (uint64, error) {
	v, err := json.Marshal(a)
	if err != nil {
		return 0, err
	}
	resp, err := r.cli.Put(ctx, r.announceKey(a.Policy.Source), string(v))
	if err != nil {
		return 0, fmt.Errorf("etcd: %w", err)
	}
	return uint64(resp.Header.Revision), nil
}
