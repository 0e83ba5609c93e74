package etcdreg

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pulsehealth/pulse/checker"
)

// Following etcd: every replica watches the prefix and applies what
// changes, in revision order, to its checker (see Registry).

// Applier is what Run feeds: a *checker.Checker.
type Applier interface {
	ApplyShared(changes []checker.SharedChange, rev uint64)
	SetSharedErr(err error)
}

// Run watches the prefix from the revision Load read at and applies every
// change to c, and keeps the lease alive, until Close.
func (r *Registry) Run(c Applier) {
	r.wg.Go(func() { r.watchLoop(c) })
	r.wg.Go(func() { r.keepAliveLoop(c) })
}

func (r *Registry) watchLoop(c Applier) {
	r.mu.Lock()
	from := r.loadRev + 1
	r.mu.Unlock()
	for r.ctx.Err() == nil {
		next, err := r.watch(c, from)
		if r.ctx.Err() != nil {
			return
		}
		if errors.Is(err, rpctypes.ErrCompacted) {
			r.logger.Warn("etcd compacted past this replica's position; reading the registry again", "from", from)
			next, err = r.resync(c)
		}
		if err != nil {
			r.logger.Warn("etcd watch ended; watching again", "error", err)
			select {
			case <-time.After(500 * time.Millisecond):
			case <-r.ctx.Done():
				return
			}
		}
		if next > from {
			from = next
		}
	}
}

// watch applies changes from revision from on; it returns the revision to
// watch from next when the watch ends.
func (r *Registry) watch(c Applier, from int64) (int64, error) {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(r.ctx))
	defer cancel()
	wch := r.cli.Watch(ctx, r.prefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithProgressNotify())
	for resp := range wch {
		if err := resp.Err(); err != nil {
			return from, err
		}
		if resp.IsProgressNotify() {
			if rev := resp.Header.Revision; rev >= from {
				c.ApplyShared(nil, uint64(rev))
				from = rev + 1
			}
			continue
		}
		for _, evs := range r.byMembers(resp.Events) {
			changes, last := r.changes(evs)
			if last == 0 {
				continue
			}
			c.ApplyShared(changes, uint64(last))
			from = last + 1
		}
	}
	return from, r.ctx.Err()
}

// byMembers cuts a watch response's events before and after each revision
// that changes the members: the changes before it are applied with the
// members as they were, and those after it with the new ones, however
// etcd grouped the events into responses. So every replica assigns
// targets and vantages alike at every revision. (A revision's events stay
// together: they were one transaction.)
func (r *Registry) byMembers(evs []*clientv3.Event) [][]*clientv3.Event {
	var out [][]*clientv3.Event
	start := 0
	for i := 0; i < len(evs); {
		j, members := i, false
		for ; j < len(evs) && evs[j].Kv.ModRevision == evs[i].Kv.ModRevision; j++ {
			if kind, _, ok := r.split(string(evs[j].Kv.Key)); ok && kind == "members" {
				members = true
			}
		}
		if members {
			if i > start {
				out = append(out, evs[start:i])
			}
			out = append(out, evs[i:j])
			start = j
		}
		i = j
	}
	if start < len(evs) {
		out = append(out, evs[start:])
	}
	return out
}

