package client_test

import (
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/client"
)

// changeLog collects a view's changes as text.
type changeLog struct {
	mu  sync.Mutex
	got []string
}

func (l *changeLog) add(c client.Change) {
	l.mu.Lock()
	defer l.mu.Unlock()
	more := ""
	if c.More {
		more = " +"
	}
	l.got = append(l.got, c.String()+" ("+c.Reason+")"+more)
}

func (l *changeLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.got)
}

func (l *changeLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	got := l.got
	l.got = nil
	return got
}

func routableNames(sts []client.Status) []string {
	out := []string{}
	for _, st := range sts {
		out = append(out, st.Target.Name)
	}
	return out
}

// TestView follows a group: Get, Routable and the subscribers' changes
// through a snapshot, a transition, a target that moves to another group,
// an update and a removal.
func TestView(t *testing.T) {
	e := newEnv(t, 1, checker.Config{})
	c := e.client(t)
	ctx := within(t)
	c.Add(ctx, tcpTarget("a", "edge", "10.0.0.1:80"))
	c.Add(ctx, tcpTarget("b", "edge", "10.0.0.2:80"))
	c.Add(ctx, tcpTarget("x", "data", "10.0.0.9:80"))
	e.set("10.0.0.1:80", true)
	e.round(t)

	v := c.NewView(client.Filter{Group: "edge"})
	var log changeLog
	v.Subscribe(log.add) // before Start: every change comes from the stream
	v.Start(ctx)
	defer v.Close()
	if err := v.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	if got := routableNames(v.Routable("edge")); !cmp.Equal(got, []string{"a"}) {
		t.Errorf("Routable(edge) = %v; want [a]", got)
	}
	if _, ok := v.Get("x"); ok {
		t.Error("the view of edge has x, of data")
	}
	if st, ok := v.Get("b"); !ok || st.State != client.StateUnhealthy || st.Target.TCP.Address != "10.0.0.2:80" {
		t.Errorf("Get(b) = %+v, %v", st, ok)
	}
	want := []string{"a: absent -> healthy (snapshot) +", "b: absent -> unhealthy (snapshot)"}
	waitFor(t, "the snapshot's changes", func() bool { return log.len() >= 2 })
	if got := log.take(); !cmp.Equal(got, want) {
		t.Errorf("snapshot changes %v; want %v", got, want)
	}
	// A subscriber that comes later first gets what the view has.
	var late changeLog
	cancel := v.Subscribe(late.add)
	if got, want := late.take(), []string{"a: absent -> healthy (subscribed) +", "b: absent -> unhealthy (subscribed)"}; !cmp.Equal(got, want) {
		t.Errorf("a late subscriber's first changes %v; want %v", got, want)
	}
	cancel()

	e.set("10.0.0.2:80", true)
	e.round(t)
	c.Add(ctx, tcpTarget("a", "data", "10.0.0.1:80")) // moves away
	c.Add(ctx, tcpTarget("b", "edge", "10.0.0.3:80")) // new address
	c.Add(ctx, tcpTarget("c", "edge", "10.0.0.4:80")) // new
	c.Remove(ctx, "b")                                //
	list, _ := newEnvClient(t, e).List(ctx, "edge")   //
	waitFor(t, "the view at the list's revision", func() bool { return v.Revision() >= list.Revision })
	want = []string{
		"b: unhealthy -> healthy (transition)",
		`a: healthy -> absent (moved to group "data")`,
		"b: healthy -> healthy (updated)",
		"c: absent -> unhealthy (added)",
		"b: healthy -> absent (removed)",
	}
	if got := log.take(); !cmp.Equal(got, want) {
		t.Errorf("changes %v; want %v", got, want)
	}
	if got := routableNames(v.Routable("edge")); len(got) != 0 {
		t.Errorf("Routable(edge) = %v; want none", got)
	}
	all, rev := v.List()
	if rev != list.Revision || !cmp.Equal(routableNames(all), []string{"c"}) {
		t.Errorf("List() = %v at %d; want [c] at %d", routableNames(all), rev, list.Revision)
	}
	// Closed, the view keeps what it knew.
	v.Close()
	if _, ok := v.Get("c"); !ok {
		t.Error("a closed view forgot c")
	}
}
