package discovery

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/pulsehealth/pulse/server"
)

// ElectOptions configures NewElector.
type ElectOptions struct {
	// Client is the etcd client the elections use. Required; the Elector
	// does not close it.
	Client *clientv3.Client
	// Prefix is the fleet's key prefix (pulsed's -etcd-prefix); each
	// group's election is under Prefix + "discovery/" + group + "/". If
	// empty, "/pulse/".
	Prefix string
	// ID is this replica's name, the value a leader writes. Required.
	ID string
	// TTL is the election lease's time to live: a leader that stops
	// renewing it (killed, paused, cut off) leads until it expires, and
	// another replica takes the group over then. Whole seconds, at least
	// 1s; 0 means 10s.
	TTL time.Duration
	// Retry is how long a campaign waits before it tries again after
	// etcd refused or could not be reached; 0 means 1s.
	Retry time.Duration
	// Logger receives leadership changes; nil discards them.
	Logger *slog.Logger
	// Metrics, when not nil, receives pulse_discovery_leader.
	Metrics prometheus.Registerer
}

// Elector runs each discovery group of a configuration on exactly one of
// the replicas that share an etcd: per group, every replica campaigns in
// an etcd election (clientv3/concurrency, on a lease of TTL), and only the
// leader runs the group's sources in its Manager, which writes through
// the checker to the shared registry. The others run nothing for the
// group and know who leads it.
//
// When the leader dies, its lease expires after TTL and the next replica
// in the election starts the group's sources: their first answer
// re-syncs the group. Target names are deterministic and an Add of the
// same spec changes nothing, so no target is added twice; a drain the old
// leader began is stored in the target's mode and ends with its removal
// on whichever replica owns the target, whoever leads.
//
// Its methods are safe for concurrent use. The zero value is not usable:
// call NewElector, then Close.
type Elector struct {
	m      *Manager
	o      ElectOptions
	logger *slog.Logger
	leader *prometheus.GaugeVec

	// applyMu serializes the Manager's configuration changes, so that
	// the last set of led groups computed is the last applied. Held
	// across Manager.ApplyConfig, which does no I/O; never across a call
	// to etcd. Taken before mu.
	applyMu sync.Mutex

	mu      sync.Mutex // protects everything below
	cfg     *Config
	camps   map[string]*campaign // by group name
	leaders map[string]string    // the replica leading each group, as observed
	leading map[string]bool      // the groups this replica runs
	closed  bool

	// closing ends at Close: a removed group's retirement (retireIfLast)
	// stops waiting. retiring counts the retirements under way; added to
	// under mu while not closed, so that Close waits for every one.
	closing  context.Context
	stop     context.CancelFunc
	retiring sync.WaitGroup
}

// campaign is one group's election loop.
type campaign struct {
	group  *Group // the configuration it runs with when leading
	cancel context.CancelFunc
	done   chan struct{}
}

// NewElector returns an Elector that runs cfg's groups on m when this
// replica leads them, and starts campaigning for each. m should have been
// made with an empty configuration: the Elector gives it the groups this
// replica leads.
func NewElector(m *Manager, cfg *Config, o ElectOptions) (*Elector, error) {
	if o.Client == nil {
		return nil, fmt.Errorf("discovery elections: no etcd client")
	}
	if o.ID == "" {
		return nil, fmt.Errorf("discovery elections: no replica ID")
	}
	if o.Prefix == "" {
		o.Prefix = "/pulse/"
	}
	if o.TTL == 0 {
		o.TTL = 10 * time.Second
	}
	if o.TTL < time.Second {
		return nil, fmt.Errorf("discovery elections: TTL must be at least 1s, got %v", o.TTL)
	}
	if o.Retry <= 0 {
		o.Retry = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	closing, stop := context.WithCancel(context.Background())
	e := &Elector{
		m: m, o: o, logger: o.Logger, closing: closing, stop: stop,
		leader: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pulse_discovery_leader",
			Help: "1 when this replica leads the discovery group and runs its sources, 0 when another replica does (or none yet).",
		}, []string{"group"}),
		camps:   map[string]*campaign{},
		leaders: map[string]string{},
		leading: map[string]bool{},
	}
	if o.Metrics != nil {
		if err := o.Metrics.Register(e.leader); err != nil {
			return nil, fmt.Errorf("discovery metrics: %w", err)
		}
	}
	e.ApplyConfig(cfg)
	return e, nil
}

// ElectionKey returns the name of group's election under the fleet's
// prefix: each candidate's key is this, a '/' and its lease in hex, and
// the one created first leads.
func ElectionKey(prefix, group string) string { return prefix + "discovery/" + group }

