package main

import (
	"context"
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "pulse/gen/pulse/v1"
)

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:50051": true, "127.1.2.3:1": true, "[::1]:50051": true, "localhost:50051": true,
		"[::ffff:127.0.0.1]:1": true, ":50051": false, "0.0.0.0:50051": false, "10.0.0.1:50051": false,
		"[::]:50051": false, "example.com:50051": false, "nonsense": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestSecurityFlags(t *testing.T) {
	parse := func(args ...string) *securityFlags {
		f := &securityFlags{}
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f.register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return f
	}
	tokens := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(tokens, []byte("write a-long-enough-token-here\n"), 0o600)

	for _, tt := range []struct {
		listen string
		args   []string
		want   string // "" means accepted
	}{
		{"127.0.0.1:50051", nil, ""},
		{"0.0.0.0:50051", nil, "-listen 0.0.0.0:50051 is reachable from other machines"},
		{"0.0.0.0:50051", []string{"-insecure"}, ""},
		{"0.0.0.0:50051", []string{"-token-file", tokens}, ""},
		{"127.0.0.1:1", []string{"-client-ca", "x.pem"}, "-client-ca needs -tls-cert"},
		{"127.0.0.1:1", []string{"-tls-cert", "missing.pem", "-tls-key", "missing.key"}, "load -tls-cert/-tls-key"},
		{"127.0.0.1:1", []string{"-tls-cert", "a.pem"}, "-tls-cert and -tls-key go together"},
		{"127.0.0.1:1", []string{"-token-file", "/nonexistent"}, "-token-file:"},
		{"127.0.0.1:1", []string{"-max-request-bytes", "10"}, "-max-request-bytes must be at least 1024"},
		{"127.0.0.1:1", []string{"-rate-burst", "0"}, "-rate-burst >= 1"},
	} {
		opts, err := parse(tt.args...).serverOptions(tt.listen)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s %v: %v", tt.listen, tt.args, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s %v: %v, want %q", tt.listen, tt.args, err, tt.want)
		case tt.want == "" && len(opts.ServerOptions) < 4:
			t.Errorf("%s %v: the limits are missing from %d server options", tt.listen, tt.args, len(opts.ServerOptions))
		}
	}
}

func TestEgressFlags(t *testing.T) {
	parse := func(args ...string) (*securityFlags, error) {
		f := &securityFlags{}
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f.register(fs)
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		return f, nil
	}
	f, _ := parse()
	p, err := f.egress()
	if err != nil || !strings.Contains(p.String(), "169.254.0.0/16") {
		t.Errorf("default policy %v %v, want the metadata ranges denied", p, err)
	}
	f, _ = parse("-deny-targets=")
	if p, err := f.egress(); err != nil || strings.Contains(p.String(), "169.254") {
		t.Errorf("-deny-targets= gives %v %v, want nothing denied", p, err)
	}
	f, _ = parse("-allow-targets", "127.0.0.0/8, 10.0.0.0/8", "-deny-targets", "10.1.0.0/16")
	if p, err := f.egress(); err != nil || len(p.Allow) != 2 || len(p.Deny) != 1 {
		t.Errorf("explicit lists give %v %v", p, err)
	}
	f, _ = parse("-allow-targets", "10.0.0.0/33")
	if _, err := f.egress(); err == nil || !strings.Contains(err.Error(), "10.0.0.0/33") {
		t.Errorf("a bad CIDR: %v", err)
	}
}

// A denied literal address is refused at AddTarget, naming the field.
func TestEgressPolicyRefusesDeniedTargets(t *testing.T) {
	bin := buildPulsed(t)
	p := startPulsed(t, bin, "-deny-targets", "127.0.0.2/32")
	out, err := goTool(t, "grpcurl", "-plaintext", "-d", `{"target": {"name": "denied", "tcp": {"address": "127.0.0.2:80"}}}`, p.addr, "pulse.v1.HealthChecker/AddTarget")
	if err == nil || !strings.Contains(out, "InvalidArgument") || !strings.Contains(out, "target.tcp.address: 127.0.0.2 is denied by egress policy (deny 127.0.0.2/32)") {
		t.Errorf("AddTarget of a denied address: %v\n%s", err, out)
	}
	p.stop(t)

	p = startPulsed(t, bin)
	out, err = goTool(t, "grpcurl", "-plaintext", "-d", `{"target": {"name": "meta", "http": {"url": "http://[::ffff:169.254.169.254]/"}}}`, p.addr, "pulse.v1.HealthChecker/AddTarget")
	if err == nil || !strings.Contains(out, "is denied by egress policy (deny 169.254.0.0/16)") {
		t.Errorf("AddTarget of the metadata address, mapped, by default: %v\n%s", err, out)
	}
	p.stop(t)
}

// The transport limits of the real pulsed: an oversized request is refused
// with RESOURCE_EXHAUSTED, calls past -max-streams-per-conn wait for a free
// stream (HTTP/2 queues them; they are never served concurrently), and a
// ping flood is answered with GOAWAY (ENHANCE_YOUR_CALM, "too_many_pings").
func TestTransportLimits(t *testing.T) {
	bin := buildPulsed(t)
	p := startPulsed(t, bin, "-max-request-bytes", "2048", "-max-streams-per-conn", "2", "-rate-limit", "0")
	client := dial(t, p.addr)

	big := tcpTarget("big")
	big.Probe = &pb.Target_Http{Http: &pb.HttpProbe{Url: "http://127.0.0.1:9/", Headers: map[string]string{"X-Pad": strings.Repeat("x", 4096)}}}
	_, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: big})
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "larger than max") {
		t.Errorf("an oversized AddTarget: %v", err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for range 2 { // two streams use up the connection's limit
		w, err := client.WatchTransitions(ctx, &pb.WatchTransitionsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	short, cancelShort := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancelShort()
	if _, err := client.Healthy(short, &pb.HealthyRequest{}); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a third call on a connection with 2 streams open: %v, want it to wait (DeadlineExceeded)", err)
	}
	cancel() // frees the streams

	conn, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(conn, http2.ClientPreface)
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	go func() {
		for i := range 50 { // far faster than one ping every 10s
			if fr.WritePing(false, [8]byte{byte(i)}) != nil {
				return
			}
		}
	}()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no GOAWAY after a ping flood: %v", err)
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			if ga.ErrCode != http2.ErrCodeEnhanceYourCalm || !strings.Contains(string(ga.DebugData()), "too_many_pings") {
				t.Errorf("GOAWAY %v %q, want ENHANCE_YOUR_CALM too_many_pings", ga.ErrCode, ga.DebugData())
			}
			break
		}
	}
	p.stop(t)
}
