package client_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeprobe"
	"github.com/pulsehealth/pulse/client"
	"github.com/pulsehealth/pulse/internal/testscale"
	"github.com/pulsehealth/pulse/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is one checker served by one or more gRPC servers on loopback: the
// servers share the checker, hence its revisions, as replicas on etcd do.
// The checker is not started: tests drive probes with round.
type env struct {
	c       *checker.Checker
	probers *fakeprobe.Switches
	servers []*grpc.Server
	addrs   []string
	cuts    *cutter
}

// newEnv starts a checker and n servers of it.
func newEnv(t *testing.T, n int, cfg checker.Config, opts ...server.Option) *env {
	t.Helper()
	return newEnvTB(t, n, cfg, opts...)
}

// newEnvB is newEnv with one server, for a benchmark.
func newEnvB(b *testing.B, cfg checker.Config) *env { return newEnvTB(b, 1, cfg) }

func newEnvTB(t testing.TB, n int, cfg checker.Config, opts ...server.Option) *env {
	t.Helper()
	sp := fakeprobe.NewSwitches()
	cfg.NewProber = sp.New
	if cfg.Defaults == (checker.Defaults{}) {
		cfg.Defaults = checker.Defaults{Interval: time.Hour, Timeout: time.Second, Rise: 1, Fall: 1}
	}
	c, err := checker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{c: c, probers: sp, cuts: &cutter{conns: map[net.Conn]bool{}}}
	for range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gs, _ := server.NewGRPCServer(server.New(c, opts...), server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		go gs.Serve(lis)
		e.servers = append(e.servers, gs)
		e.addrs = append(e.addrs, lis.Addr().String())
	}
	t.Cleanup(func() {
		c.Close() // ends the watch streams, so that GracefulStop can finish
		for _, gs := range e.servers {
			gs.GracefulStop()
		}
	})
	return e
}

// client returns a client of the env's servers, through its cutter, with
// short backoffs.
func (e *env) client(t *testing.T, opts ...client.Option) *client.Client {
	t.Helper()
	opts = append([]client.Option{
		client.WithToken(""),
		client.WithBackoff(5*time.Millisecond, 50*time.Millisecond),
		client.WithDialOptions(grpc.WithContextDialer(e.cuts.dial)),
	}, opts...)
	c, err := client.New(t.Context(), e.addrs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// set turns a target's probe (keyed by its address) up or down; round
// then probes every target once.
func (e *env) set(addr string, up bool) { e.probers.Set(addr, up) }

func (e *env) round(t *testing.T) { e.c.RunRound(t.Context()) }

// cutter dials loopback and can cut every connection it made, and refuse
// new ones while it is held cut.
type cutter struct {
	mu    sync.Mutex // protects the fields below
	conns map[net.Conn]bool
	held  bool
}

func (c *cutter) dial(ctx context.Context, addr string) (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held {
		return nil, errors.New("cut by the test")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c.conns[conn] = true
	return conn, nil
}

// cut closes every connection; with hold, it refuses new ones until heal.
func (c *cutter) cut(hold bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for conn := range c.conns {
		conn.Close()
	}
	clear(c.conns)
	c.held = hold
}

func (c *cutter) heal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held = false
}

// within bounds a wait on real I/O.
func within(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testscale.D(20*time.Second))
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds, failing the test at the deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx := within(t)
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func tcpTarget(name, group, addr string) client.Target {
	return client.Target{Name: name, Group: group, TCP: &client.TCPProbe{Address: addr}}
}
