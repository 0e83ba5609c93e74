package xds_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server/xds"
)

// nack rejects the last response received.
func (s *sotw) nack(r *discoverypb.DiscoveryResponse, names []string, detail string) {
	s.t.Helper()
	err := s.stream.Send(&discoverypb.DiscoveryRequest{
		TypeUrl:       r.GetTypeUrl(),
		ResourceNames: names,
		VersionInfo:   "", // it never accepted a response
		ResponseNonce: r.GetNonce(),
		ErrorDetail:   &statuspb.Status{Code: int32(codes.InvalidArgument), Message: detail},
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

// recv returns the next response without answering it.
func (s *sotw) recv() *discoverypb.DiscoveryResponse {
	s.t.Helper()
	select {
	case r := <-s.resps:
		return r
	case err := <-s.errc:
		s.t.Fatalf("stream ended: %v", err)
	case <-time.After(10 * time.Second):
		s.t.Fatal("no response within 10s")
	}
	return nil
}

// A client that NACKs every response (and never ACKs one, so its
// version_info stays empty) is not sent the rejected version again: each
// response it gets is a new version, one per change of its resources.
// Before, the NACK's empty version made the cache answer it at once with
// the same version, in a loop.
func TestNACKIsNotResent(t *testing.T) {
	var logs lockedBuffer
	e := start(t, checker.Config{}, xds.Config{Coalesce: time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, nil)
	e.add(t, true, tcpTarget("web-1", "edge", "127.0.0.1:8081"), tcpTarget("web-2", "edge", "127.0.0.2:8082"))
	e.round(t)
	s := e.sotw(t, t.Context())
	edge := []string{"edge"}
	s.request(resourcev3.EndpointType, edge, "", "")
	r := s.recv()
	seen := map[string]bool{r.GetVersionInfo(): true}
	const changes = 20
	detail := strings.Repeat("x", 1<<20) // a client's detail is logged clipped
	for i := range changes {
		s.nack(r, edge, detail)
		if i == 0 {
			// A barrier: the server handles a stream's requests in order,
			// so once the cluster's response is here the NACK was handled
			// too, before the change below (the old server answered it
			// then, with the version rejected).
			s.request(resourcev3.ClusterType, nil, "", "")
			if c := s.recv(); c.GetTypeUrl() != resourcev3.ClusterType {
				t.Fatalf("after the NACK of version %s, got %s version %s, want the cluster", r.GetVersionInfo(), c.GetTypeUrl(), c.GetVersionInfo())
			}
		}
		e.set("127.0.0.1:8081", i%2 == 1) // web-1 fails, recovers, ...
		e.round(t)
		r = s.recv()
		if r.GetTypeUrl() != resourcev3.EndpointType || seen[r.GetVersionInfo()] {
			t.Fatalf("change %d: got %s version %s again after its NACK (versions sent: %v)", i, r.GetTypeUrl(), r.GetVersionInfo(), seen)
		}
		seen[r.GetVersionInfo()] = true
		want := "127.0.0.1:8081 UNHEALTHY, 127.0.0.2:8082 HEALTHY"
		if i%2 == 1 {
			want = "127.0.0.1:8081 HEALTHY, 127.0.0.2:8082 HEALTHY"
		}
		if got := health(t, r)["edge"]; got != want {
			t.Fatalf("change %d: %s, want %s", i, got, want)
		}
	}
	s.nack(r, edge, detail)
	// Rejecting the same response again, and asking again with its nonce,
	// bring nothing either.
	s.nack(r, edge, detail)
	s.request(resourcev3.EndpointType, edge, "", r.GetNonce())
	deadline := time.Now().Add(10 * time.Second)
	for e.s.Stats().NACKs[resourcev3.EndpointType] != changes+1 {
		if time.Now().After(deadline) {
			t.Fatalf("NACKs counted: %v, want %d of %s", e.s.Stats().NACKs, changes+1, resourcev3.EndpointType)
		}
		time.Sleep(time.Millisecond)
	}
	s.none(100 * time.Millisecond)

	out := logs.String()
	if !strings.Contains(out, "rejected a response (NACK)") || !strings.Contains(out, "... (1048576 bytes)") {
		t.Errorf("the NACK was not logged with its detail clipped:\n%.2000s", out)
	}
	if len(out) > 8<<10 {
		t.Errorf("%d bytes of logs for %d NACKs: not clipped or not rate-limited", len(out), changes+1)
	}
}

// An unknown type's error names the type_url, clipped.
func TestHugeTypeURLIsClipped(t *testing.T) {
	e := start(t, checker.Config{}, xds.Config{}, nil)
	huge := "type.googleapis.com/" + strings.Repeat("x", 1<<20)
	for _, delta := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		var err error
		client := discoverypb.NewAggregatedDiscoveryServiceClient(e.conn)
		if delta {
			st, _ := client.DeltaAggregatedResources(ctx)
			st.Send(&discoverypb.DeltaDiscoveryRequest{Node: &corev3.Node{Id: huge}, TypeUrl: huge})
			_, err = st.Recv()
		} else {
			st, _ := client.StreamAggregatedResources(ctx)
			st.Send(&discoverypb.DiscoveryRequest{Node: &corev3.Node{Id: huge}, TypeUrl: huge})
			_, err = st.Recv()
		}
		cancel()
		msg := status.Convert(err).Message()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(msg, "type_url") || !strings.Contains(msg, fmt.Sprintf("... (%d bytes)", len(huge))) || len(msg) > 1024 {
			t.Errorf("delta %v: %v: %.300s (%d bytes), want InvalidArgument naming type_url, clipped", delta, status.Code(err), msg, len(msg))
		}
	}
}

// A Delta stream's subscriptions add up, request after request: past
// MaxSubscribed names of one type the stream is ended with
// INVALID_ARGUMENT naming the bound, and so is one that subscribes to a
// name longer than MaxNameBytes. Unsubscribing makes room; the wildcard
// counts for nothing.
func TestDeltaSubscriptionsAreBounded(t *testing.T) {
	e := start(t, checker.Config{}, xds.Config{}, nil)
	client := discoverypb.NewAggregatedDiscoveryServiceClient(e.conn)
	names := func(from, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("group-%d", from+i)
		}
		return out
	}
	// refusal sends reqs on a new Delta stream and returns the error it
	// ends with.
	refusal := func(reqs ...*discoverypb.DeltaDiscoveryRequest) error {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		st, err := client.DeltaAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range reqs {
			r.Node, r.TypeUrl = &corev3.Node{Id: "n"}, resourcev3.EndpointType
			if err := st.Send(r); err != nil {
				break // the stream ended: Recv says why
			}
		}
		for {
			if _, err := st.Recv(); err != nil {
				return err
			}
		}
	}

	var reqs []*discoverypb.DeltaDiscoveryRequest
	for k := range xds.MaxSubscribed / 1000 {
		reqs = append(reqs, &discoverypb.DeltaDiscoveryRequest{ResourceNamesSubscribe: names(k*1000, 1000)})
	}
	// At the bound: one name out, the wildcard and one name in.
	reqs = append(reqs, &discoverypb.DeltaDiscoveryRequest{ResourceNamesUnsubscribe: names(0, 1), ResourceNamesSubscribe: append([]string{"*"}, names(xds.MaxSubscribed, 1)...)})
	// Past it.
	reqs = append(reqs, &discoverypb.DeltaDiscoveryRequest{ResourceNamesSubscribe: names(xds.MaxSubscribed+1, 4)})
	err := refusal(reqs...)
	want := fmt.Sprintf(`xds: resource_names_subscribe: a stream may subscribe to at most %d names of %s, got %d; subscribe to the wildcard "*" instead`, xds.MaxSubscribed, resourcev3.EndpointType, xds.MaxSubscribed+4)
	if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != want {
		t.Errorf("a stream past the bound: %v, want InvalidArgument %q", err, want)
	}

	long := strings.Repeat("g", xds.MaxNameBytes+1)
	err = refusal(&discoverypb.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"edge", long}})
	want = fmt.Sprintf(`xds: resource_names_subscribe[1]: must be at most %d bytes, got "%s... (%d bytes)"`, xds.MaxNameBytes, strings.Repeat("g", 100), len(long))
	if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != want {
		t.Errorf("a name of %d bytes: %v, want InvalidArgument %q", len(long), err, want)
	}
	e.waitStreams(t, 0)
}

