package resolver_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcresolver "google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/client"
	"github.com/pulsehealth/pulse/client/resolver"
	"github.com/pulsehealth/pulse/internal/testscale"
	"github.com/pulsehealth/pulse/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// trafficService is the grpc.health.v1 service name the test's RPCs ask
// about; pulsed's probes ask about the whole server (""), so a backend is
// made unhealthy for the probes while it still answers the traffic.
const trafficService = "traffic"

// backend is a real gRPC server that counts the test's RPCs it serves.
type backend struct {
	addr   string
	health *health.Server
	served atomic.Int64
	gs     *grpc.Server
}

func newBackend(t *testing.T) *backend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{addr: lis.Addr().String(), health: health.NewServer()}
	b.health.SetServingStatus(trafficService, healthpb.HealthCheckResponse_SERVING)
	b.gs = grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if r, ok := req.(*healthpb.HealthCheckRequest); ok && r.GetService() == trafficService {
			b.served.Add(1)
		}
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(b.gs, b.health)
	go b.gs.Serve(lis)
	t.Cleanup(b.gs.Stop)
	return b
}

// setHealthy makes the backend pass or fail pulsed's probes.
func (b *backend) setHealthy(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	b.health.SetServingStatus("", st)
}

// pulsed is an in-process pulsed on loopback whose checker really probes.
type pulsed struct {
	c    *checker.Checker
	gs   *grpc.Server
	addr string
	once sync.Once
}

