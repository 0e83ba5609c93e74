package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds" // gRPC's own xDS client: the resolver for xds:///
	"google.golang.org/protobuf/proto"

	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// grpcBackend is a real gRPC server on loopback: its grpc.health.v1 answers
// pulsed's probe (service "") and the client's calls (service "work",
// always SERVING), so where a call lands says which grpcBackend took it.
type grpcBackend struct {
	addr string
	hs   *health.Server
	gs   *grpc.Server
}

func startGRPCBackend(t *testing.T) *grpcBackend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &grpcBackend{addr: lis.Addr().String(), hs: health.NewServer(), gs: grpc.NewServer()}
	b.hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	b.hs.SetServingStatus("work", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(b.gs, b.hs)
	go b.gs.Serve(lis)
	t.Cleanup(b.gs.Stop)
	return b
}

// serving sets what the grpcBackend tells pulsed's probe.
func (b *grpcBackend) serving(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	b.hs.SetServingStatus("", st)
}

// spread makes n calls over conn and counts them by grpcBackend address; a
// failed call counts under "error".
func spread(t *testing.T, conn *grpc.ClientConn, n int) map[string]int {
	t.Helper()
	out := map[string]int{}
	client := healthpb.NewHealthClient(conn)
	for range n {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		var p peer.Peer
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "work"}, grpc.Peer(&p))
		cancel()
		if err != nil {
			out["error"]++
			continue
		}
		out[p.Addr.String()]++
	}
	return out
}

// await makes rounds of calls until ok says a round is what it waits for,
// and returns that round; it fails after a bound.
func await(t *testing.T, conn *grpc.ClientConn, what string, ok func(map[string]int) bool) map[string]int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := spread(t, conn, 30)
		if ok(got) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %v after 30s", what, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// allOf says a round reached exactly the wanted backends, without errors.
func allOf(want ...*grpcBackend) func(map[string]int) bool {
	return func(got map[string]int) bool {
		if len(got) != len(want) {
			return false
		}
		for _, b := range want {
			if got[b.addr] == 0 {
				return false
			}
		}
		return true
	}
}

