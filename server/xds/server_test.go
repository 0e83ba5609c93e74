package xds_test

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeprobe"
	"github.com/pulsehealth/pulse/checker/probe"
	"github.com/pulsehealth/pulse/internal/testscale"
	"github.com/pulsehealth/pulse/server"
	"github.com/pulsehealth/pulse/server/xds"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type env struct {
	c      *checker.Checker
	s      *xds.Server
	probes *fakeprobe.Switches
	conn   *grpc.ClientConn
}

// start serves a checker (not started: tests drive probes with round) over
// xDS on loopback, guarded by tokens when set.
func start(t testing.TB, ccfg checker.Config, cfg xds.Config, tokens *server.Tokens) *env {
	t.Helper()
	return startWith(t, ccfg, cfg, tokens, nil)
}

// startWith is start with the server's source wrapped by wrap, if set.
func startWith(t testing.TB, ccfg checker.Config, cfg xds.Config, tokens *server.Tokens, wrap func(*checker.Checker) xds.Source) *env {
	t.Helper()
	sp := fakeprobe.NewSwitches()
	ccfg.NewProber = sp.New
	if ccfg.Defaults == (checker.Defaults{}) {
		ccfg.Defaults = checker.Defaults{Interval: 2 * time.Second, Timeout: time.Second, Rise: 1, Fall: 1}
	}
	if ccfg.MaxUnhealthyFraction == 0 {
		ccfg.MaxUnhealthyFraction = 1
	}
	c, err := checker.New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	var src xds.Source = c
	if wrap != nil {
		src = wrap(c)
	}
	s, err := xds.New(src, cfg)
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	gs, _ := server.NewGRPCServer(server.New(c), server.Options{Tokens: tokens})
	s.Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		s.Close()
		gs.Stop()
		c.Close()
	})
	return &env{c: c, s: s, probes: sp, conn: conn}
}

func tcpTarget(name, group, addr string) checker.Spec {
	return checker.Spec{Name: name, Group: group, Probe: probe.Spec{TCP: &probe.TCPSpec{Address: addr}}}
}

