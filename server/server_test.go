package server_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeprobe"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type env struct {
	c      *checker.Checker
	client pb.HealthCheckerClient
	conn   *grpc.ClientConn
	probes *fakeprobe.Switches
	logs   *syncBuffer
	health *server.Health
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start serves a checker over bufconn and returns a generated client. The
// checker is not started: tests drive probes with RunRound.
func start(t *testing.T, cfg checker.Config, opts ...server.Option) *env {
	t.Helper()
	return startWith(t, cfg, server.Options{}, opts...)
}

// startWith is start with server options.
func startWith(t *testing.T, cfg checker.Config, sopts server.Options, opts ...server.Option) *env {
	t.Helper()
	sp := fakeprobe.NewSwitches()
	cfg.NewProber = sp.New
	if cfg.Defaults == (checker.Defaults{}) {
		cfg.Defaults = checker.Defaults{Interval: 2 * time.Second, Timeout: time.Second, Rise: 1, Fall: 1}
	}
	c, err := checker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	sopts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})) // calls are logged at debug
	gs, hs := server.NewGRPCServer(server.New(c, opts...), sopts)
	conn := serveBufconn(t, gs, c)
	return &env{c: c, client: pb.NewHealthCheckerClient(conn), conn: conn, probes: sp, logs: logs, health: hs}
}

// serveBufconn serves gs over bufconn and returns a client connection to
// it; cleanup closes the connection, then c (which ends watch streams, so
// GracefulStop can finish), then the server.
func serveBufconn(t *testing.T, gs *grpc.Server, c *checker.Checker) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	go gs.Serve(lis)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		c.Close()
		gs.GracefulStop()
	})
	return conn
}

func (e *env) set(addr string, up bool) { e.probes.Set(addr, up) }

func tcpTarget(name, group string) *pb.Target {
	return &pb.Target{Name: name, Group: group, Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: name + ":80"}}}
}

func (e *env) add(t *testing.T, tg *pb.Target) *pb.AddTargetResponse {
	t.Helper()
	resp, err := e.client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tg})
	if err != nil {
		t.Fatalf("AddTarget(%s): %v", tg.GetName(), err)
	}
	return resp
}

func wantCode(t *testing.T, err error, code codes.Code, msgPrefix string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code || !strings.HasPrefix(st.Message(), msgPrefix) {
		t.Errorf("got %v %q, want %v starting %q", st.Code(), st.Message(), code, msgPrefix)
	}
}

func TestAddTargetCreatesThenUpdatesWithDefaults(t *testing.T) {
	e := start(t, checker.Config{Defaults: checker.StandardDefaults()})
	resp := e.add(t, tcpTarget("web-1", "edge"))
	want := &pb.AddTargetResponse{
		Created: true,
		Status: &pb.TargetStatus{
			Spec: &pb.Target{
				Name: "web-1", Group: "edge",
				Probe:        &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "web-1:80"}},
				Interval:     durationpb.New(2 * time.Second),
				Timeout:      durationpb.New(time.Second),
				Rise:         proto.Int32(2),
				Fall:         proto.Int32(3),
				InitialState: pb.State_STATE_UNHEALTHY,
				Model:        pb.Model_MODEL_RISE_FALL,
			},
			State:         pb.State_STATE_UNHEALTHY,
			Verdict:       pb.State_STATE_UNHEALTHY,
			ProbeInterval: durationpb.New(2 * time.Second),
			Source:        "api",
			Mode:          pb.Mode_MODE_ACTIVE,
		},
	}
	if diff := cmp.Diff(want, resp, protocmp.Transform(), protocmp.IgnoreFields(&pb.TargetStatus{}, "next_probe_time")); diff != "" {
		t.Errorf("AddTarget (-want +got):\n%s", diff)
	}
	tg := tcpTarget("web-1", "edge")
	tg.Rise = proto.Int32(4)
	if resp := e.add(t, tg); resp.GetCreated() || resp.GetStatus().GetSpec().GetRise() != 4 {
		t.Errorf("second AddTarget: created %v, rise %d; want an update to rise 4", resp.GetCreated(), resp.GetStatus().GetSpec().GetRise())
	}
}

