package etcdreg_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/etcdreg"
	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
	"github.com/pulsehealth/pulse/checker/probe"
)

// paths is the fleet as each replica sees it: a target fails for every
// replica (it is down) or for one replica only (that replica's path to it
// is broken). Every probe is counted by the replica that made it.
type paths struct {
	mu     sync.Mutex
	down   map[string]bool            // target -> down
	cut    map[string]map[string]bool // replica -> target -> unreachable from it
	probes map[string]map[string]int  // replica -> target -> probes
}

func newPaths() *paths {
	return &paths{down: map[string]bool{}, cut: map[string]map[string]bool{}, probes: map[string]map[string]int{}}
}

func (p *paths) setDown(name string, down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down[name] = down
}

func (p *paths) setCut(replica, name string, cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut[replica] == nil {
		p.cut[replica] = map[string]bool{}
	}
	p.cut[replica][name] = cut
}

func (p *paths) count(replica, name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.probes[replica][name]
}

type pathProber struct {
	p             *paths
	replica, name string
}

func (pp pathProber) Probe(context.Context) error {
	p := pp.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.probes[pp.replica] == nil {
		p.probes[pp.replica] = map[string]int{}
	}
	p.probes[pp.replica][pp.name]++
	switch {
	case p.cut[pp.replica][pp.name]:
		return errors.New("no route to host")
	case p.down[pp.name]:
		return errors.New("connection refused")
	}
	return nil
}

// startVantage starts a replica that judges vantages 300ms over the line
// suspect.
func startVantage(t *testing.T, endpoint, id, label string, p *paths) *replica {
	t.Helper()
	return startVantagePolicy(t, endpoint, id, label, p, quick)
}

// startFleet starts a replica for each label (r1, r2, ...; "" labels a
// replica by its ID) with the vantage policy vp, and waits until each
// sees them all.
func startFleet(t *testing.T, endpoint string, p *paths, vp checker.VantagePolicy, labels ...string) []*replica {
	t.Helper()
	var rs []*replica
	for i, l := range labels {
		rs = append(rs, startVantagePolicy(t, endpoint, fmt.Sprintf("r%d", i+1), l, p, vp))
	}
	eventually(t, "every replica sees every member", func() bool {
		for _, r := range rs {
			if len(r.reg.Members()) != len(rs) {
				return false
			}
		}
		return true
	})
	return rs
}

