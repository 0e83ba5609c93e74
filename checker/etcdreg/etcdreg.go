// Package etcdreg keeps Pulse's registry on etcd, shared by several pulsed
// replicas: it implements checker.Shared.
//
// Keys, under a prefix (default "/pulse/"):
//
//	targets/<name>  a target's spec (JSON), written by AddTarget
//	states/<name>   its last state (JSON), written by the target's owner
//	members/<id>    a live replica, attached to that replica's lease
//	guards/<group>  a group's guard, and policies/<group> its panic
//	                threshold: see group.go
//	removed/<name>  when a target was removed (the time of its REMOVED
//	                event on every replica), on a short lease: see
//	                DeleteTarget
//
// and the pool policies' (policies.go): outcomes/<name>, overload/<id>.
//
// Each replica holds a lease and announces itself under members/. Targets
// are divided among the live members by rendezvous hashing, so a member
// joining or leaving moves only the targets it must. A state is written in
// a transaction that requires the writer's member key to be the one it
// created under its current lease and the state to be the one the writer
// last saw: a replica whose lease expired (paused, partitioned) cannot
// overwrite what the new owner wrote. Every replica watches the prefix and
// applies the changes, in etcd's revision order and with etcd's revisions,
// to its checker, so any replica answers any call the same way and a watch
// stream resumes on any replica.
package etcdreg

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/outlier"
)

// Options configures Open.
type Options struct {
	// Endpoints are etcd's client URLs. Required.
	Endpoints []string
	// Prefix is the key prefix of this fleet; if empty, "/pulse/".
	Prefix string
	// ID names this replica among the members; if empty, the host name,
	// the process ID and a random suffix.
	ID string
	// Vantage labels where this replica probes from (see vantages.go):
	// replicas that see the targets alike, say in one zone, share one. If
	// empty, its ID.
	Vantage string
	// API and Page are where clients reach this replica, as the others
	// name it to them: its gRPC address (host:port) and its status page's
	// URL. Empty: not said.
	API, Page string
	// LeaseTTL is how long a replica that stops renewing its lease keeps
	// its targets; if 0, 10s. At least 2s.
	LeaseTTL time.Duration
	// DialTimeout bounds connecting to etcd at Open; if 0, 5s.
	DialTimeout time.Duration
	// Logger receives the registry's own events; if nil, nothing is logged.
	Logger *slog.Logger
	// TLS, when set, connects to etcd over TLS (https:// endpoints) with
	// this configuration: its roots verify etcd, its certificate (if any)
	// identifies the replica to an etcd that asks for client certificates.
	TLS *tls.Config
}

var _ checker.Shared = (*Registry)(nil)

// Registry is a checker.Shared on etcd. Open connects and registers the
// replica; Run feeds the checker; Close leaves.
type Registry struct {
	cli    *clientv3.Client
	prefix string
	id     string
	label  string // this replica's vantage
	self   memberAddrs
	ttl    time.Duration
	logger *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	members   []string               // live replicas' IDs, sorted
	labels    map[string]string      // their vantage labels, where not their IDs
	addrs     map[string]memberAddrs // their addresses, where they give them
	lease     clientv3.LeaseID
	createRev int64            // create revision of this replica's member key; 0 while it has none
	loadRev   int64            // the revision Load read at
	joinedRev int64            // the newest member key put this replica has applied
	known     map[string]int64 // every target's state revision (0: none yet), for resync
	verdicts  map[string]bool  // every stored verdict, "<target>/<member>", for resync

	overload        *checker.ReplicaOverload       // this replica's, as last published; see policies.go
	loadedOverloads []checker.ReplicaOverload      // the degraded replicas Load read
	degraded        map[string]bool                // the replicas whose overload key says degraded, as applied
	groups          map[string]checker.SharedGroup // the guards and policies Load read
	loadedVantages  []checker.VantageRecord        // the judges' records Load read
	loadedRecords   []outlier.Record               // the outlier records Load read
	loadedSamples   []outlier.Sample               // the outlier samples Load read

	rmMu      sync.Mutex       // protects rmLease and rmLeaseAt
	rmLease   clientv3.LeaseID // the lease of the removal marks; see removalLease
	rmLeaseAt time.Time        // when rmLease was granted
}

