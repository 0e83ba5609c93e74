package dns_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server/dns"
)

// headerLen is the size of a DNS header.
const headerLen = 12

// fuzzIO bounds each read and write of FuzzPacket; only a server that
// fails to answer ever waits that long.
const fuzzIO = 10 * time.Second

// rawQuery builds a message by hand: a header (ID 0x1234, RD) with the
// counts given, then body as is.
func rawQuery(qd, an, ns, ar uint16, body ...byte) []byte {
	b := []byte{0x12, 0x34, 0x01, 0x00}
	for _, n := range []uint16{qd, an, ns, ar} {
		b = binary.BigEndian.AppendUint16(b, n)
	}
	return append(b, body...)
}

// frame prefixes m with its length, as DNS over TCP sends it.
func frame(m []byte) []byte {
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(m))), m...)
}

// question is edge.pulse. IN A in wire form.
var question = []byte{4, 'e', 'd', 'g', 'e', 5, 'p', 'u', 'l', 's', 'e', 0, 0, 1, 0, 1}

// packSeed packs m for the seed corpus.
func packSeed(f *testing.F, m *mdns.Msg) []byte {
	f.Helper()
	b, err := m.Pack()
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// fuzzSeeds are FuzzPacket's nasty cases. Each is also read as a TCP
// stream, so the framed ones serve both ways.
func fuzzSeeds(f *testing.F) [][]byte {
	query := func(name string, qtype uint16, edns uint16, opts ...mdns.EDNS0) []byte {
		m := new(mdns.Msg)
		m.SetQuestion(name, qtype)
		m.Id = 0x4242
		if edns > 0 {
			m.SetEdns0(edns, true)
			m.IsEdns0().Option = opts
		}
		return packSeed(f, m)
	}
	good := query("edge.pulse.", mdns.TypeA, 0)
	opt := func(size uint16, options ...byte) []byte { // an OPT record by hand
		b := []byte{0, 0, 41}
		b = binary.BigEndian.AppendUint16(b, size)
		b = append(b, 0, 0, 0, 0) // extended rcode, version, flags
		b = binary.BigEndian.AppendUint16(b, uint16(len(options)))
		return append(b, options...)
	}
	withOPT := func(o []byte) []byte { return append(rawQuery(1, 0, 0, 1, question...), o...) }
	return [][]byte{
		// QDCOUNT=1 and no question: the query that used to end pulsed.
		{0x00, 0x01, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},
		{},
		{0x00, 0x01, 0x01, 0x00, 0x00, 0x01},               // truncated header
		rawQuery(0, 0, 0, 0),                               // no question
		rawQuery(0xffff, 0, 0, 0, question...),             // huge QDCOUNT
		rawQuery(1, 0xffff, 0xffff, 0xffff),                // huge counts, nothing after
		rawQuery(1, 0, 0, 0, question[:7]...),              // the name cut short
		rawQuery(1, 0, 0, 0, question[:13]...),             // the type cut short
		rawQuery(1, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1),         // a name pointing at itself
		rawQuery(1, 0, 0, 0, 1, 'a', 0xc0, 12, 0, 1, 0, 1), // a loop through a label
		rawQuery(1, 0, 0, 0, 0xc0, 2, 0, 1, 0, 1),          // a name pointing into the header
		rawQuery(1, 0, 0, 0, 0xc0, 0xff, 0, 1, 0, 1),       // pointing past the end
		rawQuery(1, 0, 0, 0, 0x40, 'a', 0, 0, 1, 0, 1),     // a reserved label type
		rawQuery(1, 0, 0, 0, 3, 'a', '.', 'b', 5, 'p', 'u', 'l', 's', 'e', 0, 0, 1, 0, 1), // a dot inside a label
		rawQuery(2, 0, 0, 0, append(append([]byte{}, question...), question...)...),       // two questions
		withOPT(opt(4096)),
		withOPT(opt(0)),      // a UDP size under 512
		withOPT(opt(0xffff)), // over the server's
		withOPT(opt(4096, 0xfd, 0xe9, 0, 3, 'x', 'y', 'z')),                           // an unknown option
		withOPT(opt(4096, 0, 8, 0, 4, 0, 9, 24, 0)),                                   // client subnet, family 9
		withOPT(opt(4096, 0, 8, 0, 8, 0, 1, 33, 0, 1, 2, 3, 4)),                       // client subnet, /33 of IPv4
		withOPT(opt(4096, 0, 10, 0, 3, 1, 2, 3)),                                      // a cookie too short
		withOPT(opt(4096, 0, 12, 0xff, 0xff)),                                         // padding past the end
		withOPT(append(opt(4096), 0)),                                                 // an OPT with a byte past its length
		append(rawQuery(1, 0, 0, 2, question...), append(opt(4096), opt(1232)...)...), // two OPTs
		append(rawQuery(1, 1, 0, 0, question...), opt(4096)...),                       // an OPT as an answer
		func() []byte { // EDNS version 1
			o := opt(4096)
			o[6] = 1
			return withOPT(o)
		}(),
		good,
		query("EDGE.pulse.", mdns.TypeANY, 1232),
		query("_big._tcp.pulse.", mdns.TypeSRV, 0),    // truncated at 512
		query("_big._tcp.pulse.", mdns.TypeSRV, 4096), // at 4096
		query("big.pulse.", mdns.TypeA, 1232, &mdns.EDNS0_COOKIE{Code: mdns.EDNS0COOKIE, Cookie: "0102030405060708"}),
		query("shared.pulse.", mdns.TypeSRV, 4096),
		query("web-1.target.pulse.", mdns.TypeAAAA, 0),
		query("pulse.", mdns.TypeAXFR, 0),
		query("pulse.", mdns.TypeOPT, 0),
		query("example.com.", mdns.TypeA, 0),
		func() []byte { // NOTIFY with no question
			b := rawQuery(0, 0, 0, 0)
			b[2] = 4 << 3
			return b
		}(),
		func() []byte { // UPDATE
			b := rawQuery(1, 0, 0, 0, question...)
			b[2] = 5 << 3
			return b
		}(),
		func() []byte { // a response: dropped
			b := append([]byte{}, good...)
			b[2] |= 0x80
			return b
		}(),
		// TCP streams: two messages, then one cut short; a zero length.
		append(append(frame(good), frame(rawQuery(1, 0, 0, 0))...), frame(good)[:9]...),
		append([]byte{0, 0}, frame(good)...),
	}
}

// fuzzEnv is the server FuzzPacket queries: groups whose answers
// truncate, share addresses and mix families.
func fuzzEnv(f *testing.F) *env {
	e := start(f, checker.Config{}, dns.Config{})
	big(f, e, 100)
	e.add(f, true,
		tcpTarget("web-1", "edge", "127.0.0.1:8081"),
		tcpTarget("web-6", "edge", "[::1]:8086"),
		tcpTarget("web-h", "edge", "backend.example:8088"),
		tcpTarget("s-1", "shared", "127.0.0.1:80"),
		tcpTarget("s-2", "shared", "127.0.0.1:80"),
		tcpTarget("s-3", "shared", "backend.example:80"),
		tcpTarget("s-4", "shared", "backend.example:80"),
		tcpTarget("a.b", "eu.edge", "127.0.0.2:80"),
	)
	e.round(f)
	return e
}

// FuzzPacket feeds arbitrary bytes to the DNS server as a whole message
// three ways: as one UDP datagram; over TCP as one message with its length
// prefix, followed by the same bytes read as a TCP stream (their own
// length prefixes, so several messages and partial ones); and, parsed, to
// the handler directly, past miekg/dns's checks of the header. Every
// message that has a header and is not a response must get one reply,
// which parses, has its ID and the QR bit, and over UDP fits the client's
// size (512 bytes without EDNS, at most MaxUDPSize); nothing panics.
func FuzzPacket(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	e := fuzzEnv(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		panics := e.s.Stats().Panics
		fuzzUDP(t, e.addr, data)
		var stream []byte
		if len(data) <= 0xffff {
			stream = frame(data)
		}
		fuzzTCP(t, e.addr, append(stream, data...))
		fuzzHandler(t, e.s, data)
		if got := e.s.Stats().Panics; got != panics {
			t.Fatalf("the handler panicked (%d panics); see the log", got-panics)
		}
	})
}

