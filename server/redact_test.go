package server_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/pulsehealth/pulse/checker"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/server"
)

const secret = "Bearer s3cret-probe-credential"

func httpTarget(name string, headers map[string]string) *pb.Target {
	return &pb.Target{Name: name, Group: "edge", Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: "http://127.0.0.1:9/healthz", Headers: headers}}}
}

// noSecret fails if m, in any form a client could print, holds the secret,
// and returns its headers.
func noSecret(t *testing.T, what string, m proto.Message) {
	t.Helper()
	if text := prototext.Format(m); strings.Contains(text, "s3cret") {
		t.Errorf("%s shows the header's value:\n%s", what, text)
	}
}

// Header values are redacted in every answer of the API (names stay), the
// store keeps them, and a spec read back and written again keeps them.
func TestHeaderValuesAreRedacted(t *testing.T) {
	e := start(t, checker.Config{})
	w := watch(t, t.Context(), e, &pb.WatchTransitionsRequest{})
	readSnapshot(t, w)

	resp := e.add(t, httpTarget("web-1", map[string]string{"Authorization": secret, "Host": "web.internal"}))
	noSecret(t, "AddTarget's answer", resp)
	wantHeaders := map[string]string{"Authorization": server.Redacted, "Host": server.Redacted}
	if diff := cmp.Diff(wantHeaders, resp.GetStatus().GetSpec().GetHttp().GetHeaders()); diff != "" {
		t.Errorf("AddTarget's headers (-want +got):\n%s", diff)
	}
	ev, err := w.Recv()
	if err != nil {
		t.Fatal(err)
	}
	noSecret(t, "the added event", ev)
	if got := ev.GetAdded().GetSpec().GetHttp().GetHeaders(); !cmp.Equal(got, wantHeaders) {
		t.Errorf("the added event's headers: %v", got)
	}
	st, err := e.client.State(t.Context(), &pb.StateRequest{Name: "web-1"})
	if err != nil {
		t.Fatal(err)
	}
	noSecret(t, "State", st)
	list, err := e.client.ListTargets(t.Context(), &pb.ListTargetsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	noSecret(t, "ListTargets", list)
	if got := list.GetTargets()[0].GetSpec().GetHttp().GetHeaders(); !cmp.Equal(got, wantHeaders) {
		t.Errorf("ListTargets' headers: %v", got)
	}
	stored := func() map[string]string {
		st, err := e.c.Status("web-1")
		if err != nil {
			t.Fatal(err)
		}
		return st.Spec.Probe.HTTP.Headers
	}
	if got := stored()["Authorization"]; got != secret {
		t.Fatalf("the checker holds %q, want the value itself", got)
	}

	// Read, modify, write: the redacted values keep the stored ones.
	back := st.GetStatus().GetSpec()
	back.Rise = proto.Int32(5)
	back.GetHttp().Headers["host"] = server.Redacted // names match as HTTP's do
	delete(back.GetHttp().Headers, "Host")
	resp = e.add(t, back)
	noSecret(t, "AddTarget's answer", resp)
	if resp.GetCreated() || resp.GetStatus().GetSpec().GetRise() != 5 {
		t.Errorf("the write back: created %v rise %d, want an update to rise 5", resp.GetCreated(), resp.GetStatus().GetSpec().GetRise())
	}
	if diff := cmp.Diff(map[string]string{"Authorization": secret, "host": "web.internal"}, stored()); diff != "" {
		t.Errorf("stored headers after the write back (-want +got):\n%s", diff)
	}
	ev, err = w.Recv()
	if err != nil {
		t.Fatal(err)
	}
	noSecret(t, "the updated event", ev)

	// The placeholder never becomes a value: not for a new target, nor for
	// a header the target does not have; and the rejected call changes
	// nothing.
	_, err = e.client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: httpTarget("web-2", map[string]string{"Authorization": server.Redacted})})
	wantCode(t, err, codes.InvalidArgument, `target.http.headers["Authorization"]: is "<redacted>", which keeps the stored value, but target "web-2" has no stored header Authorization`)
	_, err = e.client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: httpTarget("web-1", map[string]string{"Authorization": server.Redacted, "X-Api-Key": server.Redacted})})
	wantCode(t, err, codes.InvalidArgument, `target.http.headers["X-Api-Key"]: is "<redacted>"`)
	if _, err := e.c.Status("web-2"); err == nil {
		t.Error("web-2 was added by a rejected call")
	}
	if got := stored(); len(got) != 2 || got["Authorization"] != secret {
		t.Errorf("a rejected call changed web-1's headers to %v", got)
	}
	// A value that cannot be sent is refused without echoing it: the
	// error is logged.
	_, err = e.client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: httpTarget("web-3", map[string]string{"Authorization": secret + "\n"})})
	wantCode(t, err, codes.InvalidArgument, `target.http.headers: value of header "Authorization" must not contain control characters such as CR or LF, got '\n' at byte 30`)
	// Without the placeholder, values are written as sent.
	e.add(t, httpTarget("web-1", map[string]string{"Authorization": "Bearer rotated"}))
	if got := stored()["Authorization"]; got != "Bearer rotated" {
		t.Errorf("a new value was stored as %q", got)
	}
	if !strings.Contains(e.logs.String(), "AddTarget") || strings.Contains(e.logs.String(), "s3cret") {
		t.Errorf("the server's log misses the calls or shows the value:\n%s", e.logs.String())
	}
}

