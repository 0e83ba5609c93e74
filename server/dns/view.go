package dns

import (
	"cmp"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/pulsehealth/pulse/checker"
)

// Source is what the DNS server needs from the checker: its event stream,
// the same one WatchTransitions serves. *checker.Checker implements it.
type Source interface {
	Watch(f checker.Filter, start uint64) (*checker.Watcher, error)
}

// record is what DNS answers about one target. Records are replaced, never
// changed, except routable, which view.mu guards.
type record struct {
	name, group string
	routable    bool
	// addr is the probe's address when it is an IP literal; invalid when
	// the probe addresses a host name, or has no address DNS can carry.
	addr netip.Addr
	ip   net.IP // addr as the A or AAAA record carries it
	// srvTarget is the SRV record's target: NAME.target.DOMAIN for an IP
	// literal, the host name (as an FQDN) otherwise; "" when there is none
	// DNS can carry (a label over 63 bytes, say). port is the probe's port.
	srvTarget string
	port      uint16
}

// newRecord derives a target's record from its status; domain is the
// server's domain, lower case, as an FQDN.
func newRecord(st checker.Status, domain string) *record {
	r := &record{name: st.Spec.Name, group: st.Spec.Group, routable: st.Routable}
	host, port, ok := st.Spec.Probe.HostPort()
	if !ok {
		return r
	}
	r.port = port
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return r // a scoped address means nothing to another machine
		}
		r.addr = a.Unmap()
		r.ip = net.IP(r.addr.AsSlice())
		if fq := mdns.Fqdn(r.name + ".target." + domain); validName(fq) {
			r.srvTarget = fq
		}
		return r
	}
	if fq := mdns.Fqdn(strings.ToLower(host)); validName(fq) {
		r.srvTarget = fq
	}
	return r
}

// validName reports whether an FQDN can go on the wire: labels of at most
// 63 bytes, at most 255 bytes in all.
func validName(fqdn string) bool {
	_, ok := mdns.IsDomainName(fqdn)
	return ok && !strings.Contains(fqdn, "..")
}

// index maps a lower-case DNS name to the records it answers. DNS names
// are case-insensitive (RFC 4343) but Pulse's are not, so names that
// differ only in case answer together.
type index map[string]*recordSet

// recordSet is the records one DNS name answers. byName changes only
// under view.mu held for writing; repeats is also written under it for
// reading, hence atomic.
type recordSet struct {
	byName map[string]*record // by target name
	// repeats caches whether two records of the set, routable or not,
	// share an address or an endpoint, so that answers need dedupe:
	// repeatsUnknown after a change, worked out by the first query that
	// asks (see mayRepeat).
	repeats atomic.Int32
}

// Values of recordSet.repeats.
const (
	repeatsUnknown = iota
	repeatsNo
	repeatsYes
)

func (ix index) add(key string, r *record) {
	set := ix[key]
	if set == nil {
		set = &recordSet{byName: map[string]*record{}}
		ix[key] = set
	}
	set.byName[r.name] = r
	set.repeats.Store(repeatsUnknown)
}

func (ix index) remove(key string, r *record) {
	if set := ix[key]; set != nil {
		delete(set.byName, r.name)
		set.repeats.Store(repeatsUnknown)
		if len(set.byName) == 0 {
			delete(ix, key)
		}
	}
}

// repeatKey is what two records must share to repeat each other in an
// answer: an address (A, AAAA, and SRV whatever the ports), or a host
// name and port (SRV; see byEndpoint).
type repeatKey struct {
	addr netip.Addr
	host string
	port uint16
}

