package xds_test

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
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
	"google.golang.org/grpc/test/bufconn"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeprobe"
	"github.com/pulsehealth/pulse/server/xds"
)

// fuzzIn decodes fuzz bytes; past the end it reads zeros.
type fuzzIn struct{ b []byte }

func (in *fuzzIn) byte() byte {
	if len(in.b) == 0 {
		return 0
	}
	c := in.b[0]
	in.b = in.b[1:]
	return c
}

// str reads a length byte and that many bytes; a length of 255 is a long
// string instead: (k+1)*4096 copies of a byte c, from the next two bytes
// k and c (up to 1 MiB). Invalid UTF-8 becomes "?": gRPC refuses to
// marshal it, and on the server to unmarshal it.
func (in *fuzzIn) str() string {
	n := int(in.byte())
	if n == 255 {
		k, c := int(in.byte()), in.byte()
		return strings.ToValidUTF8(strings.Repeat(string([]byte{c}), (k+1)*4096), "?")
	}
	n = min(n, len(in.b))
	s := string(in.b[:n])
	in.b = in.b[n:]
	return strings.ToValidUTF8(s, "?")
}

// typeURL reads a type URL: one Pulse serves, none, another xDS type, or
// any string.
func (in *fuzzIn) typeURL() string {
	switch c := in.byte(); c % 8 {
	case 4:
		return ""
	case 5:
		return resourcev3.SecretType
	case 6:
		return in.str()
	case 7:
		return resourcev3.EndpointType + in.str()
	default:
		return [...]string{resourcev3.EndpointType, resourcev3.ClusterType, resourcev3.RouteType, resourcev3.ListenerType}[c%4]
	}
}

// nonce reads a nonce: none, a number (the server numbers its responses
// 1, 2, ...), or any string.
func (in *fuzzIn) nonce() string {
	switch c := in.byte(); {
	case c == 0:
		return ""
	case c < 128:
		return strconv.Itoa(int(c))
	default:
		return in.str()
	}
}

func (in *fuzzIn) names() []string {
	var out []string
	for range in.byte() % 4 {
		out = append(out, in.str())
	}
	return out
}

func (in *fuzzIn) errorDetail() *statuspb.Status {
	c := in.byte()
	if c == 0 {
		return nil
	}
	return &statuspb.Status{Code: int32(c % 17), Message: in.str()}
}

// maxFuzzRequests bounds the requests one input makes.
const maxFuzzRequests = 64