// answered reports whether the server replies to the message m: one with
// a header that is a query, not a response (miekg/dns drops the others).
func answered(m []byte) bool { return len(m) >= headerLen && m[2]&0x80 == 0 }

// checkReply checks that reply parses and answers the query q.
func checkReply(reply, q []byte) error {
	r := new(mdns.Msg)
	if err := r.Unpack(reply); err != nil {
		return fmt.Errorf("the reply does not parse: %v\nreply % x", err, reply)
	}
	if id := binary.BigEndian.Uint16(q); r.Id != id || !r.Response {
		return fmt.Errorf("reply ID %#x QR=%v, want ID %#x and QR", r.Id, r.Response, id)
	}
	return nil
}

// udpLimit is the largest reply the query q may get over UDP: what its
// EDNS0 OPT asks, within [512, MaxUDPSize], and 512 without one.
func udpLimit(q []byte) int {
	m := new(mdns.Msg)
	if m.Unpack(q) != nil {
		return dns.MaxUDPSize // answered FORMERR: a header, and a question at most
	}
	if opt := m.IsEdns0(); opt != nil {
		return min(max(int(opt.UDPSize()), mdns.MinMsgSize), dns.MaxUDPSize)
	}
	return mdns.MinMsgSize
}

// fuzzUDP sends data as one datagram and checks the reply.
func fuzzUDP(t *testing.T, addr string, data []byte) {
	if len(data) > 65507 { // the largest UDP payload over IPv4
		return
	}
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(fuzzIO))
	if _, err := c.Write(data); err != nil {
		t.Fatalf("udp write: %v", err)
	}
	if !answered(data) {
		return
	}
	buf := make([]byte, 65536)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("udp: no reply: %v", err)
	}
	q := data[:min(len(data), dns.MaxUDPSize)] // the server reads no more
	if err := checkReply(buf[:n], q); err != nil {
		t.Fatalf("udp: %v", err)
	}
	if limit := udpLimit(q); n > limit {
		t.Fatalf("udp: a reply of %d bytes, over the limit of %d", n, limit)
	}
}

