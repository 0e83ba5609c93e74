package client_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/client"
	"github.com/pulsehealth/pulse/server"
)

// viewState is what a View and ListTargets must agree on for one target.
type viewState struct {
	Group    string
	State    client.State
	Routable bool
	Addr     string
	Rise     int
	Interval time.Duration
}

func stateOf(st client.Status) viewState {
	return viewState{st.Target.Group, st.State, st.Routable, st.Target.TCP.Address, st.Target.Rise, st.Target.Interval}
}

// propView is one view of the property test and what it saw.
type propView struct {
	filter client.Filter
	v      *client.View

	mu          sync.Mutex
	at          map[uint64]map[string]viewState // the view after each change's revision
	mirror      map[string]viewState            // the view rebuilt from the changes alone
	last        uint64
	snapshots   int
	disconnects int
	errs        []string
}

func (p *propView) onChange(c client.Change) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.Reason == "snapshot" {
		p.snapshots++
	} else if c.Revision <= p.last {
		p.errs = append(p.errs, fmt.Sprintf("change %v (%s) at %d after %d", c, c.Reason, c.Revision, p.last))
	}
	p.last = c.Revision
	if c.To == client.StateUnknown {
		delete(p.mirror, c.Name)
	} else {
		p.mirror[c.Name] = stateOf(c.Status)
	}
	if c.More {
		return
	}
	// The view does not move while its subscribers run: List is the view
	// at this revision.
	list, rev := p.v.List()
	if rev != c.Revision {
		p.errs = append(p.errs, fmt.Sprintf("change at %d, view at %d", c.Revision, rev))
	}
	got := map[string]viewState{}
	for _, st := range list {
		got[st.Target.Name] = stateOf(st)
	}
	p.at[rev] = got
	if diff := cmp.Diff(got, p.mirror); diff != "" {
		p.errs = append(p.errs, fmt.Sprintf("at %d the changes rebuild another view (-view +changes):\n%s", rev, diff))
	}
}