// FuzzStream feeds a stream of requests decoded from the input to a real
// server over bufconn: the first byte picks State of the World or Delta,
// then each request is a type URL, version, nonce, names and an error
// detail. The stream must end (the client closes its side), with no panic,
// every response well formed and at most one per request (nothing changes
// meanwhile: a NACK loop would make more), and any error a clear one that
// echoes the client's input clipped.
func FuzzStream(f *testing.F) {
	b := func(b ...byte) []byte { return b }
	edge := b(1, 4, 'e', 'd', 'g', 'e') // names: one, "edge"
	// A request: type URL, version_info, nonce, names, error detail; the
	// first has a node id too.
	first := slices.Concat(b(0, 0, 0), edge, b(0, 1, 'n'))
	// A State of the World NACK loop: ask for edge, then NACK responses
	// 1, 2, ... (version_info empty, never having ACKed).
	nackLoop := slices.Concat(b(0), first)
	for i := range byte(10) {
		nackLoop = slices.Concat(nackLoop, b(0, 0, i+1), edge, b(3, 3, 'b', 'a', 'd'))
	}
	f.Add(nackLoop)
	// A 1 MiB type URL, and a 1 MiB node id.
	f.Add(b(0, 6, 255, 255, 'x', 0, 0, 0, 0, 255, 255, 'n'))
	// Every type, ACKing the numbered responses.
	f.Add(slices.Concat(b(0), first, b(1, 0, 0, 0, 0), b(2, 1, '1', 2, 0, 0), b(3, 0, 0, 0, 0)))
	// Delta (subscribe, unsubscribe, nonce, error detail; the first with a
	// node id and initial versions): subscribe, NACK, unsubscribe.
	f.Add(slices.Concat(b(1, 0), edge, b(0, 0, 0, 1, 'n', 0), b(0, 0, 0, 1, 3, 3, 'b', 'a', 'd'), b(0, 0), edge, b(2, 0)))
	// An empty type URL ends an ADS stream.
	f.Add(b(0, 4, 0, 0, 0, 0, 0))

	conn := fuzzServer(f)
	client := discoverypb.NewAggregatedDiscoveryServiceClient(conn)
	f.Fuzz(func(t *testing.T, data []byte) {
		in := &fuzzIn{b: data}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		delta := in.byte()%2 == 1
		var (
			requests int
			check    func(n int) error // receives until the stream ends; n responses
		)
		if delta {
			st, err := client.DeltaAggregatedResources(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for ; len(in.b) > 0 && requests < maxFuzzRequests; requests++ {
				req := &discoverypb.DeltaDiscoveryRequest{TypeUrl: in.typeURL(), ResourceNamesSubscribe: in.names(), ResourceNamesUnsubscribe: in.names(),
					ResponseNonce: in.nonce(), ErrorDetail: in.errorDetail()}
				if requests == 0 {
					req.Node = &corev3.Node{Id: in.str()}
					req.InitialResourceVersions = map[string]string{}
					for _, n := range in.names() {
						req.InitialResourceVersions[n] = in.str()
					}
				}
				if st.Send(req) != nil {
					break // the server ended the stream; Recv says why
				}
			}
			st.CloseSend()
			check = func(int) error {
				n := 0
				for {
					r, err := st.Recv()
					if err != nil {
						return ended(err, n, requests)
					}
					n++
					if err := wellFormed(r.GetTypeUrl(), r.GetNonce(), r.GetSystemVersionInfo(), nil); err != nil {
						return err
					}
					for _, res := range r.GetResources() {
						if res.GetName() == "" || res.GetVersion() == "" || res.GetResource().GetTypeUrl() != r.GetTypeUrl() {
							return errors.New("a delta resource without a name or version, or of another type: " + res.String()[:min(len(res.String()), 200)])
						}
					}
				}
			}
		} else {
			st, err := client.StreamAggregatedResources(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for ; len(in.b) > 0 && requests < maxFuzzRequests; requests++ {
				req := &discoverypb.DiscoveryRequest{TypeUrl: in.typeURL(), VersionInfo: in.str(), ResponseNonce: in.nonce(), ResourceNames: in.names(), ErrorDetail: in.errorDetail()}
				if requests == 0 {
					req.Node = &corev3.Node{Id: in.str()}
				}
				if st.Send(req) != nil {
					break
				}
			}
			st.CloseSend()
			check = func(int) error {
				n := 0
				for {
					r, err := st.Recv()
					if err != nil {
						return ended(err, n, requests)
					}
					n++
					var types []string
					for _, res := range r.GetResources() {
						types = append(types, res.GetTypeUrl())
					}
					if err := wellFormed(r.GetTypeUrl(), r.GetNonce(), r.GetVersionInfo(), types); err != nil {
						return err
					}
				}
			}
		}
		if err := check(0); err != nil {
			if ctx.Err() != nil {
				t.Fatalf("the stream did not end within 10s of the client closing its side (%d requests): %v", requests, err)
			}
			t.Fatal(err)
		}
	})
}

// wellFormed checks a response: a type Pulse serves, a nonce and a
// version, and resources of its type.
func wellFormed(typ, nonce, version string, resTypes []string) error {
	switch typ {
	case resourcev3.EndpointType, resourcev3.ClusterType, resourcev3.RouteType, resourcev3.ListenerType:
	default:
		return errors.New("a response of type " + typ[:min(len(typ), 200)])
	}
	if nonce == "" || version == "" {
		return errors.New("a response without a nonce or version")
	}
	for _, rt := range resTypes {
		if rt != typ {
			return errors.New("a " + typ + " response holding a " + rt[:min(len(rt), 200)])
		}
	}
	return nil
}

// ended checks how a stream ended: cleanly, or with a clear error whose
// message is bounded, after at most one response per request.
func ended(err error, responses, requests int) error {
	if responses > requests {
		return errors.New(strconv.Itoa(responses) + " responses to " + strconv.Itoa(requests) + " requests, with nothing changing")
	}
	if errors.Is(err, io.EOF) {
		return nil
	}
	st := status.Convert(err)
	if len(st.Message()) > 2048 {
		return errors.New("an error of " + strconv.Itoa(len(st.Message())) + " bytes: " + st.Message()[:200])
	}
	switch st.Code() {
	case codes.InvalidArgument, codes.Unavailable:
		return nil
	}
	return err
}

// fuzzServer serves xDS over bufconn, without the recovery interceptor (a
// panic must fail the fuzzing), for a group edge of two targets.
func fuzzServer(f *testing.F) *grpc.ClientConn {
	sp := fakeprobe.NewSwitches()
	c, err := checker.New(checker.Config{NewProber: sp.New, MaxUnhealthyFraction: 1,
		Defaults: checker.Defaults{Interval: 2 * time.Second, Timeout: time.Second, Rise: 1, Fall: 1}})
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []checker.Spec{tcpTarget("web-1", "edge", "127.0.0.1:8081"), tcpTarget("web-2", "edge", "127.0.0.2:8082")} {
		sp.Set(fakeprobe.Key(s.Probe), true)
		if _, _, err := c.Add(s); err != nil {
			f.Fatal(err)
		}
	}
	c.RunRound(f.Context())
	s, err := xds.New(c, xds.Config{Coalesce: time.Millisecond})
	if err != nil {
		f.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().Revision < c.Revision() {
		if time.Now().After(deadline) {
			f.Fatal("xds did not catch up with the checker")
		}
		time.Sleep(time.Millisecond)
	}
	gs := grpc.NewServer()
	s.Register(gs)
	lis := bufconn.Listen(1 << 20)
	go gs.Serve(lis)
	conn, err := grpc.NewClient("passthrough:///bufconn", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8<<20), grpc.MaxCallSendMsgSize(8<<20)))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		conn.Close()
		gs.Stop()
		s.Close()
		c.Close()
	})
	return conn
}
