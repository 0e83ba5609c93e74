package client_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/client"
)

// TestCalls makes every call against a real server and checks the plain
// types it returns, and that errors wrap their codes.
func TestCalls(t *testing.T) {
	e := newEnv(t, 1, checker.Config{})
	c := e.client(t)
	ctx := within(t)

	st, created, err := c.Add(ctx, client.Target{
		Name: "web-1", Group: "edge",
		HTTP:     &client.HTTPProbe{URL: "http://127.0.0.1:8080/healthz", ExpectedStatus: []int{200, 204}},
		Interval: 3 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3,
		PassiveOutcomes: true,
	})
	if err != nil || !created {
		t.Fatalf("Add: created %v, %v", created, err)
	}
	want := client.Target{
		Name: "web-1", Group: "edge",
		HTTP:     &client.HTTPProbe{URL: "http://127.0.0.1:8080/healthz", ExpectedStatus: []int{200, 204}},
		Interval: 3 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3,
		InitialState: client.StateUnhealthy, Model: client.ModelRiseFall,
		PassiveOutcomes: true,
	}
	if diff := cmp.Diff(want, st.Target); diff != "" {
		t.Errorf("Add's status (-want +got):\n%s", diff)
	}
	if st.State != client.StateUnhealthy || st.Routable {
		t.Errorf("a new target is %v, routable %v; want unhealthy, not routable", st.State, st.Routable)
	}
	if _, created, err := c.Add(ctx, tcpTarget("db-1", "data", "10.0.0.1:5432")); err != nil || !created {
		t.Fatalf("Add db-1: %v %v", created, err)
	}

	e.set("http://127.0.0.1:8080/healthz", true)
	e.round(t)
	e.round(t) // rise 2
	st, err = c.State(ctx, "web-1")
	if err != nil || st.State != client.StateHealthy || !st.Routable || st.LastResult == nil || !st.LastResult.Pass {
		t.Errorf("State after a pass: %+v, %v", st, err)
	}
	if names, err := c.Healthy(ctx, ""); err != nil || !cmp.Equal(names, []string{"web-1"}) {
		t.Errorf("Healthy: %v, %v", names, err)
	}
	list, err := c.List(ctx, "")
	if err != nil || list.Revision == 0 || len(list.Targets) != 2 || list.Targets[0].Target.Name != "db-1" || len(list.Groups) != 2 {
		t.Errorf("List: %+v, %v", list, err)
	}
	g, err := c.SetGroupPolicy(ctx, "edge", client.GroupPolicy{MaxUnhealthyFraction: 0.5})
	if err != nil || g.Group != "edge" || g.Policy.MaxUnhealthyFraction != 0.5 || g.Targets != 1 {
		t.Errorf("SetGroupPolicy: %+v, %v", g, err)
	}
	counted, st, err := c.ReportOutcome(ctx, client.Outcome{Target: "web-1", OK: false, Error: "reset", Latency: time.Millisecond})
	if err != nil || !counted || st.PassiveResults != 1 {
		t.Errorf("ReportOutcome: %v %+v %v", counted, st, err)
	}
	if removed, err := c.Remove(ctx, "web-1"); err != nil || !removed {
		t.Errorf("Remove: %v %v", removed, err)
	}
	if removed, err := c.Remove(ctx, "web-1"); err != nil || removed {
		t.Errorf("Remove again: %v %v; want false, nil", removed, err)
	}

	// Errors wrap their codes.
	_, err = c.State(ctx, "web-1")
	if !errors.Is(err, client.ErrNotFound) || status.Code(err) != codes.NotFound {
		t.Errorf("State of a removed target: %v; want ErrNotFound", err)
	}
	var cerr *client.Error
	if !errors.As(err, &cerr) || cerr.Method != "State" {
		t.Errorf("State's error %#v: want a *client.Error naming the method", err)
	}
	_, _, err = c.Add(ctx, client.Target{Name: "bad", TCP: &client.TCPProbe{Address: "10.0.0.1:1"}, Rise: 5000})
	if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "target.rise") {
		t.Errorf("Add with rise 5000: %v; want ErrInvalidArgument naming target.rise", err)
	}
	_, _, err = c.ReportOutcome(ctx, client.Outcome{Target: "db-1", OK: true})
	if !errors.Is(err, client.ErrFailedPrecondition) {
		t.Errorf("ReportOutcome without passive outcomes: %v; want ErrFailedPrecondition", err)
	}
	if errors.Is(err, client.ErrNotFound) {
		t.Errorf("%v is ErrNotFound too", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.List(cctx, ""); !errors.Is(err, context.Canceled) {
		t.Errorf("List with a canceled context: %v; want context.Canceled", err)
	}
}

// TestNewRefuses checks New's refusals: each names what is wrong, and no
// connection is made.
func TestNewRefuses(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o600)
	for _, tc := range []struct {
		name  string
		addrs []string
		opts  []client.Option
		want  string
	}{
		{"no address", nil, nil, "no address"},
		{"empty address", []string{"127.0.0.1:1", " "}, nil, "empty address"},
		{"backoff min above max", []string{"127.0.0.1:1"}, []client.Option{client.WithBackoff(time.Second, time.Millisecond)}, "backoff"},
		{"backoff too long", []string{"127.0.0.1:1"}, []client.Option{client.WithBackoff(time.Second, time.Hour)}, "backoff"},
		{"idle timeout negative", []string{"127.0.0.1:1"}, []client.Option{client.WithIdleTimeout(-time.Second)}, "idle timeout"},
		{"CA without a certificate", []string{"127.0.0.1:1"}, []client.Option{client.WithTLSFiles(client.TLSFiles{CA: notPEM})}, "no PEM certificate"},
		{"cert without key", []string{"127.0.0.1:1"}, []client.Option{client.WithTLSFiles(client.TLSFiles{Cert: notPEM})}, "go together"},
		{"missing token file", []string{"127.0.0.1:1"}, []client.Option{client.WithTokenFile(filepath.Join(dir, "nope"))}, "token file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := client.New(t.Context(), tc.addrs, tc.opts...)
			if err == nil {
				c.Close()
				t.Fatalf("New succeeded; want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v; want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestToken checks that the token comes from PULSE_TOKEN by default, and
// that WithTokenFile and WithToken replace it.
func TestToken(t *testing.T) {
	f := &fakePulse{}
	addr := f.serve(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	os.WriteFile(file, []byte("  from-file \nsecond line\n"), 0o600)
	t.Setenv(client.TokenEnv, "from-env")

	for _, tc := range []struct {
		name string
		opts []client.Option
		want string
	}{
		{"environment", nil, "Bearer from-env"},
		{"file", []client.Option{client.WithTokenFile(file)}, "Bearer from-file"},
		{"option", []client.Option{client.WithToken("from-option")}, "Bearer from-option"},
		{"none", []client.Option{client.WithToken("")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := client.New(t.Context(), []string{addr}, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Healthy(within(t), ""); err != nil {
				t.Fatal(err)
			}
			if got := f.lastAuth(); got != tc.want {
				t.Errorf("authorization sent: %q; want %q", got, tc.want)
			}
		})
	}
}

// TestWithBlock: New waits for a connection, and fails with ErrUnavailable
// when none comes before ctx ends.
func TestWithBlock(t *testing.T) {
	e := newEnv(t, 1, checker.Config{})
	c, err := client.New(within(t), e.addrs, client.WithBlock(), client.WithToken(""))
	if err != nil {
		t.Fatalf("New with a live pulsed: %v", err)
	}
	c.Close()
	c.Close() // idempotent

	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := lis.Addr().String()
	lis.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if c, err := client.New(ctx, []string{closed}, client.WithBlock(), client.WithToken("")); !errors.Is(err, client.ErrUnavailable) {
		if c != nil {
			c.Close()
		}
		t.Errorf("New with nothing listening: %v; want ErrUnavailable", err)
	}
}
