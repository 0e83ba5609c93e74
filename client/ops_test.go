package client_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
	"github.com/pulsehealth/pulse/client"
	"github.com/pulsehealth/pulse/internal/testpki"
)

// wantErr fails t unless err is a *client.Error of method that wraps
// sentinel and whose message contains msg.
func wantErr(t *testing.T, what string, err error, sentinel error, method, msg string) {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) || !errors.Is(err, sentinel) || ce.Method != method || !strings.Contains(ce.Message, msg) {
		t.Errorf("%s: %v; want a %s error wrapping %v with %q", what, err, method, sentinel, msg)
		return
	}
	if status.Code(err) != ce.Code {
		t.Errorf("%s: status.Code is %v, want %v", what, status.Code(err), ce.Code)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestUpdate changes targets field by field through Update, and writes
// back targets read through the client: their secrets, shown redacted,
// stay as stored.
func TestUpdate(t *testing.T) {
	e := newEnv(t, 1, checker.Config{})
	c := e.client(t)
	ctx := within(t)
	p := testpki.Write(t, t.TempDir())
	tlsOpts := &client.TLSOptions{
		CAPEM: readFile(t, p.CA), CertPEM: readFile(t, p.ClientCert), KeyPEM: readFile(t, p.ClientKey),
		ServerName: "pulsed", CertExpiryWarn: 30 * 24 * time.Hour, CertExpiryFail: 24 * time.Hour,
	}
	if _, _, err := c.Add(ctx, client.Target{
		Name: "redis-1", Group: "data", Interval: 3 * time.Second, Timeout: time.Second,
		TCP: &client.TCPProbe{Address: "127.0.0.1:6379", TLS: tlsOpts, Steps: []client.TCPStep{{Send: "PING\r\n"}, {Expect: "+PONG\r\n"}}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Add(ctx, client.Target{
		Name: "web-1", Group: "edge",
		HTTP: &client.HTTPProbe{URL: "http://127.0.0.1:8080/healthz", Headers: map[string]string{"Authorization": "Bearer s3cret"}},
	}); err != nil {
		t.Fatal(err)
	}

	// One field by path: the rest stays.
	prev, st, err := c.Update(ctx, client.Target{Name: "redis-1", Interval: 5 * time.Second}, "interval")
	if err != nil {
		t.Fatal(err)
	}
	if prev.Interval != 3*time.Second || st.Target.Interval != 5*time.Second || st.Target.Group != "data" || len(st.Target.TCP.Steps) != 2 {
		t.Errorf("Update interval: previous %v, now %+v", prev.Interval, st.Target)
	}
	if got := st.Target.TCP.TLS.KeyPEM; got != "<redacted>" {
		t.Errorf("the key reads back as %q, want <redacted>", got)
	}

	// Read, modify, write back the whole probe: the key, read redacted,
	// stays the stored one.
	st, err = c.State(ctx, "redis-1")
	if err != nil {
		t.Fatal(err)
	}
	tgt := st.Target
	tgt.TCP.Steps = append(tgt.TCP.Steps, client.TCPStep{ExpectContains: "role:master", ReadLimit: 128})
	if _, st, err = c.Update(ctx, tgt, "tcp"); err != nil {
		t.Fatal(err)
	}
	if n := len(st.Target.TCP.Steps); n != 3 {
		t.Errorf("after the write-back, %d steps; want 3", n)
	}
	stored, _ := e.c.Status("redis-1")
	if got := stored.Spec.Probe.TCP.TLS.KeyPEM; got != tlsOpts.KeyPEM {
		t.Errorf("the stored key after a write-back of <redacted> is %q; want the key added", got)
	}
	// The same through Add, with every field of the read spec.
	if _, _, err := c.Add(ctx, st.Target); err != nil {
		t.Fatal(err)
	}
	if stored, _ := e.c.Status("redis-1"); stored.Spec.Probe.TCP.TLS.KeyPEM != tlsOpts.KeyPEM {
		t.Errorf("Add of the spec read lost the stored key")
	}
	st2, _ := c.State(ctx, "redis-1")
	if diff := cmp.Diff(st.Target, st2.Target); diff != "" {
		t.Errorf("Add of the spec read changed it (-before +after):\n%s", diff)
	}

	st, _ = c.State(ctx, "web-1")
	tgt = st.Target
	tgt.HTTP.BodyContains = "ready"
	if _, _, err := c.Update(ctx, tgt, "http"); err != nil {
		t.Fatal(err)
	}
	if stored, _ := e.c.Status("web-1"); stored.Spec.Probe.HTTP.Headers["Authorization"] != "Bearer s3cret" || stored.Spec.Probe.HTTP.BodyContains != "ready" {
		t.Errorf("after a write-back of the HTTP probe: %+v", stored.Spec.Probe.HTTP)
	}

	// No paths: the fields set. A named zero field: back to its default.
	if _, st, err = c.Update(ctx, client.Target{Name: "web-1", Group: "blue"}); err != nil || st.Target.Group != "blue" || st.Target.HTTP.BodyContains != "ready" {
		t.Errorf("Update without paths: %+v, %v", st.Target, err)
	}
	if _, st, err = c.Update(ctx, client.Target{Name: "web-1"}, "group"); err != nil || st.Target.Group != "" {
		t.Errorf("Update of a zero group: %q, %v; want the default, no group", st.Target.Group, err)
	}

	// Refusals change nothing.
	_, _, err = c.Update(ctx, client.Target{Name: "web-1"}, "intreval")
	wantErr(t, "an unknown path", err, client.ErrInvalidArgument, "UpdateTarget", `"intreval"`)
	_, _, err = c.Update(ctx, client.Target{Name: "web-2"}, "name")
	wantErr(t, "name in paths", err, client.ErrInvalidArgument, "UpdateTarget", `"name" cannot change`)
	_, _, err = c.Update(ctx, client.Target{Name: "web-2", Group: "x"}, "group")
	wantErr(t, "an unknown target", err, client.ErrNotFound, "UpdateTarget", "web-2")
	_, _, err = c.Update(ctx, client.Target{Name: "redis-1", Timeout: time.Minute}, "timeout")
	wantErr(t, "a timeout over the interval", err, client.ErrInvalidArgument, "UpdateTarget", "timeout")
	if st, _ := c.State(ctx, "redis-1"); st.Target.Timeout != time.Second {
		t.Errorf("a refused Update changed the timeout to %v", st.Target.Timeout)
	}
}

// TestProbeNow probes a selection now, and wants pulsed's rate limit as
// ErrResourceExhausted.
func TestProbeNow(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	e := newEnv(t, 1, checker.Config{Clock: clock})
	c := e.client(t)
	ctx := within(t)
	for _, tg := range []client.Target{tcpTarget("web-2", "edge", "10.0.0.2:80"), tcpTarget("web-1", "edge", "10.0.0.1:80"), tcpTarget("db-1", "data", "10.0.1.1:5432")} {
		if _, _, err := c.Add(ctx, tg); err != nil {
			t.Fatal(err)
		}
	}
	e.set("10.0.0.1:80", true)
	r, err := c.ProbeNow(ctx, "edge")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tr := range r.Transitions {
		got = append(got, tr.Text)
	}
	for _, res := range r.Results {
		got = append(got, res.Name+" "+res.State.String()+" "+res.Result.Error+" "+res.Skipped)
	}
	want := []string{"web-1: unhealthy -> healthy", "web-1 healthy  ", "web-2 unhealthy connection refused "}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the round (-want +got):\n%s", diff)
	}
	if _, err := c.SetMode(ctx, client.ModeRequest{Target: "db-1", Mode: client.ModeMaintenance}); err != nil {
		t.Fatal(err)
	}
	r, err = c.ProbeNow(ctx, "", "db-1")
	if err != nil || len(r.Results) != 1 || r.Results[0].Result != nil || r.Results[0].Skipped == "" {
		t.Errorf("ProbeNow of a target in maintenance: %+v, %v; want it skipped", r, err)
	}
	_, err = c.ProbeNow(ctx, "", "db-2")
	wantErr(t, "an unknown name", err, client.ErrNotFound, "ProbeNow", "db-2")
	for range checker.ProbeNowBurst - 2 { // two rounds so far; the unknown name probed nothing
		if _, err := c.ProbeNow(ctx, "edge"); err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.ProbeNow(ctx, "edge")
	wantErr(t, "over the rate", err, client.ErrResourceExhausted, "ProbeNow", "retry in")
	clock.Advance(time.Second)
	if _, err := c.ProbeNow(ctx, "edge"); err != nil {
		t.Errorf("a second later: %v", err)
	}
}

// TestSetModeAndDrain sets modes and drains through the client, and wants
// a View to follow them.
func TestSetModeAndDrain(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	e := newEnv(t, 1, checker.Config{Clock: fakeclock.New(now)})
	c := e.client(t)
	ctx := within(t)
	for _, tg := range []client.Target{tcpTarget("web-1", "edge", "10.0.0.1:80"), tcpTarget("web-2", "edge", "10.0.0.2:80")} {
		if _, _, err := c.Add(ctx, tg); err != nil {
			t.Fatal(err)
		}
	}
	v := c.View(ctx, client.Filter{Group: "edge"})
	defer v.Close()

	until := now.Add(time.Hour)
	sts, err := c.SetMode(ctx, client.ModeRequest{Target: "web-1", Mode: client.ModeDraining, Reason: "deploy 4711", Until: until})
	if err != nil || len(sts) != 1 {
		t.Fatalf("SetMode: %+v, %v", sts, err)
	}
	if st := sts[0]; st.Mode != client.ModeDraining || st.ModeReason != "deploy 4711" || !st.ModeUntil.Equal(until) || !st.ModeSince.Equal(now) || st.Routable {
		t.Errorf("SetMode's status: mode %v %q since %v until %v, routable %v", st.Mode, st.ModeReason, st.ModeSince, st.ModeUntil, st.Routable)
	}
	waitFor(t, "the view to see the mode", func() bool {
		st, ok := v.Get("web-1")
		return ok && st.Mode == client.ModeDraining && st.ModeUntil.Equal(until) && st.ModeSince.Equal(now)
	})
	sts, err = c.SetMode(ctx, client.ModeRequest{Group: "edge", Mode: client.ModeMaintenance})
	if err != nil || len(sts) != 2 || sts[0].Target.Name != "web-1" || sts[1].Mode != client.ModeMaintenance {
		t.Errorf("SetMode of a group: %+v, %v", sts, err)
	}

	_, err = c.SetMode(ctx, client.ModeRequest{Target: "web-1", Group: "edge", Mode: client.ModeActive})
	wantErr(t, "both target and group", err, client.ErrInvalidArgument, "SetMode", "")
	_, err = c.SetMode(ctx, client.ModeRequest{Target: "web-1"})
	wantErr(t, "no mode", err, client.ErrInvalidArgument, "SetMode", "mode")
	_, err = c.SetMode(ctx, client.ModeRequest{Target: "web-1", Mode: client.ModeDraining, Until: now.Add(-time.Minute)})
	wantErr(t, "an until in the past", err, client.ErrInvalidArgument, "SetMode", "until")
	_, err = c.SetMode(ctx, client.ModeRequest{Target: "web-9", Mode: client.ModeDraining})
	wantErr(t, "an unknown target", err, client.ErrNotFound, "SetMode", "web-9")

	removeAt, ok, err := c.Drain(ctx, "web-2", time.Minute)
	if err != nil || !ok || !removeAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("Drain: %v %v %v; want %v", removeAt, ok, err, now.Add(time.Minute))
	}
	if st, err := c.State(ctx, "web-2"); err != nil || st.Mode != client.ModeDraining || !st.RemoveTime.Equal(removeAt) {
		t.Errorf("a drained target: mode %v, remove time %v, %v", st.Mode, st.RemoveTime, err)
	}
	waitFor(t, "the view to see the drain", func() bool {
		st, ok := v.Get("web-2")
		return ok && st.RemoveTime.Equal(removeAt)
	})
	if _, ok, err := c.Drain(ctx, "web-9", time.Minute); err != nil || ok {
		t.Errorf("Drain of an unknown target: %v, %v; want false, nil", ok, err)
	}
	_, _, err = c.Drain(ctx, "web-1", 0)
	wantErr(t, "a drain of 0", err, client.ErrInvalidArgument, "RemoveTarget", "drain_for")
	if !strings.Contains(err.Error(), "Remove removes a target at once") {
		t.Errorf("a drain of 0 does not point at Remove: %v", err)
	}
	_, _, err = c.Drain(ctx, "web-1", 25*time.Hour)
	wantErr(t, "a drain past pulsed's bound", err, client.ErrInvalidArgument, "RemoveTarget", "drain_for")
	if _, err := c.State(ctx, "web-1"); err != nil {
		t.Errorf("a refused drain removed the target: %v", err)
	}
	if s := status.Code(err); s != codes.InvalidArgument {
		t.Errorf("status.Code of a refused drain: %v", s)
	}
}
