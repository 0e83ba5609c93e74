package dns_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server/dns"
)

// emptyQuestion is a query header announcing one question (QDCOUNT=1)
// followed by no question at all: ID 1, RD.
var emptyQuestion = []byte{0x00, 0x01, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}

// exchangeRaw sends the bytes q as one message over network ("udp", or
// "tcp" with the 2-byte length prefix) and returns the reply as sent.
func exchangeRaw(t *testing.T, network, addr string, q []byte) []byte {
	t.Helper()
	c, err := net.DialTimeout(network, addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if network == "udp" {
		if _, err := c.Write(q); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 65535)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("udp: no reply to % x: %v", q, err)
		}
		return buf[:n]
	}
	if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(q))), q...)); err != nil {
		t.Fatal(err)
	}
	var n uint16
	if err := binary.Read(c, binary.BigEndian, &n); err != nil {
		t.Fatalf("tcp: no reply to % x: %v", q, err)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("tcp: short reply to % x: %v", q, err)
	}
	return buf
}

// packed returns m on the wire, uncompressed.
func packed(t *testing.T, m *mdns.Msg) []byte {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A query whose header promises one question and carries none, one with no
// question, one with two, and one with two OPT records are answered
// FORMERR over UDP and TCP, with the query's ID and nothing else, and the
// server answers good queries afterwards.
func TestMalformedQueryGetsFormErr(t *testing.T) {
	e := start(t, checker.Config{}, dns.Config{})
	e.add(t, true, tcpTarget("web-1", "edge", "127.0.0.1:80"))
	e.round(t)

	noQuestion := new(mdns.Msg)
	noQuestion.Id = 2
	twoQuestions := new(mdns.Msg)
	twoQuestions.Id = 3
	twoQuestions.Question = []mdns.Question{
		{Name: "edge.pulse.", Qtype: mdns.TypeA, Qclass: mdns.ClassINET},
		{Name: "edge.pulse.", Qtype: mdns.TypeAAAA, Qclass: mdns.ClassINET},
	}
	twoOPTs := new(mdns.Msg)
	twoOPTs.SetQuestion("edge.pulse.", mdns.TypeA)
	twoOPTs.Id = 4
	twoOPTs.SetEdns0(1232, false)
	twoOPTs.Extra = append(twoOPTs.Extra, &mdns.OPT{Hdr: mdns.RR_Header{Name: ".", Rrtype: mdns.TypeOPT, Class: 4096}})
	cases := []struct {
		name  string
		query []byte
		id    uint16
	}{
		{"QDCOUNT=1 and no question", emptyQuestion, 1},
		{"QDCOUNT=0", packed(t, noQuestion), 2},
		{"QDCOUNT=2", packed(t, twoQuestions), 3},
		{"two OPT records", packed(t, twoOPTs), 4},
	}
	for _, network := range []string{"udp", "tcp"} {
		for _, tc := range cases {
			raw := exchangeRaw(t, network, e.addr, tc.query)
			r := new(mdns.Msg)
			if err := r.Unpack(raw); err != nil {
				t.Fatalf("%s over %s: the reply does not parse: %v (% x)", tc.name, network, err, raw)
			}
			if r.Id != tc.id || !r.Response || r.Rcode != mdns.RcodeFormatError {
				t.Errorf("%s over %s: ID %d QR=%v %s, want ID %d QR FORMERR", tc.name, network, r.Id, r.Response, mdns.RcodeToString[r.Rcode], tc.id)
			}
			if len(r.Answer)+len(r.Ns) != 0 || r.Authoritative {
				t.Errorf("%s over %s: FORMERR carries records or AA: %v", tc.name, network, r)
			}
			// Still serving.
			m := new(mdns.Msg)
			m.SetQuestion("edge.pulse.", mdns.TypeA)
			if r := e.ask(t, network, m); r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 1 {
				t.Fatalf("after %s over %s: %s %v, want one answer", tc.name, network, mdns.RcodeToString[r.Rcode], r.Answer)
			}
		}
	}
	st := e.s.Stats()
	if want := uint64(2 * len(cases)); st.Malformed != want {
		t.Errorf("Stats().Malformed = %d, want %d", st.Malformed, want)
	}
	if st.Queries != 2*uint64(len(cases)) { // the good ones alone
		t.Errorf("Stats().Queries = %d, want %d", st.Queries, 2*len(cases))
	}
	if st.Panics != 0 {
		t.Errorf("Stats().Panics = %d, want 0", st.Panics)
	}
}

// panicWriter is a ResponseWriter whose RemoteAddr panics, as a bug
// anywhere in answering would, and which keeps what is written.
type panicWriter struct {
	discardWriter
	got []*mdns.Msg
}

func (w *panicWriter) RemoteAddr() net.Addr { panic("remote address exploded") }
func (w *panicWriter) WriteMsg(m *mdns.Msg) error {
	w.got = append(w.got, m)
	return w.discardWriter.WriteMsg(m)
}

// A panic while answering a query is answered SERVFAIL, counted and
// logged, and does not reach miekg/dns's goroutine (where it would end
// the process).
func TestPanicInHandlerAnswersServfail(t *testing.T) {
	var logs bytes.Buffer
	e := start(t, checker.Config{}, dns.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	q := new(mdns.Msg)
	q.SetQuestion("edge.pulse.", mdns.TypeA)
	w := &panicWriter{}
	e.s.ServeDNS(w, q)
	if len(w.got) != 1 {
		t.Fatalf("%d answers written, want 1", len(w.got))
	}
	r := w.got[0]
	if r.Id != q.Id || !r.Response || r.Rcode != mdns.RcodeServerFailure || len(r.Question) != 1 || len(r.Answer) != 0 {
		t.Errorf("answer after a panic: %v, want SERVFAIL to ID %d with the question", r, q.Id)
	}
	if got := e.s.Stats().Panics; got != 1 {
		t.Errorf("Stats().Panics = %d, want 1", got)
	}
	if !strings.Contains(logs.String(), "remote address exploded") {
		t.Errorf("the panic is not logged:\n%s", logs.String())
	}
	// The server still answers.
	if r := e.query(t, "edge.pulse.", mdns.TypeA); r.Rcode != mdns.RcodeNameError {
		t.Errorf("after the panic: %s, want NXDOMAIN", mdns.RcodeToString[r.Rcode])
	}
}