// ApplyConfig makes cfg the configuration: a new group starts its
// campaign, a removed group stops its sources (when this replica led it)
// and resigns, and a changed group this replica leads restarts its
// sources with the new configuration. It waits for the removed groups'
// campaigns to end; a removed group that no replica campaigns for any
// more then leaves, in the background (retireIfLast).
func (e *Elector) ApplyConfig(cfg *Config) {
	var ended []*campaign
	removed := map[string]*Group{}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.cfg = cfg
	want := map[string]*Group{}
	for _, g := range cfg.Groups {
		want[g.Name] = g
	}
	for name, c := range e.camps {
		if _, ok := want[name]; !ok {
			c.cancel()
			ended = append(ended, c)
			removed[name] = c.group
			delete(e.camps, name)
			delete(e.leaders, name)
			e.leader.DeleteLabelValues(name)
		}
	}
	for name, g := range want {
		if c, ok := e.camps[name]; ok {
			c.group = g
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		c := &campaign{group: g, cancel: cancel, done: make(chan struct{})}
		e.camps[name] = c
		e.leader.WithLabelValues(name).Set(0)
		go func() {
			defer close(c.done)
			e.campaign(ctx, name)
		}()
	}
	e.retiring.Add(len(removed))
	e.mu.Unlock()
	for _, c := range ended {
		<-c.done
	}
	e.sync()
	for name, g := range removed {
		go e.retireIfLast(name, g)
	}
}

// retireIfLast makes a group just removed from this replica's
// configuration leave as its on_disappear says, once no replica campaigns
// for it: every replica whose configuration has the group keeps a key in
// its election, and this one's is gone, so whichever replica removes the
// group last finds none. A replica killed or cut off keeps its key until
// its lease expires (etcd notices within a second or so of the TTL), so
// this waits up to three times the TTL for the keys to go; past that, a
// replica that still has the group runs it and its targets stay. Several
// replicas retiring a group at once is harmless: a target already leaving
// is left as it is.
func (e *Elector) retireIfLast(group string, g *Group) {
	defer e.retiring.Done()
	ctx, cancel := context.WithTimeout(e.closing, 3*e.o.TTL)
	defer cancel()
	key := ElectionKey(e.o.Prefix, group) + "/"
	for {
		resp, err := e.o.Client.Get(ctx, key, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && resp.Count == 0 {
			e.m.retire(group, g)
			return
		}
		e.wait(ctx)
		switch {
		case ctx.Err() == nil:
		case e.closing.Err() != nil:
			return
		case err != nil:
			e.logger.Warn("discovery group removed from this replica's configuration; etcd could not say whether another replica still has it, so its targets stay", "group", group, "error", err)
			return
		default:
			e.logger.Info("discovery group removed from this replica's configuration; another replica still has it, and its targets stay", "group", group)
			return
		}
	}
}

// Close stops every group this replica runs, resigns from every election
// and waits for the campaigns to end; a stopping replica retires no group.
// It is idempotent.
func (e *Elector) Close() {
	e.mu.Lock()
	e.closed = true
	camps := slices.Collect(maps.Values(e.camps))
	clear(e.camps)
	for _, c := range camps {
		c.cancel()
	}
	e.mu.Unlock()
	e.stop()
	for _, c := range camps {
		<-c.done
	}
	e.retiring.Wait()
}

// Leaders returns the replica leading each configured group, as this
// replica last observed it; "" for a group no replica leads yet.
func (e *Elector) Leaders() map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]string, len(e.camps))
	for name := range e.camps {
		out[name] = e.leaders[name]
	}
	return out
}