// TestViewUnderDisconnects is the View's property test, after
// server/property_test.go: views with different filters follow a real
// server while targets are added, updated, moved between groups, removed
// and flipped at random, and their connections are cut at random, briefly
// or for longer than the server's history (a re-snapshot). At every
// revision a view reports, it must equal what ListTargets showed at that
// revision, for its filter's targets; the changes it hands its subscribers
// must rebuild it exactly.
func TestViewUnderDisconnects(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("PULSE_PROPERTY_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d: replay with PULSE_PROPERTY_SEED=%d", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	e := newEnv(t, 1, checker.Config{HistorySize: 40}, server.WithProgressInterval(2*time.Millisecond))
	c := e.client(t)
	admin := newEnvClient(t, e) // never cut
	ctx := within(t)

	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	groups := []string{"g1", "g2", "g3"}
	var views []*propView
	for _, f := range []client.Filter{{}, {Group: "g1"}, {Group: "g2"}, {Names: []string{"a", "c", "e"}}, {Group: "g3", Names: []string{"b", "h"}}} {
		p := &propView{filter: f, at: map[uint64]map[string]viewState{}, mirror: map[string]viewState{}}
		p.v = c.View(ctx, f, client.OnStreamState(func(err error) {
			if err != nil {
				p.mu.Lock()
				p.disconnects++
				p.mu.Unlock()
			}
		}))
		p.v.Subscribe(p.onChange)
		views = append(views, p)
	}
	defer func() {
		for _, p := range views {
			p.v.Close()
		}
	}()

	lists := map[uint64]map[string]viewState{} // ListTargets after each operation
	record := func() uint64 {
		l, err := admin.List(ctx, "")
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		m := map[string]viewState{}
		for _, st := range l.Targets {
			m[st.Target.Name] = stateOf(st)
		}
		lists[l.Revision] = m
		return l.Revision
	}
	// checkpoint heals every cut and waits for every view to catch up
	// with the list's revision rev (a progress event brings a filtered one
	// there), which it must then equal.
	checkpoint := func(rev uint64) {
		t.Helper()
		e.cuts.heal()
		for _, p := range views {
			waitFor(t, fmt.Sprintf("view %+v at %d", p.filter, rev), func() bool { return p.v.Revision() >= rev })
			list, at := p.v.List()
			got := map[string]viewState{}
			for _, st := range list {
				got[st.Target.Name] = stateOf(st)
			}
			if diff := cmp.Diff(filtered(lists[at], p.filter), got); at != rev || diff != "" {
				t.Errorf("view %+v at %d (list at %d) differs from ListTargets (-list +view):\n%s", p.filter, at, rev, diff)
			}
		}
	}
	var heldUntil uint64 // while cut and held: the revision to heal at
	for i := range 600 {
		name := names[rng.IntN(len(names))]
		switch op := rng.IntN(10); {
		case op < 3:
			tg := tcpTarget(name, groups[rng.IntN(len(groups))], name+":80")
			tg.Rise = 1 + rng.IntN(2)
			tg.Interval = time.Duration(1+rng.IntN(3)) * time.Second
			if _, _, err := admin.Add(ctx, tg); err != nil {
				t.Fatalf("Add: %v", err)
			}
		case op < 4:
			if _, err := admin.Remove(ctx, name); err != nil {
				t.Fatalf("Remove: %v", err)
			}
		default:
			e.set(name+":80", rng.IntN(2) == 0)
			e.round(t)
		}
		rev := record()
		switch {
		case heldUntil > 0:
			if rev >= heldUntil {
				e.cuts.heal()
				heldUntil = 0
			}
		case rng.IntN(25) == 0:
			e.cuts.cut(false) // a blip: reconnect at once, resume
		case rng.IntN(40) == 0:
			// Out for 10 to 70 revisions: a resume within the history (40
			// events), or a re-snapshot past it.
			e.cuts.cut(true)
			heldUntil = rev + 10 + uint64(rng.IntN(60))
		}
		if i%100 == 99 || i == 599 {
			checkpoint(rev)
			heldUntil = 0
		}
	}

	// Whatever the random cuts did, end with one longer than the history:
	// every view re-lists, and its snapshot moves targets between groups.
	e.cuts.cut(true)
	var rev uint64
	for k := range 60 {
		tg := tcpTarget(names[k%len(names)], groups[(k/len(names))%len(groups)], names[k%len(names)]+":80")
		tg.Interval = time.Duration(1+k%2) * time.Second
		if _, _, err := admin.Add(ctx, tg); err != nil {
			t.Fatalf("Add: %v", err)
		}
		rev = record()
	}
	checkpoint(rev)

	var compared, snapshots, disconnects int
	for _, p := range views {
		p.v.Close()
		for _, e := range p.errs {
			t.Errorf("view %+v: %s", p.filter, e)
		}
		for rev, got := range p.at {
			want, ok := lists[rev]
			if !ok {
				continue // a revision in the middle of a round of several transitions
			}
			compared++
			if diff := cmp.Diff(filtered(want, p.filter), got); diff != "" {
				t.Errorf("view %+v at %d differs from ListTargets (-list +view):\n%s", p.filter, rev, diff)
			}
		}
		snapshots += p.snapshots
		disconnects += p.disconnects
	}
	t.Logf("%d revisions compared, %d disconnects, %d snapshot changes", compared, disconnects, snapshots)
	if compared < 100 || disconnects == 0 || snapshots == 0 {
		t.Errorf("the run compared %d revisions, saw %d disconnects and %d snapshot changes: it did not exercise the follower", compared, disconnects, snapshots)
	}
}

func filtered(all map[string]viewState, f client.Filter) map[string]viewState {
	out := map[string]viewState{}
	for name, st := range all {
		if f.Matches(name, st.Group) {
			out[name] = st
		}
	}
	return out
}