// gRPC's own xDS client, dialing xds:///pool with a bootstrap that names
// pulsed, routes on pulsed's verdicts over three real gRPC backends: an
// unhealthy grpcBackend is dropped, a suspect one (DEGRADED) too, as gRPC
// routes only HEALTHY and UNKNOWN endpoints; a recovered one comes back;
// and while pulsed restarts, the client keeps the last set it had.
func TestXDSWithGRPCClient(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	bin := buildPulsed(t)
	b1, b2, b3 := startGRPCBackend(t), startGRPCBackend(t), startGRPCBackend(t)
	dir := t.TempDir()
	targets := filepath.Join(dir, "targets.yaml")
	yaml := fmt.Sprintf(`targets:
  - {name: b1, group: pool, grpc: {address: %q}}
  - {name: b2, group: pool, grpc: {address: %q}}
  - {name: b3, group: pool, grpc: {address: %q}, model: MODEL_THREE_STATE, fall: 1000}
`, b1.addr, b2.addr, b3.addr)
	if err := os.WriteFile(targets, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	// A fixed port (freePort, from the DNS tests) so that a restarted pulsed
	// comes back where the client's bootstrap points.
	addr := net.JoinHostPort("127.0.0.1", freePort(t))
	args := []string{"-listen", addr, "-data-dir", filepath.Join(dir, "data"), "-targets", targets, "-xds",
		"-interval", "100ms", "-timeout", "90ms", "-rise", "2", "-fall", "2", "-max-unhealthy-fraction", "1"}
	p := startPulsed(t, bin, args...)
	if p.Addr != addr {
		t.Fatalf("pulsed listens on %s, want %s", p.Addr, addr)
	}

	bootstrap := fmt.Sprintf(`{
  "xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
  "node": {"id": "xds-test"}
}`, addr)
	resolver, err := xds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("xds:///pool", grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(resolver))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	await(t, conn, "traffic reaches all three", allOf(b1, b2, b3))

	b2.serving(false)
	await(t, conn, "b2 unhealthy", allOf(b1, b3))
	// Stable: the next rounds avoid b2 too.
	if got := spread(t, conn, 60); !allOf(b1, b3)(got) {
		t.Fatalf("after b2 went: %v", got)
	}

	// b3 fails: three_state with fall 1000 makes it suspect for a good while,
	// which xDS carries as DEGRADED; gRPC does not route to it.
	b3.serving(false)
	await(t, conn, "b3 suspect (DEGRADED)", allOf(b1))
	if out, err := goTool(t, "grpcurl", "-plaintext", "-d", `{"name": "b3"}`, addr, "pulse.v1.HealthChecker/State"); err != nil || !strings.Contains(out, "STATE_SUSPECT") {
		t.Fatalf("b3 should be suspect: %v\n%s", err, out)
	}

	b2.serving(true)
	b3.serving(true)
	await(t, conn, "b2 and b3 recovered", allOf(b1, b2, b3))

	// pulsed stops: the client keeps routing to the last set.
	p.stop(t)
	if !regexp.MustCompile(`msg="xds serving"`).MatchString(p.Logs()) {
		t.Errorf("pulsed did not log xds serving:\n%s", p.Logs())
	}
	if got := spread(t, conn, 60); !allOf(b1, b2, b3)(got) {
		t.Fatalf("with pulsed down: %v", got)
	}

	// pulsed comes back on the same address with the same store: the
	// client subscribes again and follows the new verdicts.
	p = startPulsed(t, bin, args...)
	b1.serving(false)
	await(t, conn, "b1 unhealthy after the restart", allOf(b2, b3))
	p.stop(t)
}

// firstEDS opens a State of the World stream to addr, asks for group's
// assignment and returns the first one it gets, marshaled as sent.
func firstEDS(t *testing.T, addr, group string) []byte {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	st, err := discoverypb.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st.Send(&discoverypb.DiscoveryRequest{Node: &corev3.Node{Id: "replica-test"}, TypeUrl: resourcev3.EndpointType, ResourceNames: []string{group}})
	r, err := st.Recv()
	if err != nil {
		t.Fatalf("EDS from %s: %v", addr, err)
	}
	if len(r.GetResources()) != 1 {
		return nil
	}
	return r.GetResources()[0].GetValue()
}

// healthOf renders a marshaled assignment's endpoints as "addr STATUS"
// lines.
func healthOf(t *testing.T, b []byte) string {
	t.Helper()
	cla := &endpointv3.ClusterLoadAssignment{}
	if err := proto.Unmarshal(b, cla); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range cla.GetEndpoints() {
		for _, ep := range l.GetLbEndpoints() {
			sa := ep.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, fmt.Sprintf("%s:%d %s", sa.GetAddress(), sa.GetPortValue(), ep.GetHealthStatus()))
		}
	}
	return strings.Join(out, ", ")
}