// Status returns the status of every configured group, sorted by name:
// the Manager's for the groups this replica leads, and for the others
// their sources and the replica that leads them.
func (e *Elector) Status() []GroupStatus {
	running := map[string]GroupStatus{}
	for _, st := range e.m.Status() {
		running[st.Name] = st
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []GroupStatus
	if e.cfg == nil {
		return out
	}
	for _, g := range e.cfg.Groups {
		st, ok := running[g.Name]
		if !ok || !e.leading[g.Name] {
			st = GroupStatus{Name: g.Name, Source: Source(g.Name)}
			for _, name := range sourceNames(g.SDConfigs) {
				st.Sources = append(st.Sources, server.DiscoverySourceStatus{Name: name})
			}
		}
		st.Leader = e.leaders[g.Name]
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b GroupStatus) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// sync gives the Manager the groups this replica leads.
func (e *Elector) sync() {
	e.applyMu.Lock()
	defer e.applyMu.Unlock()
	e.mu.Lock()
	led := &Config{}
	if e.cfg != nil {
		for _, g := range e.cfg.Groups {
			if e.leading[g.Name] {
				if c, ok := e.camps[g.Name]; ok {
					led.Groups = append(led.Groups, c.group)
				}
			}
		}
	}
	e.mu.Unlock()
	if err := e.m.ApplyConfig(led); err != nil {
		// The groups were validated when loaded: this is a bug.
		e.logger.Error("discovery: cannot run the groups this replica leads", "error", err)
	}
}

// setLeading records whether this replica runs group, and applies it.
func (e *Elector) setLeading(group string, on bool) {
	e.mu.Lock()
	if _, ok := e.camps[group]; on && !ok {
		// Removed from the configuration (or closing) as it won: its
		// campaign resigns next; it never runs.
		e.mu.Unlock()
		return
	}
	changed := e.leading[group] != on
	if on {
		e.leading[group] = true
		e.leaders[group] = e.o.ID
		e.leader.WithLabelValues(group).Set(1)
	} else {
		delete(e.leading, group)
		if _, ok := e.camps[group]; ok {
			e.leader.WithLabelValues(group).Set(0)
		}
	}
	e.mu.Unlock()
	if changed {
		e.sync()
	}
}

// observed records the leader of group seen in etcd.
func (e *Elector) observed(group, leader string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.camps[group]; !ok {
		return
	}
	if e.leaders[group] != leader {
		e.leaders[group] = leader
		if leader != e.o.ID && leader != "" {
			e.logger.Info("discovery group led by another replica", "group", group, "leader", leader)
		}
	}
}

// campaign runs group's election until ctx is done: on a session (a
// lease of TTL) it campaigns, runs the group while it leads, and starts
// over on a new session when its lease is lost.
func (e *Elector) campaign(ctx context.Context, group string) {
	ttl := int(math.Ceil(e.o.TTL.Seconds()))
	key := ElectionKey(e.o.Prefix, group)
	for ctx.Err() == nil {
		sess, err := concurrency.NewSession(e.o.Client, concurrency.WithTTL(ttl), concurrency.WithContext(ctx))
		if err != nil {
			if ctx.Err() == nil {
				e.logger.Warn("discovery election: cannot take a lease; trying again", "group", group, "error", err, "retry", e.o.Retry)
				e.wait(ctx)
			}
			continue
		}
		e.term(ctx, group, sess, concurrency.NewElection(sess, key))
	}
}

// term is one session's part of group's election: campaign, lead until
// ctx is done or the lease is lost, then stop the group and resign.
func (e *Elector) term(ctx context.Context, group string, sess *concurrency.Session, el *concurrency.Election) {
	// The session's context ends with ctx and when the lease is lost:
	// a campaign that outlived its lease must not win.
	octx, ocancel := context.WithCancel(sess.Ctx())
	observing := make(chan struct{})
	go func() {
		defer close(observing)
		for resp := range el.Observe(octx) {
			if len(resp.Kvs) > 0 {
				e.observed(group, string(resp.Kvs[0].Value))
			}
		}
	}()
	defer func() {
		ocancel()
		<-observing
	}()

	err := el.Campaign(sess.Ctx(), e.o.ID)
	select {
	case <-sess.Done():
		err = fmt.Errorf("the election lease was lost")
	default:
	}
	if err != nil {
		_ = sess.Close()
		if ctx.Err() == nil {
			e.logger.Warn("discovery election: campaign ended; trying again", "group", group, "error", err, "retry", e.o.Retry)
			e.wait(ctx)
		}
		return
	}
	e.logger.Info("leading discovery group: running its sources", "group", group, "replica", e.o.ID, "lease_ttl", e.o.TTL.String())
	e.setLeading(group, true)
	select {
	case <-ctx.Done():
		// Removed from the configuration, or closing: stop the sources
		// first, then resign, so that the next leader starts only once
		// this one stopped.
		e.setLeading(group, false)
		rctx, cancel := context.WithTimeout(context.Background(), e.o.TTL)
		if err := el.Resign(rctx); err != nil {
			e.logger.Warn("discovery election: resign failed; the lease expires instead", "group", group, "error", err)
		}
		cancel()
		_ = sess.Close()
		e.logger.Info("resigned from discovery group", "group", group)
	case <-sess.Done():
		e.setLeading(group, false)
		e.logger.Warn("discovery election lease lost: stopped the group's sources; campaigning again", "group", group)
	}
}

// wait waits for Retry or ctx.
func (e *Elector) wait(ctx context.Context) {
	t := time.NewTimer(e.o.Retry)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