// add registers specs; up says whether they pass their probes.
func (e *env) add(t testing.TB, up bool, specs ...checker.Spec) {
	t.Helper()
	for _, s := range specs {
		e.probes.Set(fakeprobe.Key(s.Probe), up)
		if _, _, err := e.c.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	e.sync(t)
}

func (e *env) set(key string, up bool) { e.probes.Set(key, up) }

// round probes every target once and waits for xDS to serve the results.
func (e *env) round(t testing.TB) {
	t.Helper()
	e.c.RunRound(t.Context())
	e.sync(t)
}

// sync waits until the served resources are at the checker's revision.
func (e *env) sync(t testing.TB) {
	t.Helper()
	want := e.c.Revision()
	deadline := time.Now().Add(10 * time.Second)
	for e.s.Stats().Revision < want {
		if time.Now().After(deadline) {
			t.Fatalf("xds at revision %d, checker at %d", e.s.Stats().Revision, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// sotw is a State of the World ADS stream that ACKs what it receives.
type sotw struct {
	t      testing.TB
	stream discoverypb.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	resps  chan *discoverypb.DiscoveryResponse
	errc   chan error
	last   *discoverypb.DiscoveryResponse // the last response ACKed
}

func (e *env) sotw(t testing.TB, ctx context.Context) *sotw {
	t.Helper()
	st, err := discoverypb.NewAggregatedDiscoveryServiceClient(e.conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := &sotw{t: t, stream: st, resps: make(chan *discoverypb.DiscoveryResponse, 100), errc: make(chan error, 1)}
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				s.errc <- err
				return
			}
			s.resps <- r
		}
	}()
	return s
}

func (s *sotw) request(typ string, names []string, version, nonce string) {
	s.t.Helper()
	err := s.stream.Send(&discoverypb.DiscoveryRequest{
		Node:          &corev3.Node{Id: "test"},
		TypeUrl:       typ,
		ResourceNames: names,
		VersionInfo:   version,
		ResponseNonce: nonce,
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

// next returns the next response and ACKs it.
func (s *sotw) next(names ...string) *discoverypb.DiscoveryResponse {
	s.t.Helper()
	select {
	case r := <-s.resps:
		s.request(r.GetTypeUrl(), names, r.GetVersionInfo(), r.GetNonce())
		s.last = r
		return r
	case err := <-s.errc:
		s.t.Fatalf("stream ended: %v", err)
	case <-time.After(10 * time.Second):
		s.t.Fatal("no response within 10s")
	}
	return nil
}

// subscribe changes the names watched of the last response's type; the
// server ignores a request that does not carry the last nonce.
func (s *sotw) subscribe(names ...string) {
	s.t.Helper()
	s.request(s.last.GetTypeUrl(), names, s.last.GetVersionInfo(), s.last.GetNonce())
}

// none checks that no response comes within d.
func (s *sotw) none(d time.Duration) {
	s.t.Helper()
	select {
	case r := <-s.resps:
		s.t.Fatalf("unexpected response: %v", r)
	case <-time.After(d):
	}
}

// health renders an assignment as "host:port STATUS" lines, sorted.
func health(t testing.TB, r *discoverypb.DiscoveryResponse) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, a := range r.GetResources() {
		cla := &endpointv3.ClusterLoadAssignment{}
		if err := a.UnmarshalTo(cla); err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, l := range cla.GetEndpoints() {
			if l.GetLoadBalancingWeight().GetValue() == 0 {
				t.Errorf("%s: locality without a weight: gRPC ignores it", cla.GetClusterName())
			}
			for _, ep := range l.GetLbEndpoints() {
				sa := ep.GetEndpoint().GetAddress().GetSocketAddress()
				lines = append(lines, fmt.Sprintf("%s:%d %s", sa.GetAddress(), sa.GetPortValue(), ep.GetHealthStatus()))
			}
		}
		sort.Strings(lines)
		out[cla.GetClusterName()] = strings.Join(lines, ", ")
	}
	return out
}

// Each group is an assignment listing its addressed targets with Pulse's
// verdicts; a transition is pushed to the stream watching it.
func TestSotwEndpointsFollowVerdicts(t *testing.T) {
	e := start(t, checker.Config{}, xds.Config{Coalesce: time.Millisecond}, nil)
	three := tcpTarget("web-3", "edge", "127.0.0.3:8083")
	three.Model = checker.ModelThreeState
	three.Rise, three.Fall = 2, 2
	three.InitialState = checker.StateHealthy
	e.add(t, true,
		tcpTarget("web-1", "edge", "127.0.0.1:8081"),
		checker.Spec{Name: "web-2", Group: "edge", Probe: probe.Spec{HTTP: &probe.HTTPSpec{URL: "http://127.0.0.2/healthz"}}},
		three,
		tcpTarget("api-1", "api", "127.0.0.9:9000"),
		tcpTarget("lone", "", "127.0.0.8:1"), // ungrouped: no cluster
	)
	e.round(t)

	s := e.sotw(t, t.Context())
	s.request(resourcev3.EndpointType, []string{"edge"}, "", "")
	got := health(t, s.next("edge"))
	want := "127.0.0.1:8081 HEALTHY, 127.0.0.2:80 HEALTHY, 127.0.0.3:8083 HEALTHY"
	if got["edge"] != want || len(got) != 1 {
		t.Fatalf("edge: got %v, want %s", got, want)
	}

	// web-1 fails (fall 1): unhealthy. web-3 fails once: suspect.
	// The round's two transitions are two revisions: on a loaded machine
	// the coalescing window can close between them, and a push carry the
	// first alone.
	e.set("127.0.0.1:8081", false)
	e.set("127.0.0.3:8083", false)
	e.round(t)
	want = "127.0.0.1:8081 UNHEALTHY, 127.0.0.2:80 HEALTHY, 127.0.0.3:8083 DEGRADED"
	partial := "127.0.0.1:8081 UNHEALTHY, 127.0.0.2:80 HEALTHY, 127.0.0.3:8083 HEALTHY"
	if got = health(t, s.next("edge")); got["edge"] == partial {
		got = health(t, s.next("edge"))
	}
	if got["edge"] != want {
		t.Fatalf("after failures: got %v, want %s", got, want)
	}

	e.round(t) // web-3's second failure: unhealthy
	got = health(t, s.next("edge"))
	if want := "127.0.0.1:8081 UNHEALTHY, 127.0.0.2:80 HEALTHY, 127.0.0.3:8083 UNHEALTHY"; got["edge"] != want {
		t.Fatalf("after web-3's second failure: got %v, want %s", got, want)
	}
	// A change in another group is not pushed to this stream.
	e.set("127.0.0.9:9000", false)
	e.round(t)
	if e.s.Stats().Pushes == 0 {
		t.Fatal("no pushes counted")
	}
	s.none(100 * time.Millisecond)

	// Removing a target takes it out; removing the group's last leaves no
	// assignment.
	if _, err := e.c.Remove("web-2"); err != nil {
		t.Fatal(err)
	}
	got = health(t, s.next("edge"))
	if want := "127.0.0.1:8081 UNHEALTHY, 127.0.0.3:8083 UNHEALTHY"; got["edge"] != want {
		t.Fatalf("after removing web-2: got %v, want %s", got, want)
	}
}

// A burst of transitions in one group is one push.
func TestBurstIsOnePush(t *testing.T) {
	// The window must outlast the delivery of 1,000 events to the view,
	// which takes longer on a loaded machine.
	e := start(t, checker.Config{MaxConcurrentProbes: 64}, xds.Config{Coalesce: testscale.D(time.Second)}, nil)
	const n = 1000
	var specs []checker.Spec
	for i := range n {
		specs = append(specs, tcpTarget(fmt.Sprintf("t-%04d", i), "big", fmt.Sprintf("127.0.%d.%d:80", i/250, i%250+1)))
	}
	e.add(t, true, specs...)
	e.round(t)
	s := e.sotw(t, t.Context())
	s.request(resourcev3.EndpointType, []string{"big"}, "", "")
	if got := strings.Count(health(t, s.next("big"))["big"], " HEALTHY"); got != n {
		t.Fatalf("%d healthy endpoints, want %d", got, n)
	}
	before := e.s.Stats().Pushes
	for _, sp := range specs {
		e.set(sp.Probe.TCP.Address, false)
	}
	e.round(t) // 1,000 transitions
	if got := strings.Count(health(t, s.next("big"))["big"], " UNHEALTHY"); got != n {
		t.Fatalf("%d unhealthy endpoints after the burst, want %d", got, n)
	}
	s.none(300 * time.Millisecond)
	if got := e.s.Stats().Pushes - before; got != 1 {
		t.Errorf("the burst made %d resource updates, want 1", got)
	}
}

// The four resources a proxyless gRPC client needs are served under the
// group's name, and go when the group does.
func TestGroupResources(t *testing.T) {
	e := start(t, checker.Config{}, xds.Config{Coalesce: time.Millisecond}, nil)
	e.add(t, true, tcpTarget("web-1", "edge", "127.0.0.1:8081"))
	e.round(t)
	s := e.sotw(t, t.Context())

	s.request(resourcev3.ListenerType, []string{"edge"}, "", "")
	r := s.next("edge")
	l := &listenerv3.Listener{}
	if len(r.GetResources()) != 1 || r.GetResources()[0].UnmarshalTo(l) != nil || l.GetName() != "edge" || l.GetApiListener() == nil {
		t.Fatalf("LDS: %v", r)
	}
	s.request(resourcev3.RouteType, []string{"edge"}, "", "")
	r = s.next("edge")
	rc := &routev3.RouteConfiguration{}
	if len(r.GetResources()) != 1 || r.GetResources()[0].UnmarshalTo(rc) != nil || rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster() != "edge" {
		t.Fatalf("RDS: %v", r)
	}
	s.request(resourcev3.ClusterType, nil, "", "") // wildcard, as Envoy asks
	r = s.next()
	cl := &clusterv3.Cluster{}
	if len(r.GetResources()) != 1 || r.GetResources()[0].UnmarshalTo(cl) != nil || cl.GetType() != clusterv3.Cluster_EDS || cl.GetEdsClusterConfig().GetEdsConfig().GetAds() == nil {
		t.Fatalf("CDS: %v", r)
	}

	// A new group is a new cluster: the wildcard CDS watch gets both.
	e.add(t, true, tcpTarget("api-1", "api", "127.0.0.9:9000"))
	r = s.next()
	if len(r.GetResources()) != 2 {
		t.Fatalf("CDS after adding group api: %d clusters, want 2", len(r.GetResources()))
	}
	// Its last target removed, the group's cluster goes.
	if _, err := e.c.Remove("api-1"); err != nil {
		t.Fatal(err)
	}
	r = s.next()
	if len(r.GetResources()) != 1 || r.GetResources()[0].UnmarshalTo(cl) != nil || cl.GetName() != "edge" {
		t.Fatalf("CDS after removing group api: %v", r)
	}
}

// Delta streams get only what changed, with versions that are hashes of
// the resources.
func TestDelta(t *testing.T) {
	e := start(t, checker.Config{}, xds.Config{Coalesce: time.Millisecond}, nil)
	e.add(t, true, tcpTarget("web-1", "edge", "127.0.0.1:8081"), tcpTarget("api-1", "api", "127.0.0.9:9000"))
	e.round(t)
	st, err := discoverypb.NewAggregatedDiscoveryServiceClient(e.conn).DeltaAggregatedResources(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&discoverypb.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "d"}, TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"edge", "api"}}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.GetResources()) != 2 {
		t.Fatalf("first delta response: %d resources, want 2", len(r.GetResources()))
	}
	versions := map[string]string{}
	for _, res := range r.GetResources() {
		versions[res.GetName()] = res.GetVersion()
	}
	st.Send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResponseNonce: r.GetNonce()})
	e.set("127.0.0.1:8081", false)
	e.round(t)
	r, err = st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.GetResources()) != 1 || r.GetResources()[0].GetName() != "edge" || r.GetResources()[0].GetVersion() == versions["edge"] {
		t.Fatalf("delta after web-1 failed: %v", r)
	}

	// A second stream that knows api's version (another replica gave it)
	// gets only edge.
	st2, err := discoverypb.NewAggregatedDiscoveryServiceClient(e.conn).DeltaAggregatedResources(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	st2.Send(&discoverypb.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "d2"}, TypeUrl: resourcev3.EndpointType,
		ResourceNamesSubscribe: []string{"edge", "api"}, InitialResourceVersions: map[string]string{"api": versions["api"]}})
	r, err = st2.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.GetResources()) != 1 || r.GetResources()[0].GetName() != "edge" {
		t.Fatalf("resumed delta: got %d resources, want edge alone: %v", len(r.GetResources()), r)
	}
}

