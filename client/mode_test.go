package client_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/client"
)

// A drained target leaves a View's routable targets; the view keeps its
// mode and reason from the stream's mode event, and a Watch delivers that
// event. A slow start's ramp comes with the transition, and Weight follows
// it; a target's slow start round-trips through Add and List.
func TestViewFollowsModesAndSlowStarts(t *testing.T) {
	e := newEnv(t, 1, checker.Config{})
	c := e.client(t)
	ctx := within(t)
	a := tcpTarget("a", "edge", "10.0.0.1:80")
	a.SlowStart = time.Hour
	if _, _, err := c.Add(ctx, a); err != nil {
		t.Fatal(err)
	}
	c.Add(ctx, tcpTarget("b", "edge", "10.0.0.2:80"))
	e.set("10.0.0.1:80", true)
	e.set("10.0.0.2:80", true)
	e.round(t)
	list, err := c.List(ctx, "edge")
	if err != nil || list.Targets[0].Target.SlowStart != time.Hour {
		t.Fatalf("List: %+v, %v; want a's slow start back", list.Targets, err)
	}

	v := c.NewView(client.Filter{Group: "edge"})
	v.Start(ctx)
	defer v.Close()
	if err := v.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	st, _ := v.Get("a")
	if now := time.Now(); st.SlowStartEnd.IsZero() || st.Weight(now) > 1 || st.Weight(st.SlowStartEnd) != 100 {
		t.Errorf("a in its slow start: end %v, weight now %d; want an hour's ramp just begun", st.SlowStartEnd, st.Weight(now))
	}
	events := c.Watch(ctx, client.Filter{Group: "edge"})
	<-events // the snapshot

	if _, err := e.c.SetMode(checker.ModeRequest{Target: "b", Mode: checker.ModeDraining, Reason: "deploy 4711"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b out of the view's routable targets", func() bool { return cmp.Equal(routableNames(v.Routable("edge")), []string{"a"}) })
	if st, _ := v.Get("b"); st.Mode != client.ModeDraining || st.ModeReason != "deploy 4711" {
		t.Errorf("b in the view: mode %v (%q)", st.Mode, st.ModeReason)
	}
	ev := <-events
	if ev.Kind != client.EventMode || ev.Mode.Target != "b" || ev.Mode.From != client.ModeActive || ev.Mode.To != client.ModeDraining || ev.Mode.Reason != "deploy 4711" {
		t.Errorf("first event after SetMode: %+v", ev)
	}
	if ev := <-events; ev.Kind != client.EventTransition || ev.Transition.Mode != client.ModeDraining || ev.Transition.Reason != "draining: deploy 4711" {
		t.Errorf("second event after SetMode: %+v", ev)
	}
}