type specRecord struct {
	V    int          `json:"v"`
	Spec checker.Spec `json:"spec"`
	// Time is when its writer stored it: the time of the events it leads
	// to on every replica. Zero in a record written before it was kept.
	Time time.Time `json:"time,omitzero"`
}

type stateRecord struct {
	V       int            `json:"v"`
	State   checker.State  `json:"state"`
	From    checker.State  `json:"from"`
	Time    time.Time      `json:"time"`
	Result  checker.Result `json:"result"`
	Reason  string         `json:"reason,omitempty"`
	Writer  string         `json:"writer"`
	Applies uint64         `json:"applies_to"` // the state revision it replaced
	Held    bool           `json:"held,omitempty"`
	// Flap is the owner's flap log (checker.FlapRecord).
	Flap *checker.FlapRecord `json:"flap,omitempty"`
}

// stateRecordOf is the record of a proposed state, written by writer.
func stateRecordOf(p checker.StateProposal, writer string) stateRecord {
	return stateRecord{
		V: 1, State: p.State.State, From: p.State.From, Time: p.State.Time,
		Result: p.State.Result, Reason: p.State.Reason, Writer: writer, Applies: p.StateRev,
		Held: p.State.Held, Flap: p.State.Flap,
	}
}

type memberRecord struct {
	ID      string    `json:"id"`
	Started time.Time `json:"started"`
	Vantage string    `json:"vantage,omitempty"`
	API     string    `json:"api,omitempty"`
	Page    string    `json:"page,omitempty"`
}

// memberAddrs are where a member says its clients reach it.
type memberAddrs struct{ api, page string }

// Open connects to etcd, takes a lease and announces the replica.
func Open(ctx context.Context, o Options) (*Registry, error) {
	if len(o.Endpoints) == 0 {
		return nil, errors.New("no etcd endpoints")
	}
	if o.Prefix == "" {
		o.Prefix = "/pulse/"
	}
	if !strings.HasSuffix(o.Prefix, "/") {
		o.Prefix += "/"
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = 10 * time.Second
	}
	if o.LeaseTTL < 2*time.Second {
		return nil, fmt.Errorf("lease TTL must be at least 2s, got %v", o.LeaseTTL)
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.ID == "" {
		o.ID = defaultID()
	}
	if strings.ContainsAny(o.ID, "/\x00") || len(o.ID) > 128 {
		return nil, fmt.Errorf("replica ID %q: at most 128 bytes, no '/'", o.ID)
	}
	if o.Vantage == "" {
		o.Vantage = o.ID
	} else if err := ValidateLabel(o.Vantage); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   o.Endpoints,
		DialTimeout: o.DialTimeout,
		TLS:         o.TLS,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("connect to etcd at %s: %w", strings.Join(o.Endpoints, ","), err)
	}
	r := &Registry{cli: cli, prefix: o.Prefix, id: o.ID, label: o.Vantage, self: memberAddrs{o.API, o.Page}, ttl: o.LeaseTTL, logger: o.Logger, known: make(map[string]int64), verdicts: make(map[string]bool), groups: make(map[string]checker.SharedGroup), labels: make(map[string]string), addrs: make(map[string]memberAddrs)}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	cctx, cancel := context.WithTimeout(ctx, o.DialTimeout)
	defer cancel()
	if err := r.register(cctx); err != nil {
		r.cancel()
		cli.Close()
		return nil, fmt.Errorf("register with etcd at %s: %w", strings.Join(o.Endpoints, ","), err)
	}
	return r, nil
}