// A password in an HTTP probe's URL is a secret too: redacted in every
// answer, kept by a write back, never stored as the placeholder.
func TestURLPasswordsAreRedacted(t *testing.T) {
	e := start(t, checker.Config{})
	tg := httpTarget("web-1", nil)
	tg.GetHttp().Url = "http://probe:s3cret-pw@127.0.0.1:9/healthz"
	resp := e.add(t, tg)
	noSecret(t, "AddTarget's answer", resp)
	const shown = "http://probe:%3Credacted%3E@127.0.0.1:9/healthz"
	if got := resp.GetStatus().GetSpec().GetHttp().GetUrl(); got != shown {
		t.Errorf("AddTarget's URL = %q, want %q", got, shown)
	}
	list, err := e.client.ListTargets(t.Context(), &pb.ListTargetsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	noSecret(t, "ListTargets", list)
	storedURL := func() string {
		st, err := e.c.Status("web-1")
		if err != nil {
			t.Fatal(err)
		}
		return st.Spec.Probe.HTTP.URL
	}

	back := list.GetTargets()[0].GetSpec()
	back.Rise = proto.Int32(4)
	e.add(t, back)
	if got := storedURL(); got != "http://probe:s3cret-pw@127.0.0.1:9/healthz" {
		t.Errorf("after a write back the stored URL is %q, want the password kept", got)
	}
	tg2 := httpTarget("web-2", nil)
	tg2.GetHttp().Url = shown
	_, err = e.client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tg2})
	wantCode(t, err, codes.InvalidArgument, `target.http.url: has the password "<redacted>", which keeps the stored one, but target "web-2" has no stored URL password`)
	if _, err := e.c.Status("web-2"); err == nil {
		t.Error("web-2 was added by a rejected call")
	}
}

// testKeyPair returns a self-signed client certificate and its key, in PEM.
func testKeyPair(t *testing.T) (certPEM, keyPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "prober"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}))
}

// A TLS private key and gRPC metadata values are secrets as header values
// are: redacted in every answer, kept by a write back, never stored as the
// placeholder. Skipping verification is named in the status's warnings.
func TestTLSKeysAndMetadataAreRedacted(t *testing.T) {
	e := start(t, checker.Config{})
	certPEM, keyPEM := testKeyPair(t)
	tg := &pb.Target{Name: "redis-1", Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{
		Address: "127.0.0.1:6379",
		Steps:   []*pb.TcpStep{{Send: "PING\r\n"}, {Expect: "+PONG\r\n"}},
		Tls:     &pb.TlsOptions{CertPem: certPEM, KeyPem: keyPEM, InsecureSkipVerify: true},
	}}}
	resp := e.add(t, tg)
	if text := prototext.Format(resp); strings.Contains(text, "PRIVATE KEY") {
		t.Errorf("AddTarget's answer shows the key:\n%s", text)
	}
	got := resp.GetStatus().GetSpec().GetTcp()
	if got.GetTls().GetKeyPem() != server.Redacted || got.GetTls().GetCertPem() != certPEM || len(got.GetSteps()) != 2 {
		t.Errorf("AddTarget's tcp probe = %v, want the steps, the certificate and a redacted key", got)
	}
	if w := resp.GetStatus().GetWarnings(); len(w) != 1 || !strings.HasPrefix(w[0], "tcp.tls.insecure_skip_verify: ") {
		t.Errorf("warnings = %q, want one about tcp.tls.insecure_skip_verify", w)
	}
	list, err := e.client.ListTargets(t.Context(), &pb.ListTargetsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if text := prototext.Format(list); strings.Contains(text, "PRIVATE KEY") {
		t.Errorf("ListTargets shows the key:\n%s", text)
	}
	back := list.GetTargets()[0].GetSpec()
	back.Rise = proto.Int32(4)
	e.add(t, back)
	st, err := e.c.Status("redis-1")
	if err != nil {
		t.Fatal(err)
	}
	if st.Spec.Probe.TCP.TLS.KeyPEM != keyPEM || st.Spec.Rise != 4 {
		t.Errorf("after a write back the stored key is %.30q and rise %d, want the key kept and rise 4", st.Spec.Probe.TCP.TLS.KeyPEM, st.Spec.Rise)
	}
	tg2 := proto.Clone(back).(*pb.Target)
	tg2.Name = "redis-2"
	_, err = e.client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tg2})
	wantCode(t, err, codes.InvalidArgument, `target.tcp.tls.key_pem: is "<redacted>", which keeps the stored key, but target "redis-2" has no stored key_pem`)

	g := &pb.Target{Name: "api", Probe: &pb.Target_Grpc{Grpc: &pb.GrpcProbe{Address: "127.0.0.1:50051", Metadata: map[string]string{"x-api-key": "s3cret-key"}}}}
	resp = e.add(t, g)
	noSecret(t, "AddTarget's answer", resp)
	back = resp.GetStatus().GetSpec()
	back.Fall = proto.Int32(5)
	e.add(t, back)
	if st, err := e.c.Status("api"); err != nil || st.Spec.Probe.GRPC.Metadata["x-api-key"] != "s3cret-key" {
		t.Errorf("after a write back the stored metadata is %v (%v), want the value kept", st.Spec.Probe.GRPC.Metadata, err)
	}
}