func TestInvalidRequestsNameTheField(t *testing.T) {
	e := start(t, checker.Config{})
	withTarget := func(edit func(*pb.Target)) *pb.AddTargetRequest {
		tg := tcpTarget("web-1", "")
		edit(tg)
		return &pb.AddTargetRequest{Target: tg}
	}
	httpURL := func(u string) func(*pb.Target) {
		return func(tg *pb.Target) { tg.Probe = &pb.Target_Http{Http: &pb.HttpProbe{Url: u}} }
	}
	adds := []struct {
		req    *pb.AddTargetRequest
		prefix string
	}{
		{&pb.AddTargetRequest{}, "target: is required"},
		{withTarget(func(tg *pb.Target) { tg.Name = "" }), "target.name: is required"},
		{withTarget(func(tg *pb.Target) { tg.Name = "web 1" }), "target.name: may contain only"},
		{withTarget(func(tg *pb.Target) { tg.Group = "a/b" }), "target.group: may contain only"},
		{withTarget(func(tg *pb.Target) { tg.Rise = proto.Int32(0) }), "target.rise: must be at least 1, got 0"},
		{withTarget(func(tg *pb.Target) { tg.Fall = proto.Int32(-1) }), "target.fall: must be at least 1, got -1"},
		{withTarget(func(tg *pb.Target) { tg.Interval = durationpb.New(0) }), "target.interval: must be positive"},
		{withTarget(func(tg *pb.Target) { tg.Timeout = durationpb.New(3 * time.Second) }), "target.timeout: must be at most the interval (2s), got 3s"},
		{withTarget(func(tg *pb.Target) { tg.Timeout = &durationpb.Duration{Seconds: 1, Nanos: -1} }), "target.timeout: is not a valid duration"},
		{withTarget(func(tg *pb.Target) { tg.MaxLatency = durationpb.New(5 * time.Second) }), "target.max_latency: must be at most the timeout"},
		{withTarget(func(tg *pb.Target) { tg.InitialState = pb.State_STATE_SUSPECT }), "target.initial_state:"},
		{withTarget(func(tg *pb.Target) { tg.Model = pb.Model(9) }), "target.model:"},
		{withTarget(func(tg *pb.Target) { tg.Probe = nil }), "target.probe:"},
		{withTarget(func(tg *pb.Target) { tg.Probe = &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "no-port"}} }), "target.tcp.address:"},
		{withTarget(func(tg *pb.Target) { tg.Probe = &pb.Target_Grpc{Grpc: &pb.GrpcProbe{Address: "h:99999"}} }), "target.grpc.address:"},
		{withTarget(httpURL("ftp://example/x")), "target.http.url:"},
		{withTarget(httpURL("/healthz")), "target.http.url:"},
		{withTarget(httpURL("http://[::1")), "target.http.url:"},
	}
	for _, tt := range adds {
		_, err := e.client.AddTarget(t.Context(), tt.req)
		wantCode(t, err, codes.InvalidArgument, tt.prefix)
	}
	_, err := e.client.State(t.Context(), &pb.StateRequest{})
	wantCode(t, err, codes.InvalidArgument, "name: is required")
	_, err = e.client.RemoveTarget(t.Context(), &pb.RemoveTargetRequest{Name: "bad name"})
	wantCode(t, err, codes.InvalidArgument, "name: may contain only")
	_, err = e.client.Healthy(t.Context(), &pb.HealthyRequest{Group: "-x"})
	wantCode(t, err, codes.InvalidArgument, "group: must start with")
	_, err = e.client.ListTargets(t.Context(), &pb.ListTargetsRequest{Group: strings.Repeat("g", 65)})
	wantCode(t, err, codes.InvalidArgument, "group: must be at most 64")
	w, err := e.client.WatchTransitions(t.Context(), &pb.WatchTransitionsRequest{Names: []string{"ok", "not ok"}})
	if err == nil {
		_, err = w.Recv()
	}
	wantCode(t, err, codes.InvalidArgument, "names[1]: may contain only")
	many := make([]string, server.MaxWatchNames+1)
	for i := range many {
		many[i] = fmt.Sprintf("t-%d", i)
	}
	w, err = e.client.WatchTransitions(t.Context(), &pb.WatchTransitionsRequest{Names: many})
	if err == nil {
		_, err = w.Recv()
	}
	wantCode(t, err, codes.InvalidArgument, fmt.Sprintf("names: must list at most %d targets, got %d", server.MaxWatchNames, server.MaxWatchNames+1))

	if l, _ := e.client.ListTargets(t.Context(), &pb.ListTargetsRequest{}); len(l.GetTargets()) != 0 {
		t.Errorf("invalid requests registered %d targets", len(l.GetTargets()))
	}
}

func TestRemoveStateNotFound(t *testing.T) {
	e := start(t, checker.Config{})
	resp, err := e.client.RemoveTarget(t.Context(), &pb.RemoveTargetRequest{Name: "nope"})
	if err != nil || resp.GetRemoved() {
		t.Errorf("RemoveTarget(unknown) = %v, %v; want removed false", resp, err)
	}
	_, err = e.client.State(t.Context(), &pb.StateRequest{Name: "nope"})
	wantCode(t, err, codes.NotFound, `unknown target "nope"`)

	e.add(t, tcpTarget("web-1", ""))
	if resp, err := e.client.RemoveTarget(t.Context(), &pb.RemoveTargetRequest{Name: "web-1"}); err != nil || !resp.GetRemoved() {
		t.Errorf("RemoveTarget(web-1) = %v, %v", resp, err)
	}
	_, err = e.client.State(t.Context(), &pb.StateRequest{Name: "web-1"})
	wantCode(t, err, codes.NotFound, `unknown target "web-1"`)
}

