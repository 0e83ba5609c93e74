package etcdreg

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pulsehealth/pulse/checker"
)

// Vantages (checker.SharedVantages). Each member announces its vantage
// label in its member key (by default its ID). A target with
// Spec.Vantages k is probed by k members: the members ranked by the same
// rendezvous hash as its owner, taking one member per label while labels
// last, then the rest in rank order; the first is its owner. A member
// leaving moves only the vantages it held, and one joining takes only
// those it ranks into. Each stores its verdict under
//
//	verdicts/<target>/<member>  a vantage's verdict (JSON), on its lease
//
// so the verdicts of a member that is gone go with it; and its judge (the
// live member other than it ranked first for it) stores its judgement
// (checker.VantageRecord) under
//
//	vantages/<member>  suspect, or recovered, with the numbers

// MaxLabelLen bounds a vantage label.
const MaxLabelLen = 64

// ValidateLabel checks a vantage label: 1 to MaxLabelLen characters from
// [A-Za-z0-9._:-].
func ValidateLabel(l string) error {
	if l == "" || len(l) > MaxLabelLen {
		return fmt.Errorf("vantage label %q: must be 1 to %d characters", l, MaxLabelLen)
	}
	for _, c := range l {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._:-", c)) {
			return fmt.Errorf("vantage label %q: only letters, digits and ._:- are allowed", l)
		}
	}
	return nil
}

type verdictRecord struct {
	V     int           `json:"v"`
	Label string        `json:"label"`
	State checker.State `json:"state"`
	Error string        `json:"error,omitempty"`
	Time  time.Time     `json:"time"`
}

func (r *Registry) verdictKey(target, member string) string {
	return r.prefix + "verdicts/" + target + "/" + member
}

// decodeVerdict decodes the verdict stored under verdicts/<name>, name
// being "<target>/<member>".
func decodeVerdict(name string, v []byte, rev int64) (target string, vd checker.VantageVerdict, err error) {
	target, member, ok := strings.Cut(name, "/")
	if !ok || member == "" {
		return "", vd, fmt.Errorf("verdict key %q is not <target>/<member>", name)
	}
	vd = checker.VantageVerdict{Member: member, Rev: uint64(rev)}
	if v == nil {
		return target, vd, nil
	}
	var rec verdictRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return "", vd, err
	}
	vd.Label, vd.State, vd.Error, vd.Time = rec.Label, rec.State, rec.Error, rec.Time
	return target, vd, nil
}

// Self implements checker.SharedVantages.
func (r *Registry) Self() checker.Vantage { return checker.Vantage{Member: r.id, Label: r.label} }

// Vantages implements checker.SharedVantages.
func (r *Registry) Vantages(name string, k int) []checker.Vantage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return vantagesOf(r.members, r.labels, name, k)
}

// vantagesOf picks name's k vantages among members (see the top of the
// file); labels maps a member to its label, itself when absent.
func vantagesOf(members []string, labels map[string]string, name string, k int) []checker.Vantage {
	type ranked struct {
		m string
		h uint64
	}
	rs := make([]ranked, len(members))
	for i, m := range members {
		h := fnv.New64a()
		h.Write([]byte(m))
		h.Write([]byte{0})
		h.Write([]byte(name))
		rs[i] = ranked{m, mix(h.Sum64())}
	}
	slices.SortFunc(rs, func(a, b ranked) int { return cmp.Or(cmp.Compare(b.h, a.h), cmp.Compare(a.m, b.m)) })
	label := func(m string) string { return cmp.Or(labels[m], m) }
	out := make([]checker.Vantage, 0, min(k, len(rs)))
	taken := make([]bool, len(rs))
	seen := map[string]bool{}
	for i, x := range rs {
		if len(out) == k {
			break
		}
		if l := label(x.m); !seen[l] {
			seen[l], taken[i] = true, true
			out = append(out, checker.Vantage{Member: x.m, Label: l})
		}
	}
	for i, x := range rs {
		if len(out) == k {
			break
		}
		if !taken[i] {
			out = append(out, checker.Vantage{Member: x.m, Label: label(x.m)})
		}
	}
	// The owner first: the highest ranked, as owner() says.
	return out
}