func defaultID() string {
	host, _ := os.Hostname()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-%d-%s", cmp.Or(host, "pulsed"), os.Getpid(), hex.EncodeToString(b))
}

// ID returns the replica's member ID.
func (r *Registry) ID() string { return r.id }

func (r *Registry) memberKey(id string) string { return r.prefix + "members/" + id }
func (r *Registry) specKey(name string) string { return r.prefix + "targets/" + name }
func (r *Registry) stateKey(name string) string {
	return r.prefix + "states/" + name
}

// register takes a new lease and puts this replica's member key on it.
func (r *Registry) register(ctx context.Context) error {
	lease, err := r.cli.Grant(ctx, int64(r.ttl/time.Second))
	if err != nil {
		return err
	}
	v, _ := json.Marshal(memberRecord{ID: r.id, Started: time.Now().UTC(), Vantage: r.label, API: r.self.api, Page: r.self.page})
	key := r.memberKey(r.id)
	// A member key of the same ID left by an earlier run of this replica
	// is replaced: its lease is not ours.
	resp, err := r.cli.Txn(ctx).Then(clientv3.OpPut(key, string(v), clientv3.WithLease(lease.ID)), clientv3.OpGet(key)).Commit()
	if err != nil {
		_, _ = r.cli.Revoke(context.WithoutCancel(ctx), lease.ID)
		return err
	}
	kvs := resp.Responses[1].GetResponseRange().Kvs
	if len(kvs) != 1 {
		return errors.New("member key vanished right after it was written")
	}
	r.mu.Lock()
	r.lease, r.createRev = lease.ID, kvs[0].CreateRevision
	r.mu.Unlock()
	return nil
}

// Load implements checker.Shared: one consistent read of the prefix.
func (r *Registry) Load() ([]checker.SharedTarget, uint64, error) {
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	resp, err := r.cli.Get(ctx, r.prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, err
	}
	specs := map[string]checker.SharedTarget{}
	states := map[string]*mvccpb.KeyValue{}
	verdicts := map[string][]checker.VantageVerdict{}
	var vantages []checker.VantageRecord
	var records []outlier.Record
	var samples []outlier.Sample
	memberVals := map[string][]byte{}
	var joined int64
	r.mu.Lock()
	clear(r.groups)
	r.mu.Unlock()
	for _, kv := range resp.Kvs {
		kind, name, ok := r.split(string(kv.Key))
		if !ok {
			continue
		}
		switch kind {
		case "guards", "policies":
			r.mu.Lock()
			err := r.loadGroupKey(kind, name, kv.ModRevision, kv.Value)
			r.mu.Unlock()
			if err != nil {
				return nil, 0, err
			}
		case "targets":
			var sr specRecord
			if err := json.Unmarshal(kv.Value, &sr); err != nil {
				return nil, 0, fmt.Errorf("target %q in etcd: %w", name, err)
			}
			specs[name] = checker.SharedTarget{Spec: sr.Spec}
			r.known[name] = 0
		case "states":
			states[name] = kv
		case "members":
			joined = max(joined, kv.ModRevision)
			memberVals[name] = kv.Value
		case "verdicts":
			target, vd, err := decodeVerdict(name, kv.Value, kv.ModRevision)
			if err != nil {
				return nil, 0, fmt.Errorf("verdict %q in etcd: %w", name, err)
			}
			verdicts[target] = append(verdicts[target], vd)
			r.mu.Lock()
			r.verdicts[name] = true
			r.mu.Unlock()
		case "vantages":
			rec, err := decodeVantage(name, kv.Value)
			if err != nil {
				return nil, 0, fmt.Errorf("vantage %q in etcd: %w", name, err)
			}
			vantages = append(vantages, rec)
		case "samples", "outliers":
			ch, err := outlierChange(kind, name, kv.Value, uint64(kv.ModRevision))
			if err != nil {
				return nil, 0, fmt.Errorf("%s %q in etcd: %w", kind, name, err)
			}
			records, samples = append(records, ch.Outliers), append(samples, ch.Samples...)
		default:
			r.loadPolicy(kind, name, kv.Value)
		}
	}
	var out []checker.SharedTarget
	for name, st := range specs {
		if kv := states[name]; kv != nil {
			s, err := decodeState(kv.Value)
			if err != nil {
				return nil, 0, fmt.Errorf("state of %q in etcd: %w", name, err)
			}
			st.State, st.StateRev = &s, uint64(kv.ModRevision)
			r.known[name] = kv.ModRevision
		}
		st.Verdicts = verdicts[name]
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b checker.SharedTarget) int { return cmp.Compare(a.Spec.Name, b.Spec.Name) })
	r.mu.Lock()
	r.setMembersLocked(memberVals)
	r.loadedVantages = vantages
	r.loadedRecords = slices.DeleteFunc(records, func(rec outlier.Record) bool { return rec.Group == "" })
	r.loadedSamples = samples
	r.joinedRev = joined
	r.loadRev = resp.Header.Revision
	r.mu.Unlock()
	return out, uint64(resp.Header.Revision), nil
}

