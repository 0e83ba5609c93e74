package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// TestDiscoveryFileSource runs a real pulsed on a file_sd source on
// loopback: discovered targets appear with their source, start UNHEALTHY
// and turn HEALTHY after their checks, one that leaves the file is
// drained, and a bad config on SIGHUP keeps the running one.
func TestDiscoveryFileSource(t *testing.T) {
	up := acceptAndClose(t)

	dir := t.TempDir()
	sd := filepath.Join(dir, "api.json")
	writeSD := func(addrs ...string) {
		t.Helper()
		body := `[{"targets": ["` + strings.Join(addrs, `", "`) + `"]}]`
		writeFile(t, sd+".tmp", body)
		if err := os.Rename(sd+".tmp", sd); err != nil {
			t.Fatal(err)
		}
	}
	writeSD(up, "127.0.0.1:9")
	cfgPath := filepath.Join(dir, "discovery.yaml")
	good := fmt.Sprintf("groups:\n  - name: api\n    file_sd_configs: [{files: [%q], refresh_interval: 100ms}]\n    template: {tcp: {}, interval: 100ms, rise: 1}\n    on_disappear: drain 1m\n", sd)
	writeFile(t, cfgPath, good)

	bin := buildPulsed(t)
	p := startPulsed(t, bin, "-discovery-config", cfgPath)
	client := dial(t, p.Addr)
	view := func() []string {
		list, err := client.ListTargets(t.Context(), &pb.ListTargetsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, st := range list.GetTargets() {
			out = append(out, fmt.Sprintf("%s %s %s", st.GetSpec().GetName(), st.GetSource(), st.GetMode()))
		}
		return out
	}
	upName := "api-" + up
	eventually(t, "the discovered targets", func() bool {
		return cmp.Equal(view(), sorted("api-127.0.0.1:9 discovery:api MODE_ACTIVE", upName+" discovery:api MODE_ACTIVE"))
	})
	states := func() []string {
		list, err := client.ListTargets(t.Context(), &pb.ListTargetsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, st := range list.GetTargets() {
			out = append(out, st.GetSpec().GetName()+" "+st.GetState().String())
		}
		return out
	}
	// The dead address never becomes routable: UNHEALTHY until a check
	// passes, which none does.
	eventually(t, "the live backend healthy after its check", func() bool {
		return cmp.Equal(states(), sorted("api-127.0.0.1:9 STATE_UNHEALTHY", upName+" STATE_HEALTHY"))
	})

	writeSD(up)
	eventually(t, "the departed target drained", func() bool {
		return cmp.Equal(view(), sorted("api-127.0.0.1:9 discovery:api MODE_DRAINING", upName+" discovery:api MODE_ACTIVE"))
	})

	writeFile(t, cfgPath, "groups:\n  - name: api\n    file_sd_configs: [{files: [x.json]}]\n    template: {tcp: {}}\n    on_disappear: soon\n")
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the bad config's log line", func() bool {
		return strings.Contains(p.Logs(), "discovery config not reloaded: the running configuration stays") && strings.Contains(p.Logs(), "on_disappear")
	})
	writeSD(up, "127.0.0.1:9")
	eventually(t, "the running config still follows the file", func() bool {
		return cmp.Equal(view(), sorted("api-127.0.0.1:9 discovery:api MODE_ACTIVE", upName+" discovery:api MODE_ACTIVE"))
	})
	p.stop(t)
}

func sorted(s ...string) []string { slices.Sort(s); return s }

// TestDiscoveryBadConfigRefusesToStart: pulsed does not start on a bad
// -discovery-config, and says which field is wrong.
func TestDiscoveryBadConfigRefusesToStart(t *testing.T) {
	cfgPath := filepath.Join(t.TempDir(), "discovery.yaml")
	writeFile(t, cfgPath, "groups:\n  - name: api\n    http_sd_configs: [{url: 'http://127.0.0.1:1/', authorization: {credentials: hunter2}}]\n    template: {tcp: {}, rize: 2}\n")
	out, err := exec.CommandContext(t.Context(), buildPulsed(t), "-listen", "127.0.0.1:0", "-http-listen", "127.0.0.1:0", "-data-dir", "", "-discovery-config", cfgPath).CombinedOutput()
	if err == nil {
		t.Fatalf("pulsed started on a bad config:\n%s", out)
	}
	if !strings.Contains(string(out), "-discovery-config: "+cfgPath) || !strings.Contains(string(out), "rize") {
		t.Errorf("output does not name the file and the field:\n%s", out)
	}
	if strings.Contains(string(out), "hunter2") {
		t.Errorf("output quotes a secret:\n%s", out)
	}
}