// addHealthy adds names, each probed from k vantages, through rs[0], and
// waits until every replica sees each healthy by all k.
func addHealthy(t *testing.T, rs []*replica, k uint8, names ...string) {
	t.Helper()
	for _, n := range names {
		spec := target(n)
		spec.Vantages = k
		if _, _, err := rs[0].c.Add(spec); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range rs {
		eventually(t, r.id+" sees every target healthy from every vantage", func() bool {
			for _, n := range names {
				st, _ := r.c.Status(n)
				if st.State != checker.StateHealthy || strings.Count(vantagesText(st), "=healthy") != int(k) {
					return false
				}
			}
			return true
		})
	}
}

// quick is the vantage policy of the tests: 300ms over the line is
// suspect.
var quick = checker.VantagePolicy{SuspectAfter: 300 * time.Millisecond}

func startVantagePolicy(t *testing.T, endpoint, id, label string, p *paths, vp checker.VantagePolicy) *replica {
	t.Helper()
	reg, err := etcdreg.Open(context.Background(), etcdreg.Options{
		Endpoints: []string{endpoint}, Prefix: prefix, ID: id, Vantage: label, LeaseTTL: 2 * time.Second, Logger: testLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := checker.New(checker.Config{
		Shared:   reg,
		Logger:   testLogger(t),
		Vantage:  vp,
		Defaults: checker.Defaults{Interval: 50 * time.Millisecond, Timeout: 40 * time.Millisecond, Rise: 1, Fall: 2},
		NewProber: func(s probe.Spec) (checker.Prober, error) {
			return pathProber{p: p, replica: id, name: s.HTTP.URL[strings.LastIndex(s.HTTP.URL, "/")+1:]}, nil
		},
	})
	if err != nil {
		reg.Close()
		t.Fatal(err)
	}
	reg.Run(c)
	c.Start()
	r := &replica{id: id, reg: reg, c: c}
	t.Cleanup(r.stop)
	return r
}

// vantagesText returns the target's vantages' verdicts, sorted.
func vantagesText(st checker.Status) string {
	var parts []string
	for _, v := range st.Vantages {
		parts = append(parts, v.String())
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// A target probed from three vantages with a quorum of two: each replica
// probes it; one replica's broken path changes its verdict, shown on every
// replica, and publishes nothing; two vantages agreeing publish the
// transition, the same event at the same revision on every replica, with
// every vantage's verdict and error.
func TestVantagesDecideByQuorum(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	p := newPaths()
	rs := startFleet(t, etcd.Endpoint, p, quick, "zone-a", "zone-b", "zone-c")
	var ws []*checker.Watcher
	for _, r := range rs {
		w, err := r.c.Watch(checker.Filter{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		ws = append(ws, w)
	}
	spec := target("web")
	spec.Vantages = 3
	if _, _, err := rs[0].c.Add(spec); err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		eventually(t, r.id+" sees web healthy from every vantage", func() bool {
			st, err := r.c.Status("web")
			return err == nil && st.State == checker.StateHealthy && vantagesText(st) == "zone-a=healthy zone-b=healthy zone-c=healthy"
		})
	}
	for _, r := range rs {
		if p.count(r.id, "web") == 0 {
			t.Errorf("%s never probed web", r.id)
		}
	}

	// One vantage's path breaks: its verdict changes, the state does not.
	p.setCut("r2", "web", true)
	for _, r := range rs {
		eventually(t, r.id+" shows r2's verdict", func() bool {
			st, _ := r.c.Status("web")
			return strings.Contains(vantagesText(st), "zone-b=unhealthy(no route to host)")
		})
		if st, _ := r.c.Status("web"); st.State != checker.StateHealthy || st.Verdict != checker.StateHealthy {
			t.Errorf("%s: one vantage of three made web %v (verdict %v); want healthy", r.id, st.State, st.Verdict)
		}
	}

	// The target goes down: the quorum publishes it.
	p.setDown("web", true)
	var got [][]string
	for i, w := range ws {
		evs := drain(t, w, func(evs []checker.Event) bool { return len(transitions(evs, "web")) >= 2 })
		var lines []string
		for _, e := range evs {
			if e.Kind == checker.EventTransition && e.Transition.Target == "web" {
				tr := e.Transition
				lines = append(lines, fmt.Sprintf("%d %s %s", e.Revision, tr, tr.Reason))
				if tr.To == checker.StateUnhealthy {
					if len(tr.Vantages) != 3 {
						t.Errorf("%s: the transition carries %d vantages, want 3", rs[i].id, len(tr.Vantages))
					}
					if !strings.HasPrefix(tr.Reason, "vantages: ") || !strings.Contains(tr.Reason, "unhealthy(") {
						t.Errorf("%s: reason %q does not show the vantages' verdicts", rs[i].id, tr.Reason)
					}
				}
			}
		}
		got = append(got, lines)
	}
	for i := 1; i < len(got); i++ {
		if !slices.Equal(got[i][:2], got[0][:2]) {
			t.Errorf("replicas disagree:\n%s: %q\n%s: %q", rs[0].id, got[0][:2], rs[i].id, got[i][:2])
		}
	}
	if !strings.Contains(got[0][1], "web: healthy -> unhealthy") {
		t.Errorf("second transition %q, want healthy -> unhealthy", got[0][1])
	}

	// Back up, and r2's path healed: healthy again, on every replica.
	p.setDown("web", false)
	p.setCut("r2", "web", false)
	for _, r := range rs {
		eventually(t, r.id+" sees web healthy again", func() bool {
			st, _ := r.c.Status("web")
			return st.State == checker.StateHealthy && vantagesText(st) == "zone-a=healthy zone-b=healthy zone-c=healthy"
		})
	}
}

// A replica that restarts with the same ID within its lease puts its
// member key again, with no delete in between: the others label it as it
// says now, by its ID when it gives no label or its ID, not as it said
// before.
func TestRestartedReplicaRelabelsItself(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	b := newBackend()
	ep := []string{etcd.Endpoint}
	r1 := openReplica(t, etcdreg.Options{Endpoints: ep, ID: "r1", Vantage: "zone-a", LeaseTTL: 10 * time.Second}, b, nil)
	var r2 *replica
	for _, step := range []struct{ vantage, want string }{
		{"zone-b", "zone-b"}, {"", "r2"}, {"zone-c", "zone-c"}, {"r2", "r2"},
	} {
		if r2 != nil {
			r2.crash()
		}
		r2 = openReplica(t, etcdreg.Options{Endpoints: ep, ID: "r2", Vantage: step.vantage, LeaseTTL: 10 * time.Second}, b, nil)
		eventually(t, fmt.Sprintf("r1 labels r2 %s after it restarted with vantage %q", step.want, step.vantage), func() bool {
			for _, v := range r1.reg.Vantages("web", 2) {
				if v.Member == "r2" {
					return v.Label == step.want
				}
			}
			return false
		})
	}
}

// A member of the vantages killed: its verdicts go with its lease, its
// vantage moves to the replica ranked next, which probes the target from
// then on, and nothing is published meanwhile.
func TestVantageMovesWhenItsReplicaDies(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	p := newPaths()
	rs := startFleet(t, etcd.Endpoint, p, quick, "", "", "", "")
	spec := target("api")
	spec.Vantages = 3
	if _, _, err := rs[0].c.Add(spec); err != nil {
		t.Fatal(err)
	}
	vs := rs[0].reg.Vantages("api", 3)
	var spare *replica
	for _, r := range rs {
		if !slices.ContainsFunc(vs, func(v checker.Vantage) bool { return v.Member == r.id }) {
			spare = r
		}
	}
	for _, r := range rs {
		eventually(t, r.id+" sees api healthy from three vantages", func() bool {
			st, _ := r.c.Status("api")
			return st.State == checker.StateHealthy && strings.Count(vantagesText(st), "=healthy") == 3
		})
	}
	if n := p.count(spare.id, "api"); n != 0 {
		t.Errorf("%s, not a vantage of api, probed it %d times", spare.id, n)
	}
	watcher := spare
	w, err := watcher.c.Watch(checker.Filter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	// Kill the last vantage (not the owner): crash, no lease revoked.
	var victim *replica
	for _, r := range rs {
		if r.id == vs[2].Member {
			victim = r
		}
	}
	victim.c.Close()
	victim.reg.Abandon()
	victim.c = nil
	eventually(t, "the spare replica takes the vantage over and its verdict is stored", func() bool {
		st, _ := watcher.c.Status("api")
		return strings.Contains(vantagesText(st), spare.id+"=") && !strings.Contains(vantagesText(st), victim.id+"=") &&
			p.count(spare.id, "api") > 0
	})
	before := p.count(spare.id, "api")
	eventually(t, "the spare replica keeps probing api", func() bool { return p.count(spare.id, "api") > before+3 })
	evs, err := w.Next(1000)
	if err != nil {
		t.Fatal(err)
	}
	if trs := transitions(evs, "api"); len(trs) != 0 {
		t.Errorf("a vantage moving published %v; want nothing", trs)
	}
	// The moved vantage counts: two of three down publish it.
	p.setDown("api", true)
	eventually(t, "api unhealthy by the new quorum", func() bool { return state(watcher, "api") == checker.StateUnhealthy })
}

// Probing from several vantages needs replicas: a single checker refuses
// it, naming the field and why.
func TestSingleCheckerRefusesVantages(t *testing.T) {
	c, err := checker.New(checker.Config{NewProber: func(probe.Spec) (checker.Prober, error) { return pathProber{p: newPaths()}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	spec := target("web")
	spec.Vantages = 2
	_, _, err = c.Add(spec)
	var fe *checker.FieldError
	if !errors.As(err, &fe) || fe.Field != "vantages" || !strings.Contains(fe.Reason, "replicas") {
		t.Fatalf("Add with vantages 2 on a single checker: %v; want a FieldError on vantages that says it needs replicas", err)
	}
	if _, err := c.Status("web"); err == nil {
		t.Error("the refused target was registered")
	}
	spec.Vantages, spec.Quorum = 3, 4
	if _, _, err := c.Add(spec); !errors.As(err, &fe) || fe.Field != "quorum" {
		t.Errorf("quorum above vantages: %v; want a FieldError on quorum", err)
	}
}

// A replica whose path to every target breaks (its link to etcd up) is
// marked suspect on every replica at the same revision, and nothing is
// published; while it is suspect the other two still publish a target
// that really goes down; healed, it recovers.
func TestBrokenVantageIsSuspect(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	p := newPaths()
	rs := startFleet(t, etcd.Endpoint, p, quick, "zone-a", "zone-b", "zone-c")
	names := []string{"t1", "t2", "t3", "t4", "t5"}
	addHealthy(t, rs, 3, names...)
	var ws []*checker.Watcher
	for _, r := range rs {
		w, err := r.c.Watch(checker.Filter{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		ws = append(ws, w)
	}

	for _, n := range names {
		p.setCut("r2", n, true)
	}
	var suspect []string
	for i, w := range ws {
		evs := drain(t, w, func(evs []checker.Event) bool {
			return slices.ContainsFunc(evs, func(e checker.Event) bool { return e.Kind == checker.EventVantageSuspect })
		})
		for _, e := range evs {
			switch e.Kind {
			case checker.EventTransition:
				t.Errorf("%s: a broken vantage published %v", rs[i].id, e.Transition)
			case checker.EventVantageSuspect:
				pc := e.Policy
				suspect = append(suspect, fmt.Sprintf("%d %s %s %d/%d", e.Revision, pc.Replica, pc.Vantage, pc.Disagree, pc.Judged))
			}
		}
	}
	for _, s := range suspect[1:] {
		if s != suspect[0] {
			t.Errorf("replicas disagree on the suspect vantage: %q", suspect)
		}
	}
	if !strings.Contains(suspect[0], " r2 zone-b ") {
		t.Errorf("suspect %q, want r2 (zone-b)", suspect[0])
	}
	for _, r := range rs {
		vs := r.c.Vantages()
		i := slices.IndexFunc(vs, func(v checker.VantageState) bool { return v.Member == "r2" })
		if i < 0 || !vs[i].Suspect || vs[i].Label != "zone-b" {
			t.Errorf("%s: Vantages() = %+v; want r2 suspect", r.id, vs)
		}
	}

	// A target really down: the two vantages left publish it.
	p.setDown("t1", true)
	for _, r := range rs {
		eventually(t, r.id+" sees t1 unhealthy", func() bool { return state(r, "t1") == checker.StateUnhealthy })
	}
	p.setDown("t1", false)

	// Healed: r2 agrees again and recovers.
	for _, n := range names {
		p.setCut("r2", n, false)
	}
	for i, w := range ws {
		drain(t, w, func(evs []checker.Event) bool {
			return slices.ContainsFunc(evs, func(e checker.Event) bool {
				return e.Kind == checker.EventVantageRecovered && e.Policy.Replica == "r2"
			})
		})
		eventually(t, rs[i].id+" sees t1 healthy again", func() bool { return state(rs[i], "t1") == checker.StateHealthy })
	}
}

// A group's policy gives its targets their vantages; a replica restarted
// loads the stored verdicts with the policy, and shows what the others
// show. A single checker refuses the policy.
func TestGroupPolicyVantages(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	p := newPaths()
	rs := startFleet(t, etcd.Endpoint, p, quick, "", "", "")
	if _, err := rs[0].c.SetGroupPolicy("edge", checker.GroupPolicy{MaxUnhealthyFraction: 1, Vantages: 3, Quorum: 3}); err != nil {
		t.Fatal(err)
	}
	spec := target("gw")
	spec.Group = "edge"
	if _, _, err := rs[1].c.Add(spec); err != nil {
		t.Fatal(err)
	}
	want := "r1=healthy r2=healthy r3=healthy"
	for _, r := range rs {
		eventually(t, r.id+" sees gw healthy from the group's three vantages", func() bool {
			st, _ := r.c.Status("gw")
			return st.State == checker.StateHealthy && vantagesText(st) == want
		})
	}
	// Quorum 3: two vantages that cannot reach it do not make it down.
	p.setCut("r1", "gw", true)
	p.setCut("r2", "gw", true)
	eventually(t, "two vantages' verdicts stored", func() bool {
		st, _ := rs[2].c.Status("gw")
		return strings.Count(vantagesText(st), "unhealthy") == 2
	})
	if s := state(rs[2], "gw"); s != checker.StateHealthy {
		t.Errorf("gw is %v with two of three vantages down and a quorum of 3; want healthy", s)
	}

	// r3 crashes and restarts at once: it loads the verdicts and the
	// group's policy. (A replica that leaves for good would leave the
	// other two to decide alone: the quorum is at most the vantages
	// there are.)
	rs[2].c.Close()
	rs[2].reg.Abandon()
	rs[2].c = nil
	rs[2] = startVantage(t, etcd.Endpoint, "r3", "", p)
	eventually(t, "the restarted replica shows the stored verdicts", func() bool {
		st, err := rs[2].c.Status("gw")
		return err == nil && len(st.Vantages) == 3 && strings.Count(vantagesText(st), "unhealthy") == 2 && st.State == checker.StateHealthy
	})

	c, err := checker.New(checker.Config{NewProber: func(probe.Spec) (checker.Prober, error) { return pathProber{p: newPaths()}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var fe *checker.FieldError
	if _, err := c.SetGroupPolicy("edge", checker.GroupPolicy{Vantages: 3}); !errors.As(err, &fe) || fe.Field != "vantages" {
		t.Errorf("a single checker's group policy with 3 vantages: %v; want a FieldError on vantages", err)
	}
}

// A real outage of every target: the vantage whose probes see it first
// (here r1, which sees every target fail before the others do) disagrees
// with the others only until they see it too, far less than SuspectAfter,
// so no vantage is marked suspect, and the outage is published.
func TestFleetOutageMarksNoVantageSuspect(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	p := newPaths()
	const after = 10 * time.Second
	rs := startFleet(t, etcd.Endpoint, p, checker.VantagePolicy{SuspectAfter: after}, "", "", "")
	var names []string
	for i := range 8 {
		names = append(names, fmt.Sprintf("t%d", i))
	}
	addHealthy(t, rs, 3, names...)
	w, err := rs[0].c.Watch(checker.Filter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	down := time.Now()
	for _, n := range names {
		p.setCut("r1", n, true)
	}
	eventually(t, "r1 sees the outage first: every one of its verdicts stored", func() bool {
		for _, n := range names {
			st, _ := rs[1].c.Status(n)
			if !strings.Contains(vantagesText(st), "r1=unhealthy") || st.State != checker.StateHealthy {
				return false
			}
		}
		return true
	})
	for _, n := range names {
		p.setDown(n, true)
	}
	// Every target published down, and every vantage agreeing: from here
	// on no vantage is over the line, so no judge can mark one.
	for _, r := range rs {
		eventually(t, r.id+" sees the outage, every vantage agreeing", func() bool {
			for _, n := range names {
				if state(r, n) != checker.StateUnhealthy {
					return false
				}
			}
			for _, v := range r.c.Vantages() {
				if v.Disagree != 0 {
					return false
				}
			}
			return true
		})
	}
	if took := time.Since(down); took >= after {
		t.Fatalf("the outage took %v to be seen by every vantage, not under SuspectAfter (%v): the test says nothing", took, after)
	}
	evs, err := w.Next(10000)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Kind == checker.EventVantageSuspect {
			t.Errorf("a real outage marked a vantage suspect: %s", e.Policy.Text)
		}
	}
	if got := len(transitions(evs, "t0")); got != 1 {
		t.Errorf("t0: %d transitions, want 1 (down)", got)
	}
	for _, r := range rs {
		for _, v := range r.c.Vantages() {
			if v.Suspect {
				t.Errorf("%s: vantage %s suspect after a real outage", r.id, v.Member)
			}
		}
	}
}

// The pool policies hold as they do for a target probed from one place:
// the panic threshold holds a group's second target that the vantages
// judge down, flap damping holds a target whose vantages' verdict flaps,
// a drain makes it unhealthy at once, and passive outcomes count on its
// owner's vantage.
func TestVantagesWithPoolPolicies(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	p := newPaths()
	rs := startFleet(t, etcd.Endpoint, p, quick, "", "", "")
	if _, err := rs[0].c.SetGroupPolicy("edge", checker.GroupPolicy{MaxUnhealthyFraction: 0.5, Vantages: 3}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"e1", "e2"} {
		s := target(n)
		s.Group = "edge"
		if _, _, err := rs[0].c.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	flappy := target("flappy")
	flappy.Vantages, flappy.FlapThreshold, flappy.FlapWindow = 3, 2, time.Minute
	if _, _, err := rs[0].c.Add(flappy); err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		eventually(t, r.id+" sees every target healthy from three vantages", func() bool {
			for _, n := range []string{"e1", "e2", "flappy"} {
				st, _ := r.c.Status(n)
				if st.State != checker.StateHealthy || strings.Count(vantagesText(st), "=healthy") != 3 {
					return false
				}
			}
			return true
		})
	}

	// Both of the group down: one of two may be unhealthy; the other is
	// held, routable.
	p.setDown("e1", true)
	p.setDown("e2", true)
	for _, r := range rs {
		eventually(t, r.id+" holds one of edge", func() bool {
			s1, _ := r.c.Status("e1")
			s2, _ := r.c.Status("e2")
			return s1.Verdict == checker.StateUnhealthy && s2.Verdict == checker.StateUnhealthy &&
				(s1.PanicHeld != s2.PanicHeld) && (s1.Routable != s2.Routable)
		})
	}

	// The vantages' verdict on flappy goes down and up: flap damping
	// holds it unhealthy.
	p.setDown("flappy", true)
	eventually(t, "flappy down", func() bool { return state(rs[1], "flappy") == checker.StateUnhealthy })
	p.setDown("flappy", false)
	for _, r := range rs {
		eventually(t, r.id+" sees flappy held by flap damping", func() bool {
			st, _ := r.c.Status("flappy")
			return st.Flapping && st.State == checker.StateUnhealthy && st.Verdict == checker.StateHealthy
		})
	}

	// Passive outcomes count on every vantage: two failures make the
	// quorum, and the target, unhealthy.
	passive := target("passive")
	passive.Vantages, passive.PassiveOutcomes, passive.Interval = 3, true, time.Hour
	passive.InitialState = checker.StateHealthy
	if _, _, err := rs[0].c.Add(passive); err != nil {
		t.Fatal(err)
	}
	eventually(t, "r2 sees passive", func() bool { return state(rs[1], "passive") == checker.StateHealthy })
	for range 2 {
		if _, _, err := rs[1].c.ReportOutcome("passive", checker.Outcome{Pass: false, Err: "503 from the client"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range rs {
		eventually(t, r.id+" sees passive down by its outcomes", func() bool {
			st, _ := r.c.Status("passive")
			return st.State == checker.StateUnhealthy && strings.Count(vantagesText(st), "unhealthy(503 from the client)") >= 2
		})
	}

	// A drain makes a target probed from three vantages unhealthy at once.
	p.setDown("e1", false)
	p.setDown("e2", false)
	for _, r := range rs {
		eventually(t, r.id+" sees edge healthy again", func() bool {
			return state(r, "e1") == checker.StateHealthy && state(r, "e2") == checker.StateHealthy
		})
	}
	if _, err := rs[2].c.SetMode(checker.ModeRequest{Target: "e1", Mode: checker.ModeDraining, Reason: "deploy"}); err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		eventually(t, r.id+" sees e1 drained", func() bool {
			st, _ := r.c.Status("e1")
			return !st.Routable && st.Verdict == checker.StateHealthy
		})
	}
}
