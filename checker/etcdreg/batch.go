package etcdreg

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pulsehealth/pulse/checker"
)

// maxTxnOps is etcd's default bound (--max-txn-ops) on the comparisons,
// and on the operations, of one transaction.
const maxTxnOps = 128

// readBatch is how many specs PutSpecs reads in one transaction of gets:
// as many as one transaction can write when no guard changes (a mode
// change of a group of up to 128 targets is one revision).
const readBatch = maxTxnOps

// PutSpecs implements checker.SharedSpecBatch, a part of checker.Shared:
// it stores specs in order, many in each transaction, each as PutSpec
// would (a target that joins or leaves a group rewrites the group's guard,
// one that moves also its state). It returns the revision of the last transaction and how many
// specs, from the first, are stored: on an error, the specs before stored
// are stored and the others not.
func (r *Registry) PutSpecs(ctx context.Context, specs []checker.Spec) (rev uint64, stored int, err error) {
	for stored < len(specs) {
		chunk := specs[stored:min(stored+readBatch, len(specs))]
		var n int
		for try := 0; ; try++ {
			var ok bool
			rev, n, ok, err = r.putSpecChunk(ctx, chunk, rev)
			stored += n
			chunk = chunk[n:]
			if err != nil {
				return rev, stored, err
			}
			if ok && len(chunk) == 0 {
				break
			}
			if !ok && try == maxSpecRetries {
				return rev, stored, fmt.Errorf("etcd: target %q kept changing under this write", chunk[0].Name)
			}
		}
	}
	return rev, stored, nil
}

// putSpecChunk reads the stored specs of chunk in one transaction, then
// writes chunk in as few transactions as etcd's bounds allow. It returns
// how many it stored, and ok false when a spec changed between the read
// and the write (the caller reads again from there).
func (r *Registry) putSpecChunk(ctx context.Context, chunk []checker.Spec, rev uint64) (uint64, int, bool, error) {
	gets := make([]clientv3.Op, len(chunk))
	for i, s := range chunk {
		gets[i] = clientv3.OpGet(r.specKey(s.Name))
	}
	resp, err := r.cli.Txn(ctx).Then(gets...).Commit()
	if err != nil {
		return rev, 0, false, fmt.Errorf("etcd: %w", err)
	}
	type write struct {
		cmps []clientv3.Cmp
		ops  []clientv3.Op
		join []string // the groups whose guards it rewrites
	}
	writes := make([]write, len(chunk))
	now := time.Now().UTC()
	for i, s := range chunk {
		v, err := json.Marshal(specRecord{V: 1, Spec: s, Time: now})
		if err != nil {
			return rev, 0, false, err
		}
		old, modRev := "", int64(0)
		if kvs := resp.Responses[i].GetResponseRange().GetKvs(); len(kvs) > 0 {
			var sr specRecord
			if err := json.Unmarshal(kvs[0].Value, &sr); err != nil {
				return rev, 0, false, fmt.Errorf("target %q in etcd: %w", s.Name, err)
			}
			old, modRev = sr.Spec.Group, kvs[0].ModRevision
		}
		key := r.specKey(s.Name)
		w := write{cmps: []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", modRev)}, ops: []clientv3.Op{clientv3.OpPut(key, string(v))}}
		if modRev != 0 && old != s.Group {
			c, o, err := r.restate(ctx, s.Name)
			if err != nil {
				return rev, 0, false, err
			}
			w.cmps, w.ops = append(w.cmps, c...), append(w.ops, o...)
		}
		if modRev == 0 || old != s.Group {
			if s.Group != "" {
				w.join = append(w.join, s.Group)
			}
			if modRev != 0 && old != "" {
				w.join = append(w.join, old)
			}
		}
		writes[i] = w
	}
	done := 0
	for done < len(writes) {
		var cmps []clientv3.Cmp
		var ops []clientv3.Op
		guards := map[string]bool{} // a key may be put once in a transaction
		end := done
		for end < len(writes) {
			w := writes[end]
			newGuards := 0
			for _, g := range w.join {
				if !guards[g] {
					newGuards++
				}
			}
			if end > done && (len(cmps)+len(w.cmps) > maxTxnOps || len(ops)+len(w.ops)+len(guards)+newGuards > maxTxnOps) {
				break
			}
			cmps, ops = append(cmps, w.cmps...), append(ops, w.ops...)
			for _, g := range w.join {
				guards[g] = true
			}
			end++
		}
		for g := range guards {
			ops = append(ops, r.putGuard(g, "targets joined or left"))
		}
		tr, err := r.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return rev, done, false, fmt.Errorf("etcd: %w", err)
		}
		if !tr.Succeeded {
			return rev, done, false, nil
		}
		rev = uint64(tr.Header.Revision)
		done = end
	}
	return rev, done, true, nil
}