// maxTCPQueries is how many messages miekg/dns reads on one connection
// before closing it.
const maxTCPQueries = 128

// fuzzTCP sends stream on one TCP connection, closes its side and checks
// that the replies are one for each message the server answers, in order,
// up to the last message the stream holds whole.
func fuzzTCP(t *testing.T, addr string, stream []byte) {
	var want [][]byte // the messages that get a reply
	n, rest := 0, stream
	for ; len(rest) >= 2 && n < maxTCPQueries; n++ {
		l := int(binary.BigEndian.Uint16(rest))
		if len(rest) < 2+l {
			break // cut short: the server waits for the rest, then sees EOF
		}
		if m := rest[2 : 2+l]; answered(m) {
			want = append(want, m)
		}
		rest = rest[2+l:]
	}
	if n == maxTCPQueries {
		stream = stream[:len(stream)-len(rest)] // the server reads no more
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(fuzzIO))
	if _, err := c.Write(stream); err != nil {
		t.Fatalf("tcp write: %v", err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		var l uint16
		if err := binary.Read(c, binary.BigEndian, &l); err != nil {
			if errors.Is(err, io.EOF) && i == len(want) {
				return
			}
			t.Fatalf("tcp: %d replies, then %v; want %d", i, err, len(want))
		}
		reply := make([]byte, l)
		if _, err := io.ReadFull(c, reply); err != nil {
			t.Fatalf("tcp: reply %d cut short: %v", i, err)
		}
		if i >= len(want) {
			t.Fatalf("tcp: reply %d of %d expected: % x", i+1, len(want), reply)
		}
		if err := checkReply(reply, want[i]); err != nil {
			t.Fatalf("tcp: reply %d: %v", i, err)
		}
	}
}

// replyWriter is a ResponseWriter from a UDP client that keeps the reply
// packed.
type replyWriter struct {
	discardWriter
	replies [][]byte
}

func (w *replyWriter) WriteMsg(m *mdns.Msg) error {
	b, err := m.Pack()
	if err != nil {
		return err
	}
	w.replies = append(w.replies, b)
	return nil
}

// fuzzHandler hands data, if it parses, to the handler itself: the
// header checks miekg/dns makes first do not protect it.
func fuzzHandler(t *testing.T, s *dns.Server, data []byte) {
	m := new(mdns.Msg)
	if m.Unpack(data) != nil {
		return
	}
	w := &replyWriter{}
	s.ServeDNS(w, m)
	if len(w.replies) != 1 {
		t.Fatalf("handler: %d replies, want 1", len(w.replies))
	}
	if err := checkReply(w.replies[0], data); err != nil {
		t.Fatalf("handler: %v", err)
	}
	if limit := udpLimit(data); len(w.replies[0]) > limit {
		t.Fatalf("handler: a UDP reply of %d bytes, over the limit of %d", len(w.replies[0]), limit)
	}
}