// Replicas on etcd serve byte-identical resources, and a Delta client
// moving from one replica to another with the versions it has gets
// nothing until something changes.
func TestXDSOnReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	etcd := etcdtest.Start(t, time.Second)
	bin := buildPulsed(t)
	var reps [2]*pulsed
	for i := range reps {
		reps[i] = startPulsed(t, bin, "-registry", "etcd", "-etcd-endpoints", etcd.Endpoint,
			"-etcd-prefix", "/pulse-xds/", "-etcd-lease-ttl", "3s", "-replica-id", fmt.Sprintf("r%d", i+1),
			"-interval", "200ms", "-timeout", "150ms", "-rise", "1", "-fall", "1", "-xds")
	}
	bs := []*grpcBackend{startGRPCBackend(t), startGRPCBackend(t), startGRPCBackend(t)}
	client := dial(t, reps[0].Addr)
	for i, b := range bs {
		if _, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: &pb.Target{
			Name: fmt.Sprintf("b%d", i+1), Group: "pool", Probe: &pb.Target_Grpc{Grpc: &pb.GrpcProbe{Address: b.addr}},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	var same []byte
	eventually(t, "both replicas serve the same assignment, all healthy", func() bool {
		a, b := firstEDS(t, reps[0].Addr, "pool"), firstEDS(t, reps[1].Addr, "pool")
		same = a
		return a != nil && string(a) == string(b) && strings.Count(healthOf(t, a), " HEALTHY") == 3
	})

	delta := func(addr string, known map[string]string) (discoverypb.AggregatedDiscoveryService_DeltaAggregatedResourcesClient, context.CancelFunc) {
		t.Helper()
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		st, err := discoverypb.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		st.Send(&discoverypb.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "delta"}, TypeUrl: resourcev3.EndpointType,
			ResourceNamesSubscribe: []string{"pool"}, InitialResourceVersions: known})
		return st, func() { cancel(); conn.Close() }
	}
	st1, stop1 := delta(reps[0].Addr, nil)
	defer stop1()
	r, err := st1.Recv()
	if err != nil || len(r.GetResources()) != 1 {
		t.Fatalf("delta from r1: %v %v", r, err)
	}
	version := r.GetResources()[0].GetVersion()
	if string(r.GetResources()[0].GetResource().GetValue()) != string(same) {
		t.Errorf("the delta resource differs from the SotW one")
	}

	// On r2 with r1's version: nothing differs, so nothing comes ...
	st2, stop2 := delta(reps[1].Addr, map[string]string{"pool": version})
	defer stop2()
	got := make(chan *discoverypb.DeltaDiscoveryResponse, 4)
	go func() {
		for {
			r, err := st2.Recv()
			if err != nil {
				close(got)
				return
			}
			got <- r
		}
	}()
	select {
	case r := <-got:
		t.Fatalf("r2 sent what r1's version already has: %v", r)
	case <-time.After(time.Second):
	}
	// ... until a backend fails: then r2 pushes it, with the version r1
	// gives the same assignment.
	bs[1].serving(false)
	var r2 *discoverypb.DeltaDiscoveryResponse
	select {
	case r2 = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("r2 pushed nothing after b2 failed")
	}
	if h := healthOf(t, r2.GetResources()[0].GetResource().GetValue()); strings.Count(h, " UNHEALTHY") != 1 {
		t.Fatalf("r2's push: %s", h)
	}
	eventually(t, "r1 serves the same assignment, at the same version", func() bool {
		st, stop := delta(reps[0].Addr, nil)
		defer stop()
		r, err := st.Recv()
		return err == nil && len(r.GetResources()) == 1 && r.GetResources()[0].GetVersion() == r2.GetResources()[0].GetVersion()
	})
}

func TestXDSFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-xds", "-xds-coalesce", "0"}, "-xds-coalesce must be positive and at most 10s, got 0s"},
		{[]string{"-xds-coalesce", "1m"}, "-xds-coalesce must be positive and at most 10s, got 1m0s"},
		{[]string{"-xds", "-xds-max-streams", "-1"}, "-xds-max-streams and -xds-max-streams-per-source must not be negative (0: no limit), got -1 and 1000"},
		{[]string{"-xds-max-streams-per-source", "-5"}, "-xds-max-streams and -xds-max-streams-per-source must not be negative (0: no limit), got 10000 and -5"},
	} {
		var stderr strings.Builder
		if _, err := parseFlags(c.args, &stderr); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseFlags(%q): %v, want %q", c.args, err, c.want)
		}
	}
	if cfg, err := parseFlags([]string{"-xds"}, io.Discard); err != nil || !cfg.xds.enabled || cfg.xds.coalesce != 50*time.Millisecond ||
		cfg.xds.maxStreams != 10000 || cfg.xds.perSource != 1000 {
		t.Errorf("-xds: %+v, %v", cfg.xds, err)
	}
	if cfg, err := parseFlags([]string{"-xds", "-xds-max-streams", "0", "-xds-max-streams-per-source", "0"}, io.Discard); err != nil || cfg.xds.maxStreams != 0 || cfg.xds.perSource != 0 {
		t.Errorf("-xds with no stream limits: %+v, %v", cfg.xds, err)
	}
}

