package probe

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// TestGRPCTLSOptions probes a health server that accepts only clients with
// a certificate, under a name its certificate has and the probe's address
// does not.
func TestGRPCTLSOptions(t *testing.T) {
	ca, clientCA := newTestCA(t, "CA"), newTestCA(t, "client CA")
	pool := x509.NewCertPool()
	pool.AddCert(clientCA.cert)
	srvCert := ca.issue(t, time.Now().Add(84*time.Hour), false, "api.internal").pair
	addr, _, _ := startHealth(t, nil, grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{srvCert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	})))
	client := clientCA.issue(t, time.Now().Add(time.Hour), true, "prober")
	f := newTestFactory(t)
	probe := func(s GRPCSpec) error {
		return newGRPCTestProber(t, f, s).Probe(timeoutCtx(t, 5*time.Second))
	}
	mtls := TLSSpec{CAPEM: string(ca.pem), CertPEM: string(client.certPEM), KeyPEM: string(client.keyPEM)}

	withName := mtls
	withName.ServerName = "api.internal"
	wantPass(t, probe(GRPCSpec{Address: addr, TLSOptions: &withName}))
	wantPass(t, probe(GRPCSpec{Address: addr, Authority: "api.internal", TLSOptions: &mtls}))
	wantFail(t, probe(GRPCSpec{Address: addr, TLSOptions: &mtls}), "cannot validate certificate for 127.0.0.1")
	noCert := TLSSpec{CAPEM: string(ca.pem), ServerName: "api.internal"}
	// The server's alert races the client's first write: the text is
	// "certificate required" or a broken connection.
	if err := probe(GRPCSpec{Address: addr, TLSOptions: &noCert}); err == nil {
		t.Error("a probe without a client certificate passed")
	}

	expiring := withName
	expiring.CertExpiryFail = 7 * 24 * time.Hour
	wantFail(t, probe(GRPCSpec{Address: addr, TLSOptions: &expiring}), "certificate expires in 3d11h")
}

// metadataHealth is a health server that answers SERVING only to calls
// that carry x-api-key: k, and records their :authority.
type metadataHealth struct {
	healthpb.UnimplementedHealthServer
	mu        sync.Mutex
	authority []string
}

func (h *metadataHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	h.mu.Lock()
	h.authority = append(h.authority, md.Get(":authority")...)
	h.mu.Unlock()
	if v := md.Get("x-api-key"); len(v) == 1 && v[0] == "k" {
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
}

func TestGRPCMetadataAndAuthority(t *testing.T) {
	h := &metadataHealth{}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, h)
	addr, _ := startGRPC(t, srv)
	f := newTestFactory(t)
	probe := func(s GRPCSpec) error {
		return newGRPCTestProber(t, f, s).Probe(timeoutCtx(t, 5*time.Second))
	}
	wantFail(t, probe(GRPCSpec{Address: addr}), "NOT_SERVING")
	wantPass(t, probe(GRPCSpec{Address: addr, Metadata: map[string]string{"x-api-key": "k"}, Authority: "api.internal"}))
	h.mu.Lock()
	got := strings.Join(h.authority, ",")
	h.mu.Unlock()
	if got != addr+",api.internal" {
		t.Errorf(":authority seen %q, want %q", got, addr+",api.internal")
	}
}

func TestGRPCExpectedStatuses(t *testing.T) {
	addr, _, _ := startHealth(t, map[string]healthpb.HealthCheckResponse_ServingStatus{"drained": healthpb.HealthCheckResponse_NOT_SERVING})
	f := newTestFactory(t)
	probe := func(s GRPCSpec) error {
		return newGRPCTestProber(t, f, s).Probe(timeoutCtx(t, 5*time.Second))
	}
	wantFail(t, probe(GRPCSpec{Address: addr, Service: "drained"}), "NOT_SERVING")
	wantPass(t, probe(GRPCSpec{Address: addr, Service: "drained", ExpectedStatuses: []string{"SERVING", "NOT_SERVING"}}))
	wantFail(t, probe(GRPCSpec{Address: addr, Service: "nobody", ExpectedStatuses: []string{"SERVING", "NOT_SERVING"}}), "SERVICE_UNKNOWN")
	wantPass(t, probe(GRPCSpec{Address: addr, Service: "nobody", ExpectedStatuses: []string{"SERVICE_UNKNOWN"}}))
	wantFail(t, probe(GRPCSpec{Address: addr, ExpectedStatuses: []string{"NOT_SERVING"}}), "SERVING")
}
