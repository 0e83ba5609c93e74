package server_test

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
	"github.com/pulsehealth/pulse/checker/probe"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/server"
)

// Bad probe options are INVALID_ARGUMENT naming the field, with the
// checker's real probe factory (which reads TLS files).
func TestProbeOptionsRejectedNamingTheField(t *testing.T) {
	factory := probe.NewFactory()
	defer factory.Close()
	c, err := checker.New(checker.Config{
		Clock:     fakeclock.New(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)),
		NewProber: func(s probe.Spec) (checker.Prober, error) { return factory.New(s) },
		Defaults:  checker.Defaults{Interval: 2 * time.Second, Timeout: time.Second, Rise: 1, Fall: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	gs, _ := server.NewGRPCServer(server.New(c), server.Options{Logger: nilLogger()})
	client := pb.NewHealthCheckerClient(serveBufconn(t, gs, c))
	httpT := func(h *pb.HttpProbe) *pb.Target { return &pb.Target{Name: "t", Probe: &pb.Target_Http{Http: h}} }
	for _, tt := range []struct {
		target *pb.Target
		want   string
	}{
		{httpT(&pb.HttpProbe{Url: "http://127.0.0.1:9/", BodyRegex: "(ready"}), "target.http.body_regex: is not a valid RE2 regular expression"},
		{httpT(&pb.HttpProbe{Url: "https://127.0.0.1:9/", Tls: &pb.TlsOptions{CaFile: "/nonexistent/ca.pem"}}), `target.http.tls.ca_file: cannot read "/nonexistent/ca.pem": no such file or directory`},
		{httpT(&pb.HttpProbe{Url: "https://127.0.0.1:9/", Tls: &pb.TlsOptions{MinVersion: "1.4"}}), `target.http.tls.min_version: unknown TLS version "1.4"`},
		{httpT(&pb.HttpProbe{Url: "https://127.0.0.1:9/", Tls: &pb.TlsOptions{CertExpiryFail: durationpb.New(-time.Hour)}}), "target.http.tls.cert_expiry_fail: must be positive when set"},
		{httpT(&pb.HttpProbe{Url: "http://127.0.0.1:9/", ExpectedStatusRanges: []string{"2xx"}}), "target.http.expected_status_ranges: "},
		{&pb.Target{Name: "t", Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "127.0.0.1:6379", Steps: []*pb.TcpStep{{Send: "PING\r\n"}, {}}}}}, "target.tcp.steps[1]: set one of send"},
		{&pb.Target{Name: "t", Probe: &pb.Target_Grpc{Grpc: &pb.GrpcProbe{Address: "127.0.0.1:9", ExpectedStatuses: []string{"OK"}}}}, "target.grpc.expected_statuses: "},
		{&pb.Target{Name: "t", Probe: &pb.Target_Dns{Dns: &pb.DnsProbe{Name: "api.internal", Server: "127.0.0.1:53", Type: "AXFR"}}}, "target.dns.type: "},
		{&pb.Target{Name: "t", Probe: &pb.Target_Dns{Dns: &pb.DnsProbe{Name: "api.internal", Server: "169.254.169.254:53"}}}, "target.dns.server: 169.254.169.254 is denied by egress policy"},
	} {
		_, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tt.target})
		wantCode(t, err, codes.InvalidArgument, tt.want)
	}
	if l, err := client.ListTargets(t.Context(), &pb.ListTargetsRequest{}); err != nil || len(l.GetTargets()) != 0 {
		t.Errorf("ListTargets after rejected calls: %v (%v), want none", l.GetTargets(), err)
	}
}
