// Package dial holds the connection flags pulsed's clients (pulsectl,
// pulse-lb) share: plaintext or TLS, mutual TLS, and a bearer token. The
// TLS files and the token are read by package client's helpers, so the
// command-line tools and the Go client connect the same way.
package dial

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pulsehealth/pulse/client"
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

// TLSOn reports whether f asks for TLS.
func (f *Flags) TLSOn() bool { return f.TLS || f.CA != "" || f.Cert != "" }

// HasToken reports whether calls carry a token: f's, or PULSE_TOKEN's.
func (f *Flags) HasToken() bool {
	return f.Token != "" || f.TokenFile != "" || os.Getenv(client.TokenEnv) != ""
}

func (f *Flags) files() client.TLSFiles {
	return client.TLSFiles{CA: f.CA, Cert: f.Cert, Key: f.Key, ServerName: f.ServerName}
}

// ClientOptions returns the client.Options for f: TLS or mutual TLS, and
// the token of -token or -token-file (PULSE_TOKEN otherwise, the client's
// default). client.New reads the files.
func (f *Flags) ClientOptions() ([]client.Option, error) {
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("-tls-cert and -tls-key go together")
	}
	var opts []client.Option
	if f.TLSOn() {
		opts = append(opts, client.WithTLSFiles(f.files()))
	}
	switch {
	case f.Token != "":
		opts = append(opts, client.WithToken(f.Token))
	case f.TokenFile != "":
		opts = append(opts, client.WithTokenFile(f.TokenFile))
	}
	return opts, nil
}

// Options returns the grpc.DialOptions for f.
func (f *Flags) Options() ([]grpc.DialOption, error) {
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("-tls-cert and -tls-key go together")
	}
	var opts []grpc.DialOption
	if f.TLSOn() {
		cfg, err := f.files().Config()
		if err != nil {
			return nil, fmt.Errorf("-tls-ca/-tls-cert/-tls-key: %w", err)
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	token := f.Token
	if token == "" && f.TokenFile != "" {
		var err error
		if token, err = client.ReadTokenFile(f.TokenFile); err != nil {
			return nil, fmt.Errorf("-token-file: %w", err)
		}
	}
	if token == "" {
		token = os.Getenv(client.TokenEnv)
	}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(client.Bearer(token, f.TLSOn())))
	}
	return opts, nil
}