func startPulsed(t *testing.T) *pulsed {
	t.Helper()
	c, err := checker.New(checker.Config{Defaults: checker.Defaults{Interval: 50 * time.Millisecond, Timeout: 50 * time.Millisecond, Rise: 1, Fall: 2}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs, _ := server.NewGRPCServer(server.New(c, server.WithProgressInterval(50*time.Millisecond)), server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	go gs.Serve(lis)
	c.Start()
	p := &pulsed{c: c, gs: gs, addr: lis.Addr().String()}
	t.Cleanup(p.kill)
	return p
}

// kill stops pulsed at once: its connections drop. It is idempotent.
func (p *pulsed) kill() {
	p.once.Do(func() {
		p.gs.Stop()
		p.c.Close()
	})
}

// recorder wraps the ClientConn gRPC gives the resolver and records what
// the resolver told it, once gRPC has taken it in.
type recorder struct {
	grpcresolver.ClientConn

	mu      sync.Mutex
	updates [][]grpcresolver.Address
	errs    []error
}

func (r *recorder) UpdateState(s grpcresolver.State) error {
	err := r.ClientConn.UpdateState(s)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.updates = append(r.updates, s.Addresses)
	return err
}

func (r *recorder) ReportError(err error) {
	r.ClientConn.ReportError(err)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

// last returns the addresses of the last update, and how many errors were
// reported.
func (r *recorder) last() ([]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var addrs []string
	if n := len(r.updates); n > 0 {
		for _, a := range r.updates[n-1] {
			addrs = append(addrs, a.Addr)
		}
	}
	return addrs, len(r.errs)
}

// recordingBuilder builds the real resolver over a recorder.
type recordingBuilder struct {
	*resolver.Builder
	rec *recorder
}

func (b *recordingBuilder) Build(t grpcresolver.Target, cc grpcresolver.ClientConn, o grpcresolver.BuildOptions) (grpcresolver.Resolver, error) {
	b.rec.ClientConn = cc
	return b.Builder.Build(t, b.rec, o)
}

// within bounds a wait on real I/O.
func within(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testscale.D(20*time.Second))
	t.Cleanup(cancel)
	return ctx
}

// call sends one RPC and returns which backend served it.
func call(t *testing.T, conn *grpc.ClientConn, bs []*backend) int {
	t.Helper()
	before := make([]int64, len(bs))
	for i, b := range bs {
		before[i] = b.served.Load()
	}
	ctx, cancel := context.WithTimeout(t.Context(), testscale.D(5*time.Second))
	defer cancel()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: trafficService}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("RPC: %v", err)
	}
	for i, b := range bs {
		if b.served.Load() != before[i] {
			return i
		}
	}
	t.Fatal("no backend counted the RPC")
	return -1
}

// until sends RPCs one at a time until cond holds, failing at the deadline.
func until(t *testing.T, conn *grpc.ClientConn, bs []*backend, what string, cond func() bool) {
	t.Helper()
	ctx := within(t)
	for !cond() {
		if ctx.Err() != nil {
			t.Fatalf("timed out waiting for %s", what)
		}
		call(t, conn, bs)
	}
}

// spread sends n RPCs one at a time and returns how many each backend
// served.
func spread(t *testing.T, conn *grpc.ClientConn, bs []*backend, n int) []int {
	t.Helper()
	got := make([]int, len(bs))
	for range n {
		got[call(t, conn, bs)]++
	}
	return got
}

// TestRoundRobinFollowsPulse is the resolver end to end: a real
// grpc.ClientConn with round_robin over three real gRPC backends that a
// real (in-process) pulsed probes over grpc.health.v1.
func TestRoundRobinFollowsPulse(t *testing.T) {
	bs := []*backend{newBackend(t), newBackend(t), newBackend(t)}
	p := startPulsed(t)
	c, err := client.New(t.Context(), []string{p.addr}, client.WithToken(""), client.WithBackoff(10*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := within(t)
	for i, b := range bs {
		b.setHealthy(true)
		if _, _, err := c.Add(ctx, client.Target{Name: fmt.Sprintf("b%d", i), Group: "edge", GRPC: &client.GRPCProbe{Address: b.addr}}); err != nil {
			t.Fatal(err)
		}
	}
	rb := &recordingBuilder{Builder: resolver.NewBuilder(c), rec: &recorder{}}
	conn, err := grpc.NewClient("pulse:///edge",
		grpc.WithResolvers(rb),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"round_robin": {}}]}`),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	until(t, conn, bs, "all three backends in the resolver's list", func() bool { a, _ := rb.rec.last(); return len(a) == 3 })
	if got := spread(t, conn, bs, 30); slices.Contains(got, 0) {
		t.Fatalf("RPCs per backend %v: want traffic to all three", got)
	}

	// b1 fails its probes: once the resolver's update without it is in,
	// not one more RPC goes to it.
	bs[1].setHealthy(false)
	until(t, conn, bs, "b1 to leave the list", func() bool { a, _ := rb.rec.last(); return len(a) == 2 && !slices.Contains(a, bs[1].addr) })
	if got := spread(t, conn, bs, 30); got[1] != 0 || got[0] == 0 || got[2] == 0 {
		t.Errorf("RPCs per backend %v after b1's transition: want none to b1, some to each other", got)
	}

	// It recovers: it gets traffic again.
	bs[1].setHealthy(true)
	until(t, conn, bs, "b1 back in the list", func() bool { a, _ := rb.rec.last(); return len(a) == 3 })
	if got := spread(t, conn, bs, 30); slices.Contains(got, 0) {
		t.Errorf("RPCs per backend %v after b1 recovered: want traffic to all three", got)
	}

	// pulsed dies: the resolver reports it, and traffic goes on to the
	// last good set.
	p.kill()
	until(t, conn, bs, "the resolver to report pulsed gone", func() bool { _, errs := rb.rec.last(); return errs > 0 })
	if got := spread(t, conn, bs, 30); slices.Contains(got, 0) {
		t.Errorf("RPCs per backend %v with pulsed gone: want traffic to all three, the last good set", got)
	}
	if a, _ := rb.rec.last(); len(a) != 3 {
		t.Errorf("the resolver's last list is %v after pulsed went; want the three kept", a)
	}
}

// cutter dials loopback and can cut every connection it made, refusing
// new ones until heal.
type cutter struct {
	mu    sync.Mutex
	conns []net.Conn
	held  bool
}

func (c *cutter) dial(ctx context.Context, addr string) (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held {
		return nil, fmt.Errorf("cut by the test")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		c.conns = append(c.conns, conn)
	}
	return conn, err
}

func (c *cutter) cut(hold bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns, c.held = nil, hold
}

func (c *cutter) heal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held = false
}

// fakeCC is a resolver.ClientConn that records what it is told.
type fakeCC struct {
	grpcresolver.ClientConn
	rec recorder
}

func (f *fakeCC) UpdateState(s grpcresolver.State) error {
	f.rec.mu.Lock()
	defer f.rec.mu.Unlock()
	f.rec.updates = append(f.rec.updates, s.Addresses)
	return nil
}

func (f *fakeCC) ReportError(err error) {
	f.rec.mu.Lock()
	defer f.rec.mu.Unlock()
	f.rec.errs = append(f.rec.errs, err)
}

func (f *fakeCC) lastAddrs() []grpcresolver.Address {
	f.rec.mu.Lock()
	defer f.rec.mu.Unlock()
	if len(f.rec.updates) == 0 {
		return nil
	}
	return f.rec.updates[len(f.rec.updates)-1]
}

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

// TestAuthority builds a resolver for pulse://ADDR/GROUP (its own client)
// and checks its addresses: only the group's routable targets, with their
// info, and an update when a target's address changes.
func TestAuthority(t *testing.T) {
	bs := []*backend{newBackend(t), newBackend(t)}
	p := startPulsed(t)
	c, err := client.New(t.Context(), []string{p.addr}, client.WithToken(""))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := within(t)
	bs[0].setHealthy(true)
	bs[1].setHealthy(false)
	c.Add(ctx, client.Target{Name: "a", Group: "edge", GRPC: &client.GRPCProbe{Address: bs[0].addr}})
	c.Add(ctx, client.Target{Name: "b", Group: "edge", GRPC: &client.GRPCProbe{Address: bs[1].addr}})
	c.Add(ctx, client.Target{Name: "other", Group: "data", GRPC: &client.GRPCProbe{Address: bs[0].addr}})

	cuts := &cutter{}
	b := resolver.NewBuilder(nil, client.WithToken(""), client.WithBackoff(5*time.Millisecond, 50*time.Millisecond),
		client.WithDialOptions(grpc.WithContextDialer(cuts.dial)))
	cc := &fakeCC{}
	target := grpcresolver.Target{}
	u, _ := target.URL.Parse("pulse://" + p.addr + "/edge")
	target.URL = *u
	r, err := b.Build(target, cc, grpcresolver.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	waitFor(t, "a in the list", func() bool { return len(cc.lastAddrs()) == 1 })
	got := cc.lastAddrs()[0]
	info, ok := resolver.InfoOf(got)
	if got.Addr != bs[0].addr || !ok || info != (resolver.Info{Name: "a", Group: "edge", State: client.StateHealthy}) {
		t.Errorf("address %q with %+v (%v); want %s of a, edge, healthy", got.Addr, info, ok, bs[0].addr)
	}

	// a's spec moves to a TCP probe of another host:port: the list follows
	// (the target keeps its state across the update).
	_, port, _ := net.SplitHostPort(bs[0].addr)
	moved := net.JoinHostPort("localhost", port)
	c.Add(ctx, client.Target{Name: "a", Group: "edge", TCP: &client.TCPProbe{Address: moved}})
	waitFor(t, "a's new address", func() bool {
		a := cc.lastAddrs()
		return len(a) == 1 && a[0].Addr == moved
	})

	// pulsed unreachable: the error is reported and no list is sent; once
	// the stream is back the list is sent again, which clears the error.
	updates := func() int { cc.rec.mu.Lock(); defer cc.rec.mu.Unlock(); return len(cc.rec.updates) }
	errs := func() int { cc.rec.mu.Lock(); defer cc.rec.mu.Unlock(); return len(cc.rec.errs) }
	before := updates()
	cuts.cut(true)
	waitFor(t, "the error reported", func() bool { return errs() > 0 })
	if updates() != before {
		t.Errorf("an update was sent while pulsed was cut off")
	}
	cuts.heal()
	waitFor(t, "the list sent again", func() bool { return updates() > before })
	if a := cc.lastAddrs(); len(a) != 1 || a[0].Addr != moved {
		t.Errorf("list after the stream came back: %v; want a at %s", a, moved)
	}

	// Bad targets are refused.
	for _, bad := range []string{"pulse:///", "pulse:///a/b"} {
		u, _ := target.URL.Parse(bad)
		if _, err := b.Build(grpcresolver.Target{URL: *u}, &fakeCC{}, grpcresolver.BuildOptions{}); err == nil {
			t.Errorf("Build(%s) succeeded", bad)
		}
	}
	u, _ = target.URL.Parse("pulse:///edge")
	if _, err := b.Build(grpcresolver.Target{URL: *u}, &fakeCC{}, grpcresolver.BuildOptions{}); err == nil {
		t.Error("Build(pulse:///edge) without a client succeeded")
	}
}

// A group pulsed refuses to follow (a malformed name) fails the channel's
// RPCs with the reason, rather than leaving them waiting for addresses.
func TestRefusedGroupFailsRPCs(t *testing.T) {
	p := startPulsed(t)
	c, err := client.New(t.Context(), []string{p.addr}, client.WithToken(""))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	conn, err := grpc.NewClient("pulse:///edge group",
		grpc.WithResolvers(resolver.NewBuilder(c)),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"round_robin": {}}]}`),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = healthpb.NewHealthClient(conn).Check(within(t), &healthpb.HealthCheckRequest{Service: trafficService})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), `stopped following group "edge group"`) {
		t.Fatalf("Check = %v, want Unavailable: the resolver stopped following the group", err)
	}
}

