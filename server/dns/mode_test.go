package dns_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	mdns "github.com/miekg/dns"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server/dns"
)

// A draining target leaves the group's answers at once, though its probes
// pass; active again, it is back.
func TestDrainingLeavesTheAnswers(t *testing.T) {
	e := start(t, checker.Config{}, dns.Config{TTL: 3 * time.Second})
	edge(t, e)
	if _, err := e.c.SetMode(checker.ModeRequest{Target: "web-1", Mode: checker.ModeDraining, Reason: "deploy 4711"}); err != nil {
		t.Fatal(err)
	}
	e.sync(t)
	r := e.query(t, "edge.pulse.", mdns.TypeA)
	if diff := cmp.Diff([]string{"A edge.pulse. 127.0.0.2"}, values(r.Answer)); diff != "" {
		t.Errorf("edge A with web-1 draining (-want +got):\n%s", diff)
	}
	if _, err := e.c.SetMode(checker.ModeRequest{Target: "web-1", Mode: checker.ModeActive}); err != nil {
		t.Fatal(err)
	}
	e.sync(t)
	r = e.query(t, "edge.pulse.", mdns.TypeA)
	if diff := cmp.Diff([]string{"A edge.pulse. 127.0.0.1", "A edge.pulse. 127.0.0.2"}, values(r.Answer)); diff != "" {
		t.Errorf("edge A with web-1 active (-want +got):\n%s", diff)
	}
}