// A State of the World request names at most MaxSubscribed resources of
// a type, each at most MaxNameBytes; past either the stream ends with
// INVALID_ARGUMENT naming the bound. At the bound it is served.
func TestStateOfTheWorldNamesAreBounded(t *testing.T) {
	e := start(t, checker.Config{}, xds.Config{}, nil)
	client := discoverypb.NewAggregatedDiscoveryServiceClient(e.conn)
	names := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("group-%d", i)
		}
		return out
	}
	// ask sends one request on a new stream and returns its first answer
	// or the error the stream ends with.
	ask := func(names ...string) error {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		st, err := client.StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&discoverypb.DiscoveryRequest{Node: &corev3.Node{Id: "n"}, TypeUrl: resourcev3.EndpointType, ResourceNames: names}); err != nil {
			t.Fatal(err)
		}
		_, err = st.Recv()
		return err
	}
	if err := ask(names(xds.MaxSubscribed)...); err != nil {
		t.Errorf("a request of %d names: %v, want an answer", xds.MaxSubscribed, err)
	}
	err := ask(names(xds.MaxSubscribed + 1)...)
	want := fmt.Sprintf(`xds: resource_names: a stream may subscribe to at most %d names of %s, got %d; subscribe to every resource (no names) instead`, xds.MaxSubscribed, resourcev3.EndpointType, xds.MaxSubscribed+1)
	if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != want {
		t.Errorf("a request past the bound: %v, want InvalidArgument %q", err, want)
	}
	long := strings.Repeat("g", xds.MaxNameBytes+1)
	err = ask("edge", long)
	want = fmt.Sprintf(`xds: resource_names[1]: must be at most %d bytes, got "%s... (%d bytes)"`, xds.MaxNameBytes, strings.Repeat("g", 100), len(long))
	if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != want {
		t.Errorf("a name of %d bytes: %v, want InvalidArgument %q", len(long), err, want)
	}
	e.waitStreams(t, 0)
}