// ProposeVerdict implements checker.SharedVantages: fenced as ProposeState
// is, by this replica's member key and its view of the members, and by the
// revision of its stored verdict; put on its lease.
func (r *Registry) ProposeVerdict(ctx context.Context, p checker.VerdictProposal) error {
	r.mu.Lock()
	createRev, joined, lease := r.createRev, r.joinedRev, r.lease
	r.mu.Unlock()
	key := r.verdictKey(p.Target, r.id)
	if p.Delete {
		_, err := r.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", int64(p.PrevRev))).Then(clientv3.OpDelete(key)).Commit()
		if err != nil {
			return fmt.Errorf("etcd: %w", err)
		}
		return nil
	}
	if createRev == 0 {
		return fmt.Errorf("%w: this replica has lost its lease and not yet taken a new one", checker.ErrFenced)
	}
	v, err := json.Marshal(verdictRecord{V: 1, Label: r.label, State: p.Verdict.State, Error: p.Verdict.Error, Time: p.Verdict.Time})
	if err != nil {
		return err
	}
	resp, err := r.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(r.memberKey(r.id)), "=", createRev),
		clientv3.Compare(clientv3.ModRevision(r.prefix+"members/"), "<", joined+1).WithPrefix(),
		clientv3.Compare(clientv3.ModRevision(key), "=", int64(p.PrevRev)),
		clientv3.Compare(clientv3.Version(r.specKey(p.Target)), ">", 0),
	).Then(clientv3.OpPut(key, string(v), clientv3.WithLease(lease))).Commit()
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: %s's lease, its view of the members, its verdict at revision %d or the target itself is out of date", checker.ErrFenced, r.id, p.PrevRev)
	}
	return nil
}

type vantageRecord struct {
	V        int       `json:"v"`
	Label    string    `json:"label"`
	Suspect  bool      `json:"suspect"`
	Disagree int       `json:"disagree"`
	Judged   int       `json:"judged"`
	Time     time.Time `json:"time"`
}

func (r *Registry) vantageKey(member string) string { return r.prefix + "vantages/" + member }

func decodeVantage(member string, v []byte) (checker.VantageRecord, error) {
	var rec vantageRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return checker.VantageRecord{}, err
	}
	return checker.VantageRecord{Member: member, Label: rec.Label, Suspect: rec.Suspect, Disagree: rec.Disagree, Judged: rec.Judged, Time: rec.Time}, nil
}

// Judges implements checker.SharedVantages: of the live members other
// than member, the one ranked first for it judges it.
func (r *Registry) Judges(member string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	others := make([]string, 0, len(r.members))
	for _, m := range r.members {
		if m != member {
			others = append(others, m)
		}
	}
	return owner(others, "vantage/"+member) == r.id
}

// PutVantage implements checker.SharedVantages, while this replica holds
// its lease.
func (r *Registry) PutVantage(ctx context.Context, rec checker.VantageRecord) error {
	r.mu.Lock()
	createRev := r.createRev
	r.mu.Unlock()
	if createRev == 0 {
		return fmt.Errorf("%w: this replica has lost its lease and not yet taken a new one", checker.ErrFenced)
	}
	v, err := json.Marshal(vantageRecord{V: 1, Label: rec.Label, Suspect: rec.Suspect, Disagree: rec.Disagree, Judged: rec.Judged, Time: rec.Time})
	if err != nil {
		return err
	}
	resp, err := r.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(r.memberKey(r.id)), "=", createRev),
	).Then(clientv3.OpPut(r.vantageKey(rec.Member), string(v))).Commit()
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: %s's lease is out of date", checker.ErrFenced, r.id)
	}
	return nil
}

// LoadedVantages implements checker.SharedVantages.
func (r *Registry) LoadedVantages() []checker.VantageRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.loadedVantages)
}