// With tokens, the ADS service needs the read role; an unknown type is a
// clear error.
func TestTokensAndBadType(t *testing.T) {
	tokens, err := server.ParseTokens(strings.NewReader("read reader-token-0123456789\nwrite writer-token-0123456789\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, checker.Config{}, xds.Config{}, tokens)
	e.add(t, true, tcpTarget("web-1", "edge", "127.0.0.1:8081"))
	e.round(t)

	try := func(ctx context.Context, typ string) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		st, err := discoverypb.NewAggregatedDiscoveryServiceClient(e.conn).StreamAggregatedResources(ctx)
		if err != nil {
			return err
		}
		// A stream the server already ended fails Send with io.EOF; Recv
		// returns the status.
		st.Send(&discoverypb.DiscoveryRequest{Node: &corev3.Node{Id: "n"}, TypeUrl: typ, ResourceNames: []string{"edge"}})
		_, err = st.Recv()
		return err
	}
	if err := try(t.Context(), resourcev3.EndpointType); status.Code(err) != codes.Unauthenticated {
		t.Errorf("without a token: %v, want Unauthenticated", err)
	}
	bad := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer not-a-token-0123456789")
	if err := try(bad, resourcev3.EndpointType); status.Code(err) != codes.Unauthenticated {
		t.Errorf("with a wrong token: %v, want Unauthenticated", err)
	}
	for _, tok := range []string{"reader-token-0123456789", "writer-token-0123456789"} {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+tok)
		if err := try(ctx, resourcev3.EndpointType); err != nil {
			t.Errorf("with %s: %v", tok, err)
		}
	}
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer reader-token-0123456789")
	err = try(ctx, resourcev3.SecretType)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "type_url") {
		t.Errorf("secret type: %v, want InvalidArgument naming type_url", err)
	}
}