// open opens a State of the World stream on conn and waits for its first
// response, so that the server has admitted it.
func open(t *testing.T, ctx context.Context, conn *grpc.ClientConn) error {
	t.Helper()
	st, err := discoverypb.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	st.Send(&discoverypb.DiscoveryRequest{Node: &corev3.Node{Id: "n"}, TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"edge"}})
	_, err = st.Recv()
	return err
}

// waitStreams polls until the server counts n streams.
func (e *env) waitStreams(t *testing.T, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.s.Stats().Streams != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d streams open, want %d", e.s.Stats().Streams, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// Past MaxStreams, a stream (State of the World or Delta) is refused with
// RESOURCE_EXHAUSTED naming the flag and the bound; one closing makes
// room.
func TestMaxStreams(t *testing.T) {
	e := start(t, checker.Config{}, xds.Config{MaxStreams: 3}, nil)
	e.add(t, true, tcpTarget("web-1", "edge", "127.0.0.1:8081"))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	first, cancelFirst := context.WithCancel(ctx)
	if err := open(t, first, e.conn); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := open(t, ctx, e.conn); err != nil {
			t.Fatal(err)
		}
	}
	err := open(t, ctx, e.conn)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "3 ADS streams open, the most pulsed's -xds-max-streams allows") {
		t.Fatalf("a fourth stream: %v, want ResourceExhausted naming -xds-max-streams and 3", err)
	}
	st, _ := discoverypb.NewAggregatedDiscoveryServiceClient(e.conn).DeltaAggregatedResources(ctx)
	if _, err := st.Recv(); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "-xds-max-streams") {
		t.Fatalf("a fourth stream, delta: %v, want ResourceExhausted naming -xds-max-streams", err)
	}
	if got := e.s.Stats(); got.RefusedTotal != 2 || got.Streams != 3 {
		t.Errorf("refused %d, open %d; want 2 and 3", got.RefusedTotal, got.Streams)
	}
	cancelFirst()
	e.waitStreams(t, 2)
	if err := open(t, ctx, e.conn); err != nil {
		t.Fatalf("a stream after one closed: %v", err)
	}
}