// split parses a key under the prefix into its kind and name.
func (r *Registry) split(key string) (kind, name string, ok bool) {
	rest, ok := strings.CutPrefix(key, r.prefix)
	if !ok {
		return "", "", false
	}
	kind, name, ok = strings.Cut(rest, "/")
	return kind, name, ok && name != ""
}

func decodeState(v []byte) (checker.SharedState, error) {
	var sr stateRecord
	if err := json.Unmarshal(v, &sr); err != nil {
		return checker.SharedState{}, err
	}
	return checker.SharedState{State: sr.State, From: sr.From, Time: sr.Time, Result: sr.Result, Reason: sr.Reason, Writer: sr.Writer, Held: sr.Held, Flap: sr.Flap}, nil
}

// ProposeState implements checker.Shared: the write is fenced by this
// replica's member key (so by its lease) and by the state revision the
// replica last saw.
func (r *Registry) ProposeState(ctx context.Context, p checker.StateProposal) error {
	r.mu.Lock()
	createRev, joined := r.createRev, r.joinedRev
	r.mu.Unlock()
	if createRev == 0 {
		return fmt.Errorf("%w: this replica has lost its lease and not yet taken a new one", checker.ErrFenced)
	}
	v, err := json.Marshal(stateRecordOf(p, r.id))
	if err != nil {
		return err
	}
	resp, err := r.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(r.memberKey(r.id)), "=", createRev),
		// No replica joined (or came back) since this one's view of the
		// members: ownership is still what this replica thinks. One that
		// left only gave it more.
		clientv3.Compare(clientv3.ModRevision(r.prefix+"members/"), "<", joined+1).WithPrefix(),
		clientv3.Compare(clientv3.ModRevision(r.stateKey(p.Name)), "=", int64(p.StateRev)),
		clientv3.Compare(clientv3.Version(r.specKey(p.Name)), ">", 0),
	).Then(clientv3.OpPut(r.stateKey(p.Name), string(v))).Commit()
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: %s's lease, its view of the members, the state at revision %d or the target itself is out of date", checker.ErrFenced, r.id, p.StateRev)
	}
	return nil
}

// Owns implements checker.Shared: rendezvous hashing over the live members.
func (r *Registry) Owns(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return owner(r.members, name) == r.id
}

// Owner returns the live member that probes the named target, or "".
func (r *Registry) Owner(name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return owner(r.members, name)
}

// Members returns the live replicas' IDs, sorted.
func (r *Registry) Members() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.members)
}

// Addresses returns where clients reach the live member id, as it says:
// its gRPC address and its status page's URL; empty for what it does not
// say, and for a member that is not live.
func (r *Registry) Addresses(id string) (api, page string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, live := slices.BinarySearch(r.members, id); !live {
		return "", ""
	}
	a := r.addrs[id]
	return a.api, a.page
}

