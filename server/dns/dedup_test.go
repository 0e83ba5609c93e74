package dns_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	mdns "github.com/miekg/dns"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server/dns"
)

// Targets that share an address give one A or AAAA record for it, and
// targets that share an endpoint (address or host name, and port) one SRV
// record, named after the routable target whose name sorts first.
func TestSharedAddressesAnswerOnce(t *testing.T) {
	e := start(t, checker.Config{}, dns.Config{})
	e.add(t, true,
		tcpTarget("s-1", "shared", "127.0.0.1:80"),
		tcpTarget("s-2", "shared", "127.0.0.1:80"), // s-1's endpoint
		tcpTarget("s-3", "shared", "127.0.0.1:81"), // s-1's address, another port
		tcpTarget("s-4", "shared", "backend.example:80"),
		tcpTarget("s-5", "shared", "BACKEND.example:80"), // s-4's endpoint: names are case-insensitive
		tcpTarget("s-6", "shared", "backend.example:81"),
		tcpTarget("s-7", "shared", "[::1]:80"),
		tcpTarget("s-8", "shared", "[::ffff:127.0.0.1]:80"), // s-1's, mapped
		tcpTarget("s-9", "shared", "[::1]:80"),
		tcpTarget("Web", "", "127.0.0.9:80"),
		tcpTarget("web", "", "127.0.0.9:80"), // the same DNS name and address
	)
	e.round(t)
	for _, tc := range []struct {
		name  string
		qtype uint16
		want  []string
	}{
		{"shared.pulse.", mdns.TypeA, []string{"A shared.pulse. 127.0.0.1"}},
		{"shared.pulse.", mdns.TypeAAAA, []string{"AAAA shared.pulse. ::1"}},
		{"shared.pulse.", mdns.TypeANY, []string{"A shared.pulse. 127.0.0.1", "AAAA shared.pulse. ::1"}},
		{"_shared._tcp.pulse.", mdns.TypeSRV, []string{
			"SRV _shared._tcp.pulse. 80 backend.example.",
			"SRV _shared._tcp.pulse. 80 s-1.target.pulse.",
			"SRV _shared._tcp.pulse. 80 s-7.target.pulse.",
			"SRV _shared._tcp.pulse. 81 backend.example.",
			"SRV _shared._tcp.pulse. 81 s-3.target.pulse.",
		}},
		{"web.target.pulse.", mdns.TypeA, []string{"A web.target.pulse. 127.0.0.9"}},
	} {
		r := e.query(t, tc.name, tc.qtype)
		if diff := cmp.Diff(tc.want, values(r.Answer)); diff != "" {
			t.Errorf("%s %s (-want +got):\n%s", tc.name, mdns.TypeToString[tc.qtype], diff)
		}
	}
	r := e.query(t, "_shared._tcp.pulse.", mdns.TypeSRV)
	wantExtra := []string{"A s-1.target.pulse. 127.0.0.1", "A s-3.target.pulse. 127.0.0.1", "AAAA s-7.target.pulse. ::1"}
	if diff := cmp.Diff(wantExtra, values(r.Extra)); diff != "" {
		t.Errorf("SRV additional (-want +got):\n%s", diff)
	}

	// s-1 and s-2 fail (they probe one address): s-8, the same address
	// mapped, stands for the endpoint; the address stays, once.
	e.set("127.0.0.1:80", false)
	e.round(t)
	r = e.query(t, "_shared._tcp.pulse.", mdns.TypeSRV)
	if got := values(r.Answer); !cmp.Equal(got, []string{
		"SRV _shared._tcp.pulse. 80 backend.example.",
		"SRV _shared._tcp.pulse. 80 s-7.target.pulse.",
		"SRV _shared._tcp.pulse. 80 s-8.target.pulse.",
		"SRV _shared._tcp.pulse. 81 backend.example.",
		"SRV _shared._tcp.pulse. 81 s-3.target.pulse.",
	}) {
		t.Errorf("SRV with s-1 and s-2 down: %q", got)
	}
	if r := e.query(t, "shared.pulse.", mdns.TypeA); !cmp.Equal(values(r.Answer), []string{"A shared.pulse. 127.0.0.1"}) {
		t.Errorf("A with s-1 down: %q", values(r.Answer))
	}
}

// MaxAnswers counts distinct records: a cap of 2 over three targets on
// one address and one on another gives both addresses.
func TestMaxAnswersAfterDedup(t *testing.T) {
	e := start(t, checker.Config{}, dns.Config{MaxAnswers: 2})
	e.add(t, true,
		tcpTarget("m-1", "m", "127.0.0.1:80"), tcpTarget("m-2", "m", "127.0.0.1:81"),
		tcpTarget("m-3", "m", "127.0.0.1:82"), tcpTarget("m-4", "m", "127.0.0.2:80"))
	e.round(t)
	for range 20 { // without dedup, a random pick of 2 of 4
		r := e.query(t, "m.pulse.", mdns.TypeA)
		if diff := cmp.Diff([]string{"A m.pulse. 127.0.0.1", "A m.pulse. 127.0.0.2"}, values(r.Answer)); diff != "" {
			t.Fatalf("m A capped at 2 (-want +got):\n%s", diff)
		}
	}
}

// A target added on an address the group already answers for is answered
// once, though the group was asked about before (and had no repeats then).
func TestSharedAddressAddedLater(t *testing.T) {
	e := start(t, checker.Config{}, dns.Config{})
	e.add(t, true, tcpTarget("l-1", "late", "127.0.0.1:80"), tcpTarget("l-2", "late", "backend.example:80"))
	e.round(t)
	want := []string{"A late.pulse. 127.0.0.1"}
	if r := e.query(t, "late.pulse.", mdns.TypeA); !cmp.Equal(values(r.Answer), want) {
		t.Fatalf("late A: %q, want %q", values(r.Answer), want)
	}
	e.add(t, true, tcpTarget("l-3", "late", "127.0.0.1:80"), tcpTarget("l-4", "late", "backend.example:80"))
	e.round(t)
	if r := e.query(t, "late.pulse.", mdns.TypeA); !cmp.Equal(values(r.Answer), want) {
		t.Errorf("late A after adding l-3 on l-1's address: %q, want %q", values(r.Answer), want)
	}
	wantSRV := []string{"SRV late.pulse. 80 backend.example.", "SRV late.pulse. 80 l-1.target.pulse."}
	if r := e.query(t, "late.pulse.", mdns.TypeSRV); !cmp.Equal(values(r.Answer), wantSRV) {
		t.Errorf("late SRV after adding l-3 and l-4: %q, want %q", values(r.Answer), wantSRV)
	}

	// Host names alone.
	e.add(t, true, tcpTarget("h-1", "hosts", "backend.example:80"), tcpTarget("h-2", "hosts", "backend.example:81"))
	e.round(t)
	if r := e.query(t, "hosts.pulse.", mdns.TypeSRV); len(r.Answer) != 2 {
		t.Fatalf("hosts SRV: %q, want two records", values(r.Answer))
	}
	e.add(t, true, tcpTarget("h-3", "hosts", "backend.example:80"))
	e.round(t)
	wantSRV = []string{"SRV hosts.pulse. 80 backend.example.", "SRV hosts.pulse. 81 backend.example."}
	if r := e.query(t, "hosts.pulse.", mdns.TypeSRV); !cmp.Equal(values(r.Answer), wantSRV) {
		t.Errorf("hosts SRV after adding h-3 on h-1's endpoint: %q, want %q", values(r.Answer), wantSRV)
	}
}
