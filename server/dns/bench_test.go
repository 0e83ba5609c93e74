package dns_test

import (
	"net"
	"testing"

	mdns "github.com/miekg/dns"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server/dns"
)

// staticServer serves a fixed reply, the answer records given, to every
// query: the baseline, the cost of miekg/dns and the socket alone.
func staticServer(b *testing.B, answer []mdns.RR) string {
	b.Helper()
	h := mdns.HandlerFunc(func(w mdns.ResponseWriter, r *mdns.Msg) {
		m := new(mdns.Msg)
		m.SetReply(r)
		m.Answer = answer
		m.SetEdns0(dns.MaxUDPSize, false)
		w.WriteMsg(m)
	})
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	started := make(chan struct{})
	srv := &mdns.Server{PacketConn: pc, Handler: h, UDPSize: dns.MaxUDPSize, NotifyStartedFunc: func() { close(started) }}
	go srv.ActivateAndServe()
	<-started
	b.Cleanup(func() { srv.Shutdown() })
	return pc.LocalAddr().String()
}

// fullAnswer returns group big's 100 A records, asked over TCP.
func fullAnswer(b *testing.B, e *env) []mdns.RR {
	b.Helper()
	q := new(mdns.Msg)
	q.SetQuestion("big.pulse.", mdns.TypeA)
	r := e.ask(b, "tcp", q)
	if len(r.Answer) != 100 {
		b.Fatalf("%d answers, want 100", len(r.Answer))
	}
	return r.Answer
}

// BenchmarkDNS measures queries a second, one at a time over UDP on
// loopback, for a group of 100 routable targets: its A records, its SRV
// records (with the additional addresses, truncated to 4096 bytes), and
// the baseline, the same miekg/dns server answering the same 100 A records
// from a fixed reply. allocs/op counts the client's allocations too; see
// BenchmarkDNSHandler for the server's alone.
func BenchmarkDNS(b *testing.B) {
	e := start(b, checker.Config{}, dns.Config{})
	big(b, e, 100)
	static := staticServer(b, fullAnswer(b, e))
	for _, bc := range []struct {
		name, addr, qname string
		qtype             uint16
	}{
		{"static-100A", static, "big.pulse.", mdns.TypeA},
		{"group-100A", e.addr, "big.pulse.", mdns.TypeA},
		{"group-100SRV", e.addr, "_big._tcp.pulse.", mdns.TypeSRV},
	} {
		b.Run(bc.name, func(b *testing.B) {
			co, err := (&mdns.Client{Net: "udp", UDPSize: dns.MaxUDPSize}).Dial(bc.addr)
			if err != nil {
				b.Fatal(err)
			}
			defer co.Close()
			co.UDPSize = dns.MaxUDPSize
			q := new(mdns.Msg)
			q.SetQuestion(bc.qname, bc.qtype)
			q.SetEdns0(dns.MaxUDPSize, false)
			b.ReportAllocs()
			for b.Loop() {
				if err := co.WriteMsg(q); err != nil {
					b.Fatal(err)
				}
				r, err := co.ReadMsg()
				if err != nil {
					b.Fatal(err)
				}
				if len(r.Answer) < 50 {
					b.Fatalf("%d answers", len(r.Answer))
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "queries/s")
		})
	}
}

// discardWriter is a ResponseWriter that packs the reply and drops it.
type discardWriter struct{ buf []byte }

func (w *discardWriter) LocalAddr() net.Addr {
	return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}
}
func (w *discardWriter) RemoteAddr() net.Addr {
	return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
}
func (w *discardWriter) WriteMsg(m *mdns.Msg) error {
	var err error
	w.buf, err = m.PackBuffer(w.buf)
	return err
}
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) Close() error                { return nil }
func (w *discardWriter) TsigStatus() error           { return nil }
func (w *discardWriter) TsigTimersOnly(bool)         {}
func (w *discardWriter) Hijack()                     {}

// BenchmarkDNSHandler measures the server's own cost per query, without
// the network: the handler's time and allocations for the A query of a
// group of 100 targets, packing included, against the fixed reply.
func BenchmarkDNSHandler(b *testing.B) {
	e := start(b, checker.Config{}, dns.Config{})
	big(b, e, 100)
	answer := fullAnswer(b, e)
	q := new(mdns.Msg)
	q.SetQuestion("big.pulse.", mdns.TypeA)
	q.SetEdns0(dns.MaxUDPSize, false)
	static := mdns.HandlerFunc(func(w mdns.ResponseWriter, r *mdns.Msg) {
		m := new(mdns.Msg)
		m.SetReply(r)
		m.Answer = answer
		m.SetEdns0(dns.MaxUDPSize, false)
		w.WriteMsg(m)
	})
	for _, bc := range []struct {
		name string
		h    mdns.Handler
	}{{"static-100A", static}, {"group-100A", e.s}} {
		b.Run(bc.name, func(b *testing.B) {
			w := &discardWriter{buf: make([]byte, dns.MaxUDPSize)}
			b.ReportAllocs()
			for b.Loop() {
				bc.h.ServeDNS(w, q)
			}
		})
	}
}
