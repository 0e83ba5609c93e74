// Package dial builds the gRPC client options pulsed's clients (pulsectl,
// pulse-lb) share: plaintext or TLS, mutual TLS, and a bearer token.
package dial

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Flags are the connection flags a client registers with Register.
type Flags struct {
	TLS        bool   // connect with TLS (implied by CA, Cert)
	CA         string // PEM file of CAs that sign pulsed's certificate; empty: system roots
	Cert, Key  string // client certificate and key, for mutual TLS
	ServerName string // name to verify pulsed's certificate against; empty: the address's host
	Token      string // bearer token
	TokenFile  string // file whose first line is the bearer token
}

// Register adds the connection flags to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.BoolVar(&f.TLS, "tls", false, "connect to pulsed with TLS (implied by -tls-ca and -tls-cert)")
	fs.StringVar(&f.CA, "tls-ca", "", "PEM `file` of the CA that signed pulsed's certificate (default: the system's roots)")
	fs.StringVar(&f.Cert, "tls-cert", "", "client certificate PEM `file`, for pulsed's -client-ca (mutual TLS)")
	fs.StringVar(&f.Key, "tls-key", "", "client key PEM `file`, with -tls-cert")
	fs.StringVar(&f.ServerName, "tls-server-name", "", "`name` pulsed's certificate must carry (default: the address's host)")
	fs.StringVar(&f.Token, "token", "", "bearer `token` for pulsed's -token-file auth (prefer -token-file or PULSE_TOKEN: flags show in ps)")
	fs.StringVar(&f.TokenFile, "token-file", "", "`file` whose first line is the bearer token")
}

// Options returns the grpc.DialOptions for f.
func (f *Flags) Options() ([]grpc.DialOption, error) {
	var opts []grpc.DialOption
	if f.TLS || f.CA != "" || f.Cert != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
		if f.CA != "" {
			pem, err := os.ReadFile(f.CA)
			if err != nil {
				return nil, fmt.Errorf("-tls-ca: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("-tls-ca: %s holds no PEM certificate", f.CA)
			}
		}
		if (f.Cert == "") != (f.Key == "") {
			return nil, errors.New("-tls-cert and -tls-key go together")
		}
		if f.Cert != "" {
			cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
			if err != nil {
				return nil, fmt.Errorf("-tls-cert/-tls-key: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	token := f.Token
	if token == "" && f.TokenFile != "" {
		b, err := os.ReadFile(f.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("-token-file: %w", err)
		}
		token, _, _ = strings.Cut(strings.TrimSpace(string(b)), "\n")
		token = strings.TrimSpace(token)
	}
	if token == "" {
		token = os.Getenv("PULSE_TOKEN")
	}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{token: token, requireTLS: f.TLS || f.CA != "" || f.Cert != ""}))
	}
	return opts, nil
}

// bearer sends "authorization: Bearer <token>" with every call.
type bearer struct {
	token      string
	requireTLS bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity is false for plaintext connections, so a token
// can be used over loopback without TLS; over TLS it is sent only on TLS.
func (b bearer) RequireTransportSecurity() bool { return b.requireTLS }