// mayRepeat reports whether an answer from set may hold the same record
// twice, and so needs dedupe. Sets rarely do, and dedupe's sort costs far
// more than the rest of picking an answer: for the 100 A records of
// BenchmarkDNSHandler, collecting and shuffling took 2 µs and sorting
// added 17 to 30 (three runs each, on a loaded machine). The answer is
// cached until the set changes; routability changes leave it be. Call it
// with view.mu held for reading or writing.
func (set *recordSet) mayRepeat() bool {
	switch set.repeats.Load() {
	case repeatsNo:
		return false
	case repeatsYes:
		return true
	}
	repeats := repeatsNo
	if len(set.byName) > 1 {
		seen := make(map[repeatKey]struct{}, 2*len(set.byName))
		mark := func(k repeatKey) {
			if _, ok := seen[k]; ok {
				repeats = repeatsYes
			}
			seen[k] = struct{}{}
		}
		for _, r := range set.byName {
			switch {
			case r.addr.IsValid():
				mark(repeatKey{addr: r.addr})
			case r.srvTarget != "":
				mark(repeatKey{host: r.srvTarget, port: r.port})
			}
		}
	}
	set.repeats.Store(int32(repeats))
	return repeats == repeatsYes
}

// dedupe keeps one record of rs per key, the one whose target name sorts
// first, so that an answer never repeats itself when targets share an
// address (two checks of one backend, say): a resolver or load balancer
// would count that backend twice. The record kept, and so an SRV record's
// target name, stays the same from one query to the next while its target
// is routable. It runs before MaxAnswers, which thus counts distinct
// records.
func dedupe(rs []*record, key func(a, b *record) int) []*record {
	if len(rs) < 2 {
		return rs
	}
	slices.SortFunc(rs, func(a, b *record) int {
		if c := key(a, b); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	return slices.CompactFunc(rs, func(a, b *record) bool { return key(a, b) == 0 })
}

// byAddress is the key of A and AAAA records: the address.
func byAddress(a, b *record) int { return a.addr.Compare(b.addr) }

// byEndpoint is the key of SRV records: where they lead, the address (for
// a target addressed by IP, whatever its target name) or the host name,
// and the port.
func byEndpoint(a, b *record) int {
	if c := a.addr.Compare(b.addr); c != 0 {
		return c
	}
	if !a.addr.IsValid() {
		if c := strings.Compare(a.srvTarget, b.srvTarget); c != 0 {
			return c
		}
	}
	return cmp.Compare(a.port, b.port)
}

// view is the checker's registry as DNS sees it, kept up to date from a
// watch. It serves queries without the checker's lock: Checker.List would
// scan every target under that lock and build a full Status for each of a
// group's targets on every query, and with a store wait for the commit in
// flight, so a query flood would slow the probing down.
type view struct {
	domain string
	logger *slog.Logger

	mu     sync.RWMutex // protects everything below and every record's routable
	groups index        // by lower-case group
	names  index        // by lower-case target name: every target
	// ents counts the names below each empty non-terminal, relative to the
	// domain: "target" and "_tcp" have none of their own, and neither has
	// "b" while group "a.b" exists. Such a name is NOERROR, never NXDOMAIN,
	// which would tell a resolver nothing exists below it (RFC 8020).
	ents map[string]int
	rev  uint64
	live bool // false once the checker has closed
}

func newView(domain string, logger *slog.Logger) *view {
	return &view{domain: domain, logger: logger}
}

// reset replaces the view with a snapshot.
func (v *view) reset(snap []checker.Status, rev uint64) {
	records := make([]*record, len(snap))
	for i, st := range snap {
		records[i] = newRecord(st, v.domain)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.groups, v.names, v.ents = index{}, index{}, map[string]int{}
	for _, r := range records {
		v.addLocked(r)
	}
	v.rev, v.live = rev, true
}

// apply applies events in revision order.
func (v *view) apply(evs []checker.Event) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for i := range evs {
		e := &evs[i]
		switch e.Kind {
		case checker.EventAdded, checker.EventUpdated:
			v.removeLocked(e.Status.Spec.Name)
			v.addLocked(newRecord(e.Status, v.domain))
		case checker.EventRemoved:
			v.removeLocked(e.Status.Spec.Name)
		case checker.EventTransition:
			if r := v.lookupLocked(e.Transition.Target); r != nil {
				r.routable = checker.Machine{State: e.Transition.To}.Routable()
			}
		}
		v.rev = e.Revision
	}
}

// lookupLocked returns the record of the target named name, or nil.
func (v *view) lookupLocked(name string) *record {
	if set := v.names[strings.ToLower(name)]; set != nil {
		return set.byName[name]
	}
	return nil
}

func (v *view) addLocked(r *record) {
	if r.group != "" {
		g := strings.ToLower(r.group)
		v.groups.add(g, r)
		v.entsLocked(g, 1)
	}
	v.names.add(strings.ToLower(r.name), r)
	v.entsLocked(strings.ToLower(r.name)+".target", 1)
}

func (v *view) removeLocked(name string) {
	r := v.lookupLocked(name)
	if r == nil {
		return
	}
	if r.group != "" {
		g := strings.ToLower(r.group)
		v.groups.remove(g, r)
		v.entsLocked(g, -1)
	}
	v.names.remove(strings.ToLower(r.name), r)
	v.entsLocked(strings.ToLower(r.name)+".target", -1)
}

// entsLocked counts name (relative to the domain) in or out of the empty
// non-terminals above it.
func (v *view) entsLocked(name string, delta int) {
	for i := strings.IndexByte(name, '.'); i >= 0; i = strings.IndexByte(name, '.') {
		name = name[i+1:]
		if v.ents[name] += delta; v.ents[name] <= 0 {
			delete(v.ents, name)
		}
	}
}

func (v *view) progress(rev uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.rev = max(v.rev, rev)
}

func (v *view) close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.live = false
}

// revision returns the revision the view is at.
func (v *view) revision() uint64 {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.rev
}

// follower keeps a view up to date from a Source.
type follower struct {
	src    Source
	v      *view
	stop   chan struct{}
	done   chan struct{}
	logger *slog.Logger
}

// maxEvents is how many events the follower takes at a time.
const maxEvents = 1024

// watchRetry is how long the follower waits before watching again when
// Watch fails for a reason other than the checker closing (the watcher
// limit).
const watchRetry = time.Second

// start watches src from a snapshot, fills v with it, and follows the
// events in a goroutine until stop. It fails if the first watch does.
func startFollower(src Source, v *view, logger *slog.Logger) (*follower, error) {
	f := &follower{src: src, v: v, stop: make(chan struct{}), done: make(chan struct{}), logger: logger}
	w, err := f.watch()
	if err != nil {
		return nil, err
	}
	go f.run(w)
	return f, nil
}

func (f *follower) watch() (*checker.Watcher, error) {
	w, err := f.src.Watch(checker.Filter{}, 0)
	if err != nil {
		return nil, err
	}
	snap, rev := w.Snapshot()
	f.v.reset(snap, rev)
	return w, nil
}

func (f *follower) run(w *checker.Watcher) {
	defer close(f.done)
	var buf []checker.Event
	for {
		if w == nil {
			var err error
			if w, err = f.watch(); err != nil {
				if errors.Is(err, checker.ErrClosed) {
					f.v.close()
					return
				}
				f.logger.Warn("cannot watch the checker; answering from the last view", "error", err, "retry", watchRetry.String())
				t := time.NewTimer(watchRetry)
				select {
				case <-f.stop:
					t.Stop()
					return
				case <-t.C:
				}
				continue
			}
		}
		select {
		case <-f.stop:
			w.Close()
			return
		case <-w.Ready():
		}
		evs, err := w.NextAppend(buf[:0], maxEvents)
		f.v.apply(evs)
		clear(evs) // drop the statuses' references until the next batch
		buf = evs
		switch {
		case errors.Is(err, checker.ErrClosed):
			f.v.close()
			return
		case err != nil:
			// Too far behind: start again from a snapshot.
			f.logger.Warn("fell behind the checker's events; reloading", "error", err)
			w.Close()
			w = nil
			continue
		}
		if rev, ok := w.Progress(); ok {
			f.v.progress(rev)
		}
	}
}

// close stops the follower and waits for it. It is called once.
func (f *follower) close() {
	close(f.stop)
	<-f.done
}
