package probe

import (
	"errors"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// startDNS serves a small zone over UDP on loopback until the test ends:
// api.internal. A 10.0.0.7 and 10.0.0.8, _db._tcp.internal. SRV,
// txt.internal. TXT, big.internal. with more A records than fit a UDP
// answer, and NXDOMAIN for the rest.
func startDNS(t *testing.T) string {
	t.Helper()
	// The server answers UDP and TCP on one port: the TCP port may be taken
	// by another process once the UDP one is chosen, so try a few.
	var (
		pc  net.PacketConn
		ln  net.Listener
		err error
	)
	for range 20 {
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		_ = pc.Close()
	}
	if err != nil {
		t.Fatalf("no port free for both UDP and TCP: %v", err)
	}
	zone := map[string][]string{
		"api.internal.":      {"api.internal. 60 IN A 10.0.0.7", "api.internal. 60 IN A 10.0.0.8"},
		"_db._tcp.internal.": {"_db._tcp.internal. 60 IN SRV 10 20 5432 db-1.internal."},
		"txt.internal.":      {`txt.internal. 60 IN TXT "status=ready"`},
	}
	for i := range 60 {
		zone["big.internal."] = append(zone["big.internal."], "big.internal. 60 IN A 10.1.0."+strconv.Itoa(i))
	}
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		records, ok := zone[q.Name]
		if !ok {
			m.Rcode = dns.RcodeNameError
		}
		for _, text := range records {
			rr, err := dns.NewRR(text)
			if err != nil {
				panic(err)
			}
			if rr.Header().Rrtype == q.Qtype {
				m.Answer = append(m.Answer, rr)
			}
		}
		if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
			m.Truncate(512)
		}
		_ = w.WriteMsg(m)
	})
	udp := &dns.Server{PacketConn: pc, Handler: handler}
	tcp := &dns.Server{Listener: ln, Handler: handler}
	started := make(chan struct{}, 2)
	udp.NotifyStartedFunc = func() { started <- struct{}{} }
	tcp.NotifyStartedFunc = func() { started <- struct{}{} }
	done := make(chan struct{}, 2)
	go func() { _ = udp.ActivateAndServe(); done <- struct{}{} }()
	go func() { _ = tcp.ActivateAndServe(); done <- struct{}{} }()
	<-started
	<-started
	t.Cleanup(func() {
		_ = udp.Shutdown()
		_ = tcp.Shutdown()
		<-done
		<-done
	})
	return pc.LocalAddr().String()
}

func TestDNS(t *testing.T) {
	server := startDNS(t)
	tests := []struct {
		name string
		spec DNSSpec
		want string // "" means pass
	}{
		{"A", DNSSpec{Name: "api.internal"}, ""},
		{"A contains", DNSSpec{Name: "api.internal.", AnswerContains: "10.0.0.8"}, ""},
		{"A missing address", DNSSpec{Name: "api.internal", AnswerContains: "10.0.0.9"}, `dns: no A record of api.internal. contains "10.0.0.9" (2 records)`},
		{"NXDOMAIN", DNSSpec{Name: "gone.internal"}, "dns: NXDOMAIN for gone.internal."},
		{"NXDOMAIN expected", DNSSpec{Name: "gone.internal", Rcode: "NXDOMAIN"}, ""},
		{"NOERROR when NXDOMAIN expected", DNSSpec{Name: "api.internal", Rcode: "NXDOMAIN"}, "dns: NOERROR for api.internal., want NXDOMAIN"},
		{"SRV regex", DNSSpec{Name: "_db._tcp.internal", Type: "SRV", AnswerRegex: `^\d+ \d+ 5432 db-\d\.internal\.$`}, ""},
		{"TXT", DNSSpec{Name: "txt.internal", Type: "TXT", AnswerContains: "status=ready"}, ""},
		{"no AAAA", DNSSpec{Name: "api.internal", Type: "AAAA", AnswerContains: "::"}, "dns: no AAAA record for api.internal."},
		{"truncated, then TCP", DNSSpec{Name: "big.internal", AnswerContains: "10.1.0.59"}, ""},
	}
	f := newTestFactory(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.spec
			spec.Server = server
			err := probeWithin(t, timeoutCtx(t, 5*time.Second), newProber(t, f, Spec{DNS: &spec}))
			if got := Describe(err); got != tt.want {
				t.Errorf("Probe: %q (%v), want %q", got, err, tt.want)
			}
		})
	}
	t.Run("silent server", func(t *testing.T) {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		err = probeWithin(t, timeoutCtx(t, 200*time.Millisecond), newProber(t, f, Spec{DNS: &DNSSpec{Name: "api.internal", Server: pc.LocalAddr().String()}}))
		if got := Describe(err); got != "timeout" {
			t.Errorf("Probe: %q (%v), want timeout", got, err)
		}
	})
}

// The egress policy covers the DNS server's address, at New and at each
// dial of a name.
func TestEgressCoversNewDials(t *testing.T) {
	f := NewFactory()
	defer f.Close()
	_, err := f.New(Spec{DNS: &DNSSpec{Name: "api.internal", Server: "169.254.169.254:53"}})
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "dns.server" {
		t.Fatalf("New() = %v, want a FieldError for dns.server", err)
	}
	deny, err := ParseEgressPolicy(nil, []string{"127.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	fd := NewFactoryWith(FactoryOptions{Egress: deny, Resolver: staticResolver{"dns.local": {netip.MustParseAddr("127.0.0.1")}}})
	defer fd.Close()
	p := newProber(t, fd, Spec{DNS: &DNSSpec{Name: "api.internal", Server: "dns.local:53"}})
	wantFail(t, probeWithin(t, timeoutCtx(t, 2*time.Second), p), "dns.local resolves to 127.0.0.1, which is denied by egress policy")

	// So do the dials of the other new paths: https with TLS options (its
	// own transport), TCP with TLS and steps, gRPC with TLS options.
	fd2 := NewFactoryWith(FactoryOptions{Egress: deny, Resolver: staticResolver{"svc.local": {netip.MustParseAddr("127.0.0.1")}}})
	defer fd2.Close()
	for _, s := range []Spec{
		{HTTP: &HTTPSpec{URL: "https://svc.local:8443/", TLS: &TLSSpec{InsecureSkipVerify: true}, BodyContains: "x"}},
		{HTTP: &HTTPSpec{URL: "http://svc.local:8080/", Method: "POST", Body: "x"}},
		{TCP: &TCPSpec{Address: "svc.local:6379", TLS: &TLSSpec{}, Steps: []TCPStep{{Send: "PING\r\n"}}}},
		{GRPC: &GRPCSpec{Address: "svc.local:50051", TLSOptions: &TLSSpec{}}},
	} {
		p := newProber(t, fd2, s)
		wantFail(t, probeWithin(t, timeoutCtx(t, 2*time.Second), p), "svc.local resolves to 127.0.0.1, which is denied by egress policy")
		closeProber(p)
	}
}