// changes turns etcd events into the checker's changes. A target's removal
// deletes its spec and state at one revision: one change.
func (r *Registry) changes(evs []*clientv3.Event) ([]checker.SharedChange, int64) {
	// A removal's mark comes in its transaction: its time is the time of
	// the REMOVED event.
	removedAt := map[string]time.Time{}
	for _, ev := range evs {
		if kind, name, ok := r.split(string(ev.Kv.Key)); ok && kind == "removed" && ev.Type == clientv3.EventTypePut {
			var m removalRecord
			if json.Unmarshal(ev.Kv.Value, &m) == nil {
				removedAt[fmt.Sprintf("%d/%s", ev.Kv.ModRevision, name)] = m.Time
			}
		}
	}
	var out []checker.SharedChange
	var last int64
	membersChanged := false
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range evs {
		last = max(last, ev.Kv.ModRevision)
		kind, name, ok := r.split(string(ev.Kv.Key))
		if !ok {
			continue
		}
		rev := uint64(ev.Kv.ModRevision)
		put := ev.Type == clientv3.EventTypePut
		switch kind {
		case "guards", "policies":
			if ch, ok := r.groupChange(kind, name, ev); ok {
				out = append(out, ch)
			}
		case "targets":
			if !put {
				delete(r.known, name)
				at := removedAt[fmt.Sprintf("%d/%s", rev, name)]
				out = append(out, checker.SharedChange{Kind: checker.SharedSpecDeleted, Rev: rev, Name: name, Time: at})
				continue
			}
			var sr specRecord
			if err := json.Unmarshal(ev.Kv.Value, &sr); err != nil || sr.Spec.Name != name {
				r.logger.Error("ignoring a target in etcd that does not decode", "key", string(ev.Kv.Key), "error", err)
				continue
			}
			if _, ok := r.known[name]; !ok {
				r.known[name] = 0
			}
			out = append(out, checker.SharedChange{Kind: checker.SharedSpecPut, Rev: rev, Spec: sr.Spec, Time: sr.Time})
		case "states":
			if !put {
				continue
			}
			st, err := decodeState(ev.Kv.Value)
			if err != nil {
				r.logger.Error("ignoring a state in etcd that does not decode", "key", string(ev.Kv.Key), "error", err)
				continue
			}
			r.known[name] = ev.Kv.ModRevision
			out = append(out, checker.SharedChange{Kind: checker.SharedStatePut, Rev: rev, Name: name, State: st})
		case "verdicts":
			var v []byte
			kind := checker.SharedVerdictDeleted
			if put {
				v, kind = ev.Kv.Value, checker.SharedVerdictPut
			}
			target, vd, err := decodeVerdict(name, v, ev.Kv.ModRevision)
			if err != nil {
				r.logger.Error("ignoring a verdict in etcd that does not decode", "key", string(ev.Kv.Key), "error", err)
				continue
			}
			if put {
				r.verdicts[name] = true
			} else {
				delete(r.verdicts, name)
			}
			out = append(out, checker.SharedChange{Kind: kind, Rev: rev, Name: target, Verdict: vd})
		case "samples", "outliers":
			if !put {
				continue // gone with its target or group
			}
			ch, err := outlierChange(kind, name, ev.Kv.Value, rev)
			if err != nil {
				r.logger.Error("ignoring an outlier key in etcd that does not decode", "key", string(ev.Kv.Key), "error", err)
				continue
			}
			out = append(out, ch)
		case "vantages":
			if !put {
				continue
			}
			rec, err := decodeVantage(name, ev.Kv.Value)
			if err != nil {
				r.logger.Error("ignoring a vantage's record in etcd that does not decode", "key", string(ev.Kv.Key), "error", err)
				continue
			}
			out = append(out, checker.SharedChange{Kind: checker.SharedVantagePut, Rev: rev, Vantage: rec})
		case "members":
			if put {
				r.joinedRev = max(r.joinedRev, ev.Kv.ModRevision)
				if r.noteMemberLocked(name, ev.Kv.Value) {
					membersChanged = true
				}
			} else {
				delete(r.labels, name)
				delete(r.addrs, name)
			}
			i, found := slices.BinarySearch(r.members, name)
			switch {
			case put && !found:
				r.members = slices.Insert(r.members, i, name)
				membersChanged = true
			case !put && found:
				r.members = slices.Delete(r.members, i, i+1)
				membersChanged = true
				if name == r.id && r.createRev != 0 && r.createRev < ev.Kv.ModRevision {
					// Our lease expired (we were paused or cut off):
					// nothing we write is accepted until we register
					// again. (A deletion older than our key is of the key
					// an earlier lease held: we registered again already.)
					r.createRev = 0
				}
			}
		default:
			if ch, ok := r.policyChange(kind, name, ev); ok {
				out = append(out, ch)
			}
		}
	}
	// A guard's change comes after the other changes of its revision (it
	// is its transaction's last put; resync makes all of one revision).
	slices.SortStableFunc(out, func(a, b checker.SharedChange) int {
		return cmp.Or(cmp.Compare(a.Rev, b.Rev), cmp.Compare(guardLast(a), guardLast(b)))
	})
	if membersChanged {
		r.logger.Info("replicas changed", "members", strings.Join(r.members, ","))
		out = append(out, checker.SharedChange{Kind: checker.SharedMembersChanged, Rev: uint64(last)})
	}
	return out, last
}

