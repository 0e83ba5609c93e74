package client_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pulsehealth/pulse/client"
)

// An address New could not reach pulsed at is refused by New, naming it and
// the form wanted, rather than by the first call as "pulsed unreachable".
func TestNewRefusesAddresses(t *testing.T) {
	for _, tc := range []struct {
		addrs []string
		want  string
	}{
		{[]string{"localhost"}, `address "localhost" has no port: want host:port, e.g. 127.0.0.1:50051`},
		{[]string{"127.0.0.1:"}, `address "127.0.0.1:" has no port: want host:port`},
		{[]string{"[::1]"}, `address "[::1]" has no port: want host:port, e.g. [::1]:50051`},
		{[]string{"::1"}, `address "::1" has no port: want host:port, e.g. [::1]:50051`},
		{[]string{"http://127.0.0.1:50071"}, `address "http://127.0.0.1:50071" is not host:port: want host:port`},
		{[]string{"127.0.0.1:50071 "}, `address "127.0.0.1:50071 " holds white space: want host:port`},
		{[]string{"127.0.0.1:50071", " 127.0.0.2:50071"}, `address " 127.0.0.2:50071" holds white space: want host:port`},
		{[]string{"127.0.0.1:50071", "localhost"}, `address "localhost" has no port: want host:port`},
		{[]string{"127.0.0.1:65536"}, `address "127.0.0.1:65536" has port "65536": want a port from 1 to 65535`},
		{[]string{"127.0.0.1:0"}, `has port "0"`},
		{[]string{"dns:///localhost"}, `address "dns:///localhost" has no port: want dns:///host:port, e.g. dns:///127.0.0.1:50051`},
	} {
		c, err := client.New(t.Context(), tc.addrs, client.WithToken(""))
		if err == nil {
			c.Close()
			t.Errorf("New(%q) succeeded; want an error with %q", tc.addrs, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%q): %v; want %q", tc.addrs, err, tc.want)
		}
	}
}

// The address forms New takes reach pulsed: host:port, and the gRPC
// targets of a scheme gRPC resolves.
func TestNewAddressForms(t *testing.T) {
	f := &fakePulse{}
	addr := f.serve(t)
	port := addr[strings.LastIndex(addr, ":")+1:]
	for _, a := range []string{addr, "localhost:" + port, "dns:///" + addr, "dns:" + addr, "passthrough:///" + addr} {
		c, err := client.New(t.Context(), []string{a}, client.WithToken(""))
		if err != nil {
			t.Errorf("New(%q): %v", a, err)
			continue
		}
		if _, err := c.Healthy(within(t), ""); err != nil {
			t.Errorf("Healthy through %q: %v", a, err)
		}
		c.Close()
	}
	// Taken without a connection: New does not dial.
	for _, addrs := range [][]string{
		{"[::1]:50051"}, {":50051"}, {"pulse-1.internal:50051", "pulse-2.internal:50051"},
		{"unix:" + filepath.Join(t.TempDir(), "pulsed.sock")}, {"unix:///run/pulsed.sock"},
	} {
		c, err := client.New(t.Context(), addrs, client.WithToken(""))
		if err != nil {
			t.Errorf("New(%q): %v", addrs, err)
			continue
		}
		c.Close()
	}
}

// PULSE_TOKEN is trimmed of the white space around it, as a token file
// is; a token a header cannot carry is refused by New, naming where it
// came from, rather than by gRPC on every call as INTERNAL.
func TestTokenFromTheEnvironment(t *testing.T) {
	f := &fakePulse{}
	addr := f.serve(t)
	t.Setenv(client.TokenEnv, " s3cret\n")
	c, err := client.New(t.Context(), []string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Healthy(within(t), ""); err != nil {
		t.Fatal(err)
	}
	if got := f.lastAuth(); got != "Bearer s3cret" {
		t.Errorf("authorization sent: %q; want %q", got, "Bearer s3cret")
	}

	file := filepath.Join(t.TempDir(), "token")
	os.WriteFile(file, []byte("s3\tcret\n"), 0o600)
	for _, tc := range []struct {
		env  string
		opts []client.Option
		want string
	}{
		{"s3\x07cret\n", nil, `PULSE_TOKEN holds '\a' at byte 2, which a header cannot carry`},
		{"first\nsecond", nil, `PULSE_TOKEN holds '\n' at byte 5`},
		{"sécret", nil, "PULSE_TOKEN holds a character past ASCII at byte 1"},
		{"", []client.Option{client.WithTokenFile(file)}, "token file " + file + ` holds '\t' at byte 2`},
		{"", []client.Option{client.WithToken("s3cret\r\n")}, `WithToken's token holds '\r' at byte 6`},
	} {
		t.Setenv(client.TokenEnv, tc.env)
		c, err := client.New(t.Context(), []string{addr}, tc.opts...)
		if err == nil {
			c.Close()
			t.Errorf("PULSE_TOKEN %q: New succeeded; want %q", tc.env, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "cret") {
			t.Errorf("PULSE_TOKEN %q: New: %v; want %q, and not the token", tc.env, err, tc.want)
		}
	}
}