// Targets that share an address make one endpoint, with the worst health:
// an xDS client rejects an assignment that lists an address twice.
func TestSharedAddress(t *testing.T) {
	e := start(t, checker.Config{}, xds.Config{Coalesce: time.Millisecond}, nil)
	e.add(t, true,
		tcpTarget("tcp", "edge", "127.0.0.1:80"),
		checker.Spec{Name: "http", Group: "edge", Probe: probe.Spec{HTTP: &probe.HTTPSpec{URL: "http://127.0.0.1/healthz"}}},
	)
	e.round(t)
	e.set("http://127.0.0.1/healthz", false)
	e.round(t)
	s := e.sotw(t, t.Context())
	s.request(resourcev3.EndpointType, []string{"edge"}, "", "")
	if got := health(t, s.next("edge"))["edge"]; got != "127.0.0.1:80 UNHEALTHY" {
		t.Errorf("got %q, want one unhealthy endpoint", got)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, d := range []time.Duration{-time.Millisecond, time.Minute} {
		if _, err := xds.New(nil, xds.Config{Coalesce: d}); err == nil || !strings.HasPrefix(err.Error(), "Coalesce:") {
			t.Errorf("Coalesce %v: %v", d, err)
		}
	}
}

// Closing the checker ends the streams, so a graceful stop need not wait.
func TestCheckerCloseEndsStreams(t *testing.T) {
	e := start(t, checker.Config{}, xds.Config{}, nil)
	e.add(t, true, tcpTarget("web-1", "edge", "127.0.0.1:8081"))
	s := e.sotw(t, t.Context())
	s.request(resourcev3.EndpointType, []string{"edge"}, "", "")
	s.next("edge")
	e.c.Close()
	select {
	case <-s.errc:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end after the checker closed")
	}
}
