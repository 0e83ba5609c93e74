package etcdtest

import (
	"testing"

	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/pulsehealth/pulse/internal/testpki"
)

// TLSFiles are the PEM files of a test CA, a server certificate for
// 127.0.0.1 and a client certificate, both signed by the CA.
type TLSFiles = testpki.Files

// StartTLS starts etcd serving clients over TLS only, requiring a client
// certificate signed by its CA.
func StartTLS(t testing.TB) (*Server, TLSFiles) {
	t.Helper()
	files := testpki.Write(t, t.TempDir())
	s := &Server{t: t, dir: t.TempDir(), client: freeURL(t), peer: freeURL(t)}
	s.client.Scheme = "https"
	s.Endpoint = s.client.String()
	s.tls = &transport.TLSInfo{
		CertFile: files.ServerCert, KeyFile: files.ServerKey,
		TrustedCAFile: files.CA, ClientCertAuth: true,
	}
	s.start()
	t.Cleanup(s.Stop)
	return s, files
}