// pulsed refuses an ADS stream past -xds-max-streams-per-source with
// RESOURCE_EXHAUSTED naming the flag, does not send a NACKed response
// again, and counts both in /metrics.
func TestXDSLimitsAndNACKsOnTheRealBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	t.Cleanup(metricsClient.CloseIdleConnections)
	bin := buildPulsed(t)
	p := startPulsed(t, bin, "-xds", "-xds-max-streams-per-source", "2")
	m := regexp.MustCompile(`msg="http listening" .*addr=(\S+)`).FindStringSubmatch(p.Logs())
	if m == nil {
		t.Fatalf("no http address in the log:\n%s", p.Logs())
	}
	if _, err := dial(t, p.Addr).AddTarget(t.Context(), &pb.AddTargetRequest{Target: &pb.Target{
		Name: "b1", Group: "pool", Probe: &pb.Target_Grpc{Grpc: &pb.GrpcProbe{Address: startGRPCBackend(t).addr}},
	}}); err != nil {
		t.Fatal(err)
	}
	// Wait for the assignment to settle, so that no change follows the
	// NACK below; firstEDS's streams close before the test opens its own.
	eventually(t, "b1 healthy over xDS", func() bool {
		b := firstEDS(t, p.Addr, "pool")
		return b != nil && healthOf(t, b) != "" && !strings.Contains(healthOf(t, b), "UNHEALTHY")
	})
	eventually(t, "firstEDS's streams closed", func() bool { return strings.Contains(metrics(t, m[1]), "pulse_xds_streams 0") })
	conn, err := grpc.NewClient(p.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	open := func() (discoverypb.AggregatedDiscoveryService_StreamAggregatedResourcesClient, *discoverypb.DiscoveryResponse, error) {
		st, err := discoverypb.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err != nil {
			return nil, nil, err
		}
		st.Send(&discoverypb.DiscoveryRequest{Node: &corev3.Node{Id: "limits"}, TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"pool"}})
		r, err := st.Recv()
		return st, r, err
	}
	st, r, err := open()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := open(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := open(); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "-xds-max-streams-per-source") {
		t.Fatalf("a third stream from 127.0.0.1: %v, want ResourceExhausted naming -xds-max-streams-per-source", err)
	}
	// NACK the first response: nothing comes back until a change.
	st.Send(&discoverypb.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"pool"},
		ResponseNonce: r.GetNonce(), ErrorDetail: &statuspb.Status{Code: int32(codes.InvalidArgument), Message: "rejected by the test"}})
	want := fmt.Sprintf(`pulse_xds_nacks_total{type_url=%q} 1`, resourcev3.EndpointType)
	eventually(t, "the NACK counted", func() bool { return strings.Contains(metrics(t, m[1]), want) })
	if got := metrics(t, m[1]); !strings.Contains(got, `pulse_xds_streams_refused_total{limit="per_source"} 1`) || !strings.Contains(got, `pulse_xds_streams 2`) {
		t.Errorf("/metrics:\n%s", grep(got, "pulse_xds"))
	}
	got := make(chan *discoverypb.DiscoveryResponse, 1)
	go func() {
		if r, err := st.Recv(); err == nil {
			got <- r
		}
	}()
	select {
	case r := <-got:
		t.Fatalf("sent again after its NACK: version %s", r.GetVersionInfo())
	case <-time.After(500 * time.Millisecond):
	}
	if !strings.Contains(p.Logs(), "rejected a response (NACK)") || !strings.Contains(p.Logs(), "rejected by the test") {
		t.Errorf("the NACK was not logged:\n%s", p.Logs())
	}
	cancel()
	p.stop(t)
}
