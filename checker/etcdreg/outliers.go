package etcdreg

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/outlier"
)

// Outlier detection (checker.SharedOutliers), beside the registry's keys:
//
//	samples/<group>/<target>  a target's latest sample, by its owner
//	outliers/<group>          the group's record, by its judge: the live
//	                          member ranked first for "outlier/<group>"

func (r *Registry) sampleKey(group, target string) string {
	return r.prefix + "samples/" + group + "/" + target
}
func (r *Registry) outliersKey(group string) string { return r.prefix + "outliers/" + group }

// JudgesGroup implements checker.SharedOutliers.
func (r *Registry) JudgesGroup(group string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return owner(r.members, "outlier/"+group) == r.id
}

// samplesPerTxn bounds the puts of one transaction (etcd's default limit
// is 128 operations).
const samplesPerTxn = 100

// PutSamples implements checker.SharedOutliers: while this replica holds
// its lease, a hundred to a transaction.
func (r *Registry) PutSamples(ctx context.Context, group string, samples []outlier.Sample) error {
	r.mu.Lock()
	createRev := r.createRev
	r.mu.Unlock()
	if createRev == 0 {
		return fmt.Errorf("%w: this replica has lost its lease and not yet taken a new one", checker.ErrFenced)
	}
	for chunk := range slices.Chunk(samples, samplesPerTxn) {
		ops := make([]clientv3.Op, 0, len(chunk))
		for _, s := range chunk {
			v, err := json.Marshal(s)
			if err != nil {
				return err
			}
			ops = append(ops, clientv3.OpPut(r.sampleKey(group, s.Target), string(v)))
		}
		resp, err := r.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(r.memberKey(r.id)), "=", createRev)).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("etcd: %w", err)
		}
		if !resp.Succeeded {
			return fmt.Errorf("%w: %s's lease is out of date", checker.ErrFenced, r.id)
		}
	}
	return nil
}

// PutOutliers implements checker.SharedOutliers: fenced as a state is, by
// the judge's lease and its view of the members.
func (r *Registry) PutOutliers(ctx context.Context, rec outlier.Record) error {
	r.mu.Lock()
	createRev, joined := r.createRev, r.joinedRev
	r.mu.Unlock()
	if createRev == 0 {
		return fmt.Errorf("%w: this replica has lost its lease and not yet taken a new one", checker.ErrFenced)
	}
	v, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	resp, err := r.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(r.memberKey(r.id)), "=", createRev),
		clientv3.Compare(clientv3.ModRevision(r.prefix+"members/"), "<", joined+1).WithPrefix(),
	).Then(clientv3.OpPut(r.outliersKey(rec.Group), string(v))).Commit()
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: %s's lease or its view of the members is out of date", checker.ErrFenced, r.id)
	}
	return nil
}

// LoadedOutliers implements checker.SharedOutliers.
func (r *Registry) LoadedOutliers() ([]outlier.Record, []outlier.Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.loadedRecords), slices.Clone(r.loadedSamples)
}

// outlierChange turns a put under samples/ or outliers/ into its change.
func outlierChange(kind, name string, v []byte, rev uint64) (checker.SharedChange, error) {
	switch kind {
	case "samples":
		group, _, ok := strings.Cut(name, "/")
		if !ok {
			return checker.SharedChange{}, fmt.Errorf("sample key %q is not <group>/<target>", name)
		}
		var s outlier.Sample
		if err := json.Unmarshal(v, &s); err != nil {
			return checker.SharedChange{}, err
		}
		return checker.SharedChange{Kind: checker.SharedSamplesPut, Rev: rev, Name: group, Samples: []outlier.Sample{s}}, nil
	default:
		var rec outlier.Record
		if err := json.Unmarshal(v, &rec); err != nil {
			return checker.SharedChange{}, err
		}
		return checker.SharedChange{Kind: checker.SharedOutliersPut, Rev: rev, Name: rec.Group, Outliers: rec}, nil
	}
}
