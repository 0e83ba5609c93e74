package client_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeshared"
	"github.com/pulsehealth/pulse/checker/probe"
	"github.com/pulsehealth/pulse/client"
)

// A single pulsed refuses more than one vantage, naming the field and
// saying it needs replicas; one vantage and a quorum of one come back.
func TestAddVantagesOnASinglePulsed(t *testing.T) {
	e := newEnv(t, 1, checker.Config{})
	c := e.client(t)
	ctx := within(t)
	tg := tcpTarget("web-1", "edge", "10.0.0.1:80")
	tg.Vantages = 3
	_, _, err := c.Add(ctx, tg)
	if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "target.vantages: must be at most 1 here") || !strings.Contains(err.Error(), "needs replicas") {
		t.Errorf("Add with 3 vantages: %v; want ErrInvalidArgument naming target.vantages and replicas", err)
	}
	tg.Vantages, tg.Quorum = 1, 1
	st, _, err := c.Add(ctx, tg)
	if err != nil || st.Target.Vantages != 1 || st.Target.Quorum != 1 || st.Vantages != nil {
		t.Errorf("Add with 1 vantage: %+v, %v; want vantages 1, quorum 1, no verdicts", st.Target, err)
	}
}

// threeVantages is a shared registry that assigns vantages: r2 owns
// web-1, r3 and r4 probe it too, and this replica (r9) neither; the test
// applies their writes.
type threeVantages struct{ fakeshared.Mirror }

var zones = []checker.Vantage{{Member: "r2", Label: "zone-a"}, {Member: "r3", Label: "zone-b"}, {Member: "r4", Label: "zone-c"}}

func (threeVantages) Load() ([]checker.SharedTarget, uint64, error) {
	st := checker.SharedTarget{
		Spec:     checker.Spec{Name: "web-1", Group: "edge", Vantages: 3, Quorum: 2, Probe: probe.Spec{TCP: &probe.TCPSpec{Address: "10.0.0.1:80"}}},
		State:    &checker.SharedState{State: checker.StateHealthy, Writer: "r2"},
		StateRev: 5,
	}
	for i, v := range zones {
		st.Verdicts = append(st.Verdicts, checker.VantageVerdict{Member: v.Member, Label: v.Label, State: checker.StateHealthy, Time: time.Unix(1_800_000_000, 0), Rev: uint64(6 + i)})
	}
	return []checker.SharedTarget{st}, 10, nil
}
func (threeVantages) Vantages(string, int) []checker.Vantage { return zones }
func (threeVantages) Self() checker.Vantage                  { return checker.Vantage{Member: "r9", Label: "zone-d"} }

// A target probed from three vantages: the client reads its spec's
// vantages and quorum, each vantage's verdict in its status, and the
// verdicts a transition carries.
func TestVantagesThroughTheClient(t *testing.T) {
	e := newEnv(t, 1, checker.Config{Shared: threeVantages{}})
	c := e.client(t)
	ctx := within(t)
	ch := c.Watch(ctx, client.Filter{})
	view := c.View(ctx, client.Filter{})
	defer view.Close()
	if err := view.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	if snap := next(t, ch); snap.Kind != client.EventSnapshot || len(snap.Snapshot) != 1 || snap.Snapshot[0].Target.Vantages != 3 || len(snap.Snapshot[0].Vantages) != 3 {
		t.Fatalf("first event %+v; want the snapshot of web-1 with 3 vantages", snap)
	}
	at := time.Unix(1_800_000_060, 0)
	for i, why := range []string{"connection refused", "no route to host"} {
		v, rev := zones[i+1], uint64(11+i)
		e.c.ApplyShared([]checker.SharedChange{{Kind: checker.SharedVerdictPut, Rev: rev, Name: "web-1", Verdict: checker.VantageVerdict{
			Member: v.Member, Label: v.Label, State: checker.StateUnhealthy, Error: why, Time: at, Rev: rev,
		}}}, rev)
	}
	reason := "vantages: zone-a=healthy zone-b=unhealthy(connection refused) zone-c=unhealthy(no route to host)"
	e.c.ApplyShared([]checker.SharedChange{{Kind: checker.SharedStatePut, Rev: 13, Name: "web-1", State: checker.SharedState{
		State: checker.StateUnhealthy, From: checker.StateHealthy, Time: at, Reason: reason, Writer: "r2",
	}}}, 13)

	ev := next(t, ch)
	if ev.Kind != client.EventTransition || ev.Transition.Reason != reason {
		t.Fatalf("got %+v; want web-1's transition by its vantages", ev)
	}
	var got []string
	for _, v := range ev.Transition.Vantages {
		got = append(got, v.String())
	}
	if want := []string{"zone-a=healthy", "zone-b=unhealthy(connection refused)", "zone-c=unhealthy(no route to host)"}; !cmp.Equal(got, want) {
		t.Errorf("transition vantages %q; want %q", got, want)
	}

	// A View keeps the verdicts the transition carried.
	var vst client.Status
	waitFor(t, "the view's web-1 unhealthy", func() bool {
		vst, _ = view.Get("web-1")
		return vst.State == client.StateUnhealthy
	})
	if len(vst.Vantages) != 3 || vst.Vantages[1].Error != "connection refused" {
		t.Errorf("the view's web-1 after the transition: %v, vantages %+v; want unhealthy with the transition's verdicts", vst.State, vst.Vantages)
	}

	st, err := c.State(ctx, "web-1")
	if err != nil {
		t.Fatal(err)
	}
	want := []client.VantageVerdict{
		{Member: "r2", Label: "zone-a", State: client.StateHealthy, Time: time.Unix(1_800_000_000, 0)},
		{Member: "r3", Label: "zone-b", State: client.StateUnhealthy, Error: "connection refused", Time: at},
		{Member: "r4", Label: "zone-c", State: client.StateUnhealthy, Error: "no route to host", Time: at},
	}
	if diff := cmp.Diff(want, st.Vantages, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
		t.Errorf("status vantages (-want +got):\n%s", diff)
	}
	if st.Target.Vantages != 3 || st.Target.Quorum != 2 || st.Verdict != client.StateUnhealthy {
		t.Errorf("vantages %d, quorum %d, verdict %v; want 3, 2, unhealthy", st.Target.Vantages, st.Target.Quorum, st.Verdict)
	}
}

// A verdict prints as its label, its state and its error; "none" before
// the vantage stored one.
func TestVantageVerdictString(t *testing.T) {
	for _, tc := range []struct {
		v    client.VantageVerdict
		want string
	}{
		{client.VantageVerdict{Label: "zone-a", State: client.StateHealthy}, "zone-a=healthy"},
		{client.VantageVerdict{Label: "zone-b", State: client.StateUnhealthy, Error: "no route to host"}, "zone-b=unhealthy(no route to host)"},
		{client.VantageVerdict{Label: "zone-c"}, "zone-c=none"},
	} {
		if got := tc.v.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.v, got, tc.want)
		}
	}
}
