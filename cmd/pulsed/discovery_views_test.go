package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// Discovered targets are served like any other: a file_sd target that
// passes its check is in its group's A records on pulsed's DNS interface
// and in its group's xDS endpoints, one that leaves the file leaves them,
// and a restart on the same data directory finds the discovered targets
// stored.
func TestDiscoveredTargetsInTheDNSViewAndTheStore(t *testing.T) {
	ups := []string{acceptAndClose(t), acceptAndClose(t)}
	dir := t.TempDir()
	sd := filepath.Join(dir, "api.json")
	writeSD := func(addrs ...string) {
		t.Helper()
		writeFile(t, sd+".tmp", `[{"targets": ["`+strings.Join(addrs, `", "`)+`"]}]`)
		if err := os.Rename(sd+".tmp", sd); err != nil {
			t.Fatal(err)
		}
	}
	writeSD(ups...)
	cfgPath := filepath.Join(dir, "discovery.yaml")
	writeFile(t, cfgPath, fmt.Sprintf("groups:\n  - name: api\n    file_sd_configs: [{files: [%q], refresh_interval: 100ms}]\n    template: {group: api, tcp: {}, interval: 100ms, rise: 1}\n    on_disappear: remove\n", sd))
	data := filepath.Join(dir, "data")

	bin := buildPulsed(t)
	p := startPulsed(t, bin, "-discovery-config", cfgPath, "-data-dir", data, "-dns-listen", "127.0.0.1:0", "-xds")
	dns := dnsAddr(t, p)
	client := dial(t, p.Addr)
	routable := func() []string {
		list, err := client.ListTargets(t.Context(), &pb.ListTargetsRequest{Group: "api"})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, st := range list.GetTargets() {
			if st.GetRoutable() {
				out = append(out, st.GetSpec().GetName())
			}
		}
		return out
	}
	eventually(t, "both discovered targets routable", func() bool { return len(routable()) == 2 })
	if got := resolveA(t, dns, "api.pulse."); !slices.Equal(got, []string{"127.0.0.1"}) {
		t.Errorf("A api.pulse. = %v, want 127.0.0.1", got)
	}
	eventually(t, "both discovered targets HEALTHY in api's xDS endpoints", func() bool {
		got := healthOf(t, firstEDS(t, p.Addr, "api"))
		return got == ups[0]+" HEALTHY, "+ups[1]+" HEALTHY" || got == ups[1]+" HEALTHY, "+ups[0]+" HEALTHY"
	})
	srvTarget := "api-" + ups[0] // the one that stays
	eventually(t, "the target's own name resolves", func() bool {
		return slices.Equal(resolveA(t, dns, srvTarget+".target.pulse."), []string{"127.0.0.1"})
	})

	writeSD(ups[0])
	gone := "api-" + ups[1]
	eventually(t, "the departed target out of the DNS view and the xDS endpoints", func() bool {
		return len(resolveA(t, dns, gone+".target.pulse.")) == 0 && slices.Equal(routable(), []string{srvTarget}) &&
			healthOf(t, firstEDS(t, p.Addr, "api")) == ups[0]+" HEALTHY"
	})
	p.stop(t)

	// The source is gone at the restart: the stored set is served until it
	// is read again.
	if err := os.Remove(sd); err != nil {
		t.Fatal(err)
	}
	p = startPulsed(t, bin, "-discovery-config", cfgPath, "-data-dir", data)
	list, err := dial(t, p.Addr).ListTargets(t.Context(), &pb.ListTargetsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, st := range list.GetTargets() {
		names = append(names, st.GetSpec().GetName()+" "+st.GetSource())
	}
	if !slices.Equal(names, []string{srvTarget + " discovery:api"}) {
		t.Errorf("after a restart: %v, want the stored discovered target", names)
	}
	p.stop(t)
}

// acceptAndClose returns the address of a loopback listener that accepts
// every connection and closes it, a live backend for TCP checks, until the
// test ends.
func acceptAndClose(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return lis.Addr().String()
}