// dialFrom connects to addr from the local address ip.
func dialFrom(t *testing.T, addr, ip string) *grpc.ClientConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// Past MaxStreamsPerSource, a stream from that IP address is refused with
// RESOURCE_EXHAUSTED naming the flag and the bound, over any connection;
// another address is not.
func TestMaxStreamsPerSource(t *testing.T) {
	e := start(t, checker.Config{}, xds.Config{MaxStreamsPerSource: 2}, nil)
	e.add(t, true, tcpTarget("web-1", "edge", "127.0.0.1:8081"))
	addr := e.conn.Target()
	one, two := dialFrom(t, addr, "127.0.0.1"), dialFrom(t, addr, "127.0.0.1")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for _, c := range []*grpc.ClientConn{one, two} {
		if err := open(t, ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	err := open(t, ctx, dialFrom(t, addr, "127.0.0.1"))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "2 ADS streams open from 127.0.0.1, the most pulsed's -xds-max-streams-per-source allows") {
		t.Fatalf("a third stream from 127.0.0.1: %v, want ResourceExhausted naming -xds-max-streams-per-source and 2", err)
	}
	if err := open(t, ctx, dialFrom(t, addr, "127.0.0.2")); err != nil {
		t.Fatalf("a stream from 127.0.0.2: %v", err)
	}
	if got := e.s.Stats(); got.RefusedPerSource != 1 || got.RefusedTotal != 0 || got.Streams != 3 {
		t.Errorf("stats %+v: want 1 refused per source, 3 open", got)
	}
}

// Many streams of every kind, once closed, leave nothing behind: no
// stream, source or cache watch kept, no goroutine left.
func TestStreamsLeaveNothing(t *testing.T) {
	e := start(t, checker.Config{}, xds.Config{Coalesce: time.Millisecond}, nil)
	e.add(t, true, tcpTarget("web-1", "edge", "127.0.0.1:8081"))
	e.round(t)
	// Warm the connection up before counting goroutines.
	warm, cancelWarm := context.WithCancel(t.Context())
	if err := open(t, warm, e.conn); err != nil {
		t.Fatal(err)
	}
	cancelWarm()
	e.waitStreams(t, 0)
	baseG := runtime.NumGoroutine()

	const n = 2000
	ctx, cancel := context.WithCancel(t.Context())
	client := discoverypb.NewAggregatedDiscoveryServiceClient(e.conn)
	for i := range n {
		switch i % 4 {
		case 0, 1: // an EDS watch, ACKed or NACKed
			st, err := client.StreamAggregatedResources(ctx)
			if err != nil {
				t.Fatal(err)
			}
			st.Send(&discoverypb.DiscoveryRequest{Node: &corev3.Node{Id: fmt.Sprint(i)}, TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"edge"}})
			r, err := st.Recv()
			if err != nil {
				t.Fatal(err)
			}
			ack := &discoverypb.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"edge"}, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()}
			if i%4 == 1 {
				ack.VersionInfo, ack.ErrorDetail = "", &statuspb.Status{Message: "no"}
			}
			st.Send(ack)
		case 2: // wildcard CDS and LDS
			st, err := client.StreamAggregatedResources(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, typ := range []string{resourcev3.ClusterType, resourcev3.ListenerType} {
				st.Send(&discoverypb.DiscoveryRequest{TypeUrl: typ})
				if _, err := st.Recv(); err != nil {
					t.Fatal(err)
				}
			}
		case 3: // delta
			st, err := client.DeltaAggregatedResources(ctx)
			if err != nil {
				t.Fatal(err)
			}
			st.Send(&discoverypb.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: []string{"edge", "nothing"}})
			if _, err := st.Recv(); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.waitStreams(t, n)
	if _, sources, watches := e.s.Bookkeeping(); sources != 1 || watches == 0 {
		t.Fatalf("with %d streams open: %d sources, %d watches", n, sources, watches)
	}
	cancel()
	deadline := time.Now().Add(30 * time.Second)
	for {
		streams, sources, watches := e.s.Bookkeeping()
		g := runtime.NumGoroutine()
		if streams == 0 && sources == 0 && watches == 0 && g <= baseG {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after every stream closed: %d streams, %d sources, %d watches kept; %d goroutines, %d before", streams, sources, watches, g, baseG)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