// resync reads the whole registry again after etcd compacted the history
// this replica still needed, and applies the difference.
func (r *Registry) resync(c Applier) (int64, error) {
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	resp, err := r.cli.Get(ctx, r.prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	rev := resp.Header.Revision
	var evs []*clientv3.Event
	seen := map[string]bool{}
	memberVals := map[string][]byte{}
	var joined int64
	var overloads []*mvccpb.KeyValue
	var guards, verdicts []checker.SharedChange
	seenVerdicts := map[string]bool{}
	for _, kv := range resp.Kvs {
		kind, name, ok := r.split(string(kv.Key))
		if !ok {
			continue
		}
		orig := kv.ModRevision
		kv := &mvccpb.KeyValue{Key: kv.Key, Value: kv.Value, CreateRevision: kv.CreateRevision, ModRevision: rev, Version: kv.Version, Lease: kv.Lease}
		switch kind {
		case "targets":
			seen[name] = true
			evs = append(evs, &clientv3.Event{Type: clientv3.EventTypePut, Kv: kv})
		case "states":
			r.mu.Lock()
			stale := r.known[name] != orig
			r.mu.Unlock()
			if stale {
				evs = append(evs, &clientv3.Event{Type: clientv3.EventTypePut, Kv: kv})
			}
		case "vantages", "samples", "outliers":
			evs = append(evs, &clientv3.Event{Type: clientv3.EventTypePut, Kv: kv})
		case "verdicts":
			// A verdict keeps its own revision: the one its vantage's next
			// write compares.
			if target, vd, err := decodeVerdict(name, kv.Value, orig); err == nil {
				verdicts = append(verdicts, checker.SharedChange{Kind: checker.SharedVerdictPut, Rev: uint64(rev), Name: target, Verdict: vd})
				seenVerdicts[name] = true
			}
		case "members":
			joined = max(joined, orig)
			memberVals[name] = kv.Value
		case "overload":
			overloads = append(overloads, kv)
		case "policies":
			evs = append(evs, &clientv3.Event{Type: clientv3.EventTypePut, Kv: kv})
		case "guards":
			// The guard keeps its own revision: the one a group write
			// compares.
			if ch, ok := r.groupChange(kind, name, &clientv3.Event{Type: clientv3.EventTypePut, Kv: &mvccpb.KeyValue{Key: kv.Key, Value: kv.Value, ModRevision: orig}}); ok {
				ch.Rev = uint64(rev)
				guards = append(guards, ch)
			}
		}
	}
	evs = append(evs, r.resyncOverloads(overloads, rev)...)
	r.mu.Lock()
	var gone []string
	for name := range r.known {
		if !seen[name] {
			gone = append(gone, name)
			delete(r.known, name)
		}
	}
	// The verdicts removed meanwhile (a vantage's lease expired, a
	// vantage moved) are removed here too.
	for name := range r.verdicts {
		if !seenVerdicts[name] {
			if target, vd, err := decodeVerdict(name, nil, rev); err == nil {
				verdicts = append(verdicts, checker.SharedChange{Kind: checker.SharedVerdictDeleted, Rev: uint64(rev), Name: target, Verdict: vd})
			}
		}
	}
	r.verdicts = seenVerdicts
	// A member whose label changed meanwhile moves the vantages as one
	// that joined or left does.
	changed := r.setMembersLocked(memberVals)
	r.joinedRev = max(r.joinedRev, joined)
	r.mu.Unlock()
	changes, _ := r.changes(evs)
	for _, name := range gone {
		changes = append(changes, checker.SharedChange{Kind: checker.SharedSpecDeleted, Rev: uint64(rev), Name: name})
	}
	changes = append(changes, verdicts...)
	changes = append(changes, guards...) // after the states they guard
	if changed {
		changes = append(changes, checker.SharedChange{Kind: checker.SharedMembersChanged, Rev: uint64(rev)})
	}
	c.ApplyShared(changes, uint64(rev))
	return rev + 1, nil
}

func guardLast(ch checker.SharedChange) int {
	if ch.Kind == checker.SharedGroupChanged {
		return 1
	}
	return 0
}

// CurrentRevision implements checker.SharedProgress: etcd's revision,
// read linearizably (etcd's default), so every write acknowledged before
// the call is at or below it. It reads one key, the prefix itself, which
// no one writes: the answer's header carries the revision, and the read
// costs the same however many targets there are (counting the prefix's
// keys would visit each).
func (r *Registry) CurrentRevision(ctx context.Context) (uint64, error) {
	resp, err := r.cli.Get(ctx, r.prefix, clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("etcd: %w", err)
	}
	return uint64(resp.Header.Revision), nil
}

// RequestProgress implements checker.SharedProgress: it asks etcd for a
// progress notification on the watch's stream, which Run applies as the
// revision reached. The etcd client picks the stream by the context's
// metadata: the request's is made as the watch's is (WithRequireLeader on
// the registry's context), and ends with ctx.
func (r *Registry) RequestProgress(ctx context.Context) error {
	pctx, cancel := context.WithCancel(clientv3.WithRequireLeader(r.ctx))
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	if err := r.cli.RequestProgress(pctx); err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	return nil
}
