package server_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
	"github.com/pulsehealth/pulse/checker/probe"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/server"
	"github.com/pulsehealth/pulse/server/web"
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

// selfSigned returns a server certificate for 127.0.0.1 valid until
// notAfter, and its PEM.
func selfSigned(t *testing.T, notAfter time.Time) (tls.Certificate, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "web"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// A real https target whose certificate expires in three and a half days,
// probed with a 30-day warning: it passes, its status and the
// pulse_target_cert_expiry_seconds gauge say when the certificate expires,
// and one CERT_EXPIRING event goes on the stream.
func TestCertExpiryWarningEndToEnd(t *testing.T) {
	notAfter := time.Now().Add(84 * time.Hour).Truncate(time.Second)
	cert, certPEM := selfSigned(t, notAfter)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ready")) }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	defer srv.Close()

	factory := probe.NewFactory()
	defer factory.Close()
	c, err := checker.New(checker.Config{
		Clock:     fakeclock.New(time.Now()),
		NewProber: func(s probe.Spec) (checker.Prober, error) { return factory.New(s) },
		Defaults:  checker.Defaults{Interval: 2 * time.Second, Timeout: time.Second, Rise: 1, Fall: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	gs, _ := server.NewGRPCServer(server.New(c), server.Options{Logger: nilLogger()})
	client := pb.NewHealthCheckerClient(serveBufconn(t, gs, c))
	w, err := client.WatchTransitions(t.Context(), &pb.WatchTransitionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := w.Recv(); err != nil || ev.GetSnapshotComplete() == nil {
		t.Fatalf("first event %v (%v), want snapshot_complete", ev, err)
	}
	_, err = client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: &pb.Target{Name: "web", Group: "edge", Probe: &pb.Target_Http{Http: &pb.HttpProbe{
		Url: srv.URL + "/ready", BodyContains: "ready",
		Tls: &pb.TlsOptions{CaPem: certPEM, CertExpiryWarn: durationpb.New(30 * 24 * time.Hour), CertExpiryFail: durationpb.New(24 * time.Hour)},
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	c.RunRound(t.Context())
	c.RunRound(t.Context())
	st, err := client.State(t.Context(), &pb.StateRequest{Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	day := notAfter.UTC().Format(time.DateOnly)
	if got := st.GetStatus(); got.GetState() != pb.State_STATE_HEALTHY || !strings.HasPrefix(got.GetCertExpiryWarning(), "certificate expires in 3d1") ||
		!strings.HasSuffix(got.GetCertExpiryWarning(), "("+day+")") || !got.GetCertNotAfter().AsTime().Equal(notAfter) {
		t.Errorf("status: state %v, cert_expiry_warning %q, cert_not_after %v; want healthy, a warning and %v", got.GetState(), got.GetCertExpiryWarning(), got.GetCertNotAfter().AsTime(), notAfter)
	}
	var policies []*pb.PolicyEvent
	for len(policies) == 0 {
		ev, err := w.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if p := ev.GetPolicy(); p != nil {
			policies = append(policies, p)
		}
	}
	if p := policies[0]; p.GetKind() != pb.PolicyEvent_KIND_CERT_EXPIRING || p.GetTarget() != "web" || !strings.HasPrefix(p.GetText(), "web: certificate expires in 3d1") {
		t.Errorf("policy event %v, want CERT_EXPIRING for web", p)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(web.NewCollector(c, true, nil))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "pulse_target_cert_expiry_seconds" {
			continue
		}
		found = true
		if v := mf.GetMetric()[0].GetGauge().GetValue(); v < 83*3600 || v > 84*3600 {
			t.Errorf("pulse_target_cert_expiry_seconds = %v, want about 84h", v)
		}
	}
	if !found {
		t.Error("no pulse_target_cert_expiry_seconds series")
	}
}