// TestAddresses checks which address each kind of probe gives.
func TestAddresses(t *testing.T) {
	sts := []client.Status{
		{Target: client.Target{Name: "h", HTTP: &client.HTTPProbe{URL: "http://10.0.0.1/healthz"}}, State: client.StateHealthy},
		{Target: client.Target{Name: "hs", HTTP: &client.HTTPProbe{URL: "https://[::1]:8443/healthz"}}, State: client.StateSuspect},
		{Target: client.Target{Name: "t", TCP: &client.TCPProbe{Address: "10.0.0.2:5432"}}, State: client.StateHealthy},
		{Target: client.Target{Name: "g", GRPC: &client.GRPCProbe{Address: "10.0.0.3:50051"}}, State: client.StateHealthy},
		{Target: client.Target{Name: "same", TCP: &client.TCPProbe{Address: "10.0.0.2:5432"}}, State: client.StateHealthy},
		{Target: client.Target{Name: "noport", HTTP: &client.HTTPProbe{URL: "ftp://10.0.0.4/"}}, State: client.StateHealthy},
		{Target: client.Target{Name: "slow", TCP: &client.TCPProbe{Address: "10.0.0.5:80"}}, State: client.StateHealthy,
			Outlier: &client.OutlierState{Reason: "p50 38ms vs group 4ms"}},
	}
	var got []string
	for _, a := range resolver.Addresses(sts) {
		info, _ := resolver.InfoOf(a)
		s := a.Addr + " " + info.Name + " " + info.State.String()
		if o, ok := resolver.OutlierOf(a); ok {
			s += fmt.Sprintf(" outlier %d%% (%s)", o.Weight, o.Reason)
		}
		got = append(got, s)
	}
	want := []string{"10.0.0.1:80 h healthy", "[::1]:8443 hs suspect", "10.0.0.2:5432 t healthy", "10.0.0.3:50051 g healthy",
		"10.0.0.5:80 slow healthy outlier 10% (p50 38ms vs group 4ms)"}
	if !slices.Equal(got, want) {
		t.Errorf("Addresses = %q; want %q", got, want)
	}
}