// setMembersLocked makes the live members those whose member keys' values
// vals holds (by member ID), read whole from etcd, with the labels and
// addresses the values give: a member that left keeps neither. It reports
// whether the members or their labels changed.
func (r *Registry) setMembersLocked(vals map[string][]byte) (changed bool) {
	members := slices.Sorted(maps.Keys(vals))
	labels := r.labels
	changed = !slices.Equal(members, r.members)
	r.members = members
	r.labels, r.addrs = map[string]string{}, map[string]memberAddrs{}
	for name, v := range vals {
		r.noteMemberLocked(name, v)
	}
	return changed || !maps.Equal(labels, r.labels)
}

// noteMemberLocked keeps a live member's label and addresses as its key's
// value gives them, and reports whether its label changed. A member key is
// put again without a delete in between (a replica restarting with the
// same ID within its lease), so a value with no label, or its ID as label,
// drops the label an earlier value gave.
func (r *Registry) noteMemberLocked(name string, v []byte) (relabeled bool) {
	var m memberRecord
	if json.Unmarshal(v, &m) != nil {
		return false
	}
	if m.Vantage != "" && m.Vantage != name {
		relabeled = r.labels[name] != m.Vantage
		r.labels[name] = m.Vantage
	} else if _, had := r.labels[name]; had {
		delete(r.labels, name)
		relabeled = true
	}
	r.addrs[name] = memberAddrs{m.API, m.Page}
	return relabeled
}

// owner picks, for name, the member with the highest hash of (member,
// name): when a member leaves, only its own targets move.
func owner(members []string, name string) string {
	var best string
	var bestH uint64
	for _, m := range members {
		h := fnv.New64a()
		h.Write([]byte(m))
		h.Write([]byte{0})
		h.Write([]byte(name))
		if v := mix(h.Sum64()); best == "" || v > bestH {
			best, bestH = m, v
		}
	}
	return best
}

// mix spreads FNV's output (splitmix64's finaliser), so that owners are
// balanced even for names that differ in their last byte only.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// keepAliveLoop renews the lease; while etcd cannot be reached the checker
// is flagged degraded, and a lease found expired is replaced by a new one.
func (r *Registry) keepAliveLoop(c Applier) {
	tick := time.NewTicker(r.ttl / 3)
	defer tick.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-tick.C:
		}
		r.mu.Lock()
		lease := r.lease
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(r.ctx, r.ttl/3)
		_, err := r.cli.KeepAliveOnce(ctx, lease)
		cancel()
		switch {
		case r.ctx.Err() != nil:
			return
		case err == nil:
			c.SetSharedErr(nil)
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			r.logger.Warn("this replica's etcd lease expired; its targets went to the others; registering again")
			r.mu.Lock()
			r.createRev = 0
			r.mu.Unlock()
			ctx, cancel := context.WithTimeout(r.ctx, r.ttl)
			err := r.register(ctx)
			cancel()
			if err != nil {
				c.SetSharedErr(fmt.Errorf("etcd: register again: %w", err))
				continue
			}
			r.republishOverload()
			c.SetSharedErr(nil)
		default:
			r.logger.Warn("cannot renew the etcd lease; serving the last view", "error", err)
			c.SetSharedErr(fmt.Errorf("etcd unreachable: %w", err))
		}
	}
}

// Close stops watching, gives up the lease (the other replicas take this
// one's targets at once) and closes the connection.
func (r *Registry) Close() error {
	r.cancel()
	r.wg.Wait()
	r.mu.Lock()
	lease := r.lease
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = r.cli.Revoke(ctx, lease)
	return r.cli.Close()
}

// Abandon stops the registry like a crash would: the lease is neither
// renewed nor revoked, so the other replicas take this one's targets only
// once it expires. Tests use it to stand for a killed process.
func (r *Registry) Abandon() {
	r.cancel()
	r.wg.Wait()
	_ = r.cli.Close()
}