func TestStateHealthyAndList(t *testing.T) {
	e := start(t, checker.Config{})
	e.add(t, tcpTarget("web-2", "edge"))
	e.add(t, tcpTarget("web-1", "edge"))
	e.add(t, tcpTarget("db-1", "data"))
	e.set("web-1:80", true)
	e.set("web-2:80", true)
	e.c.RunRound(t.Context())

	h, err := e.client.Healthy(t.Context(), &pb.HealthyRequest{})
	if err != nil || !cmp.Equal(h.GetNames(), []string{"web-1", "web-2"}) {
		t.Errorf("Healthy = %v, %v", h.GetNames(), err)
	}
	h, _ = e.client.Healthy(t.Context(), &pb.HealthyRequest{Group: "data"})
	if len(h.GetNames()) != 0 {
		t.Errorf("Healthy(data) = %v, want none", h.GetNames())
	}
	st, err := e.client.State(t.Context(), &pb.StateRequest{Name: "db-1"})
	if err != nil {
		t.Fatal(err)
	}
	s := st.GetStatus()
	if s.GetState() != pb.State_STATE_UNHEALTHY || s.GetFailStreak() != 1 || s.GetLastResult().GetError() != "connection refused" ||
		s.GetLastResult().GetPass() || s.GetLastResult().GetTime() == nil || s.GetLastTransitionTime() != nil {
		t.Errorf("State(db-1) = %v", s)
	}
	st, _ = e.client.State(t.Context(), &pb.StateRequest{Name: "web-1"})
	if s := st.GetStatus(); !s.GetRoutable() || s.GetPassStreak() != 1 || s.GetLastTransitionTime() == nil {
		t.Errorf("State(web-1) = %v", s)
	}
	l, _ := e.client.ListTargets(t.Context(), &pb.ListTargetsRequest{})
	var names []string
	for _, s := range l.GetTargets() {
		names = append(names, s.GetSpec().GetName())
	}
	if !cmp.Equal(names, []string{"db-1", "web-1", "web-2"}) {
		t.Errorf("ListTargets order %v", names)
	}
	l, _ = e.client.ListTargets(t.Context(), &pb.ListTargetsRequest{Group: "edge"})
	if len(l.GetTargets()) != 2 {
		t.Errorf("ListTargets(edge) has %d targets", len(l.GetTargets()))
	}
}

func TestHealthAndReflection(t *testing.T) {
	e := start(t, checker.Config{})
	hc := healthpb.NewHealthClient(e.conn)
	for _, svc := range []string{"", "pulse.v1.HealthChecker"} {
		resp, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health Check(%q) = %v, %v", svc, resp, err)
		}
	}
	rc, err := reflectionpb.NewServerReflectionClient(e.conn).ServerReflectionInfo(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := rc.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var services []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		services = append(services, s.GetName())
	}
	if !strings.Contains(strings.Join(services, " "), "pulse.v1.HealthChecker") {
		t.Errorf("reflection lists %v", services)
	}
	rc.CloseSend()
	if _, err := rc.Recv(); err != io.EOF {
		t.Errorf("reflection stream end: %v", err)
	}
}

// panicky answers health checks by panicking.
type panicky struct {
	healthpb.UnimplementedHealthServer
}

func (panicky) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	panic("boom")
}

func TestHandlerPanicBecomesInternal(t *testing.T) {
	unary, stream := server.Interceptors(nilLogger(), checker.StandardDefaults())
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...))
	healthpb.RegisterHealthServer(gs, panicky{})
	lis := bufconn.Listen(1 << 16)
	go gs.Serve(lis)
	defer gs.Stop()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for range 2 { // the server lives on after the first panic
		_, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
		wantCode(t, err, codes.Internal, "internal error")
		if strings.Contains(status.Convert(err).Message(), "boom") {
			t.Errorf("panic value leaked to the client: %v", err)
		}
	}
}

func nilLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestAPICallsAreLoggedHealthChecksAreNot(t *testing.T) {
	e := start(t, checker.Config{})
	e.add(t, tcpTarget("web-1", ""))
	_, err := e.client.State(t.Context(), &pb.StateRequest{Name: "nope"})
	wantCode(t, err, codes.NotFound, "unknown target")
	if _, err := healthpb.NewHealthClient(e.conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	logs := e.logs.String()
	for _, want := range []string{"grpc.method=AddTarget", "grpc.code=OK", "grpc.method=State", "grpc.code=NotFound"} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, "grpc.health.v1") {
		t.Errorf("health checks were logged:\n%s", logs)
	}
}
