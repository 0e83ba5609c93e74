package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/testscale"
)

// events summarizes a stream's ADDED, REMOVED and mode events, in order:
// "added NAME", "removed NAME", "mode NAME MODE".
func (s *stream) events() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, ev := range s.evs {
		switch {
		case ev.GetAdded() != nil:
			out = append(out, "added "+ev.GetAdded().GetSpec().GetName())
		case ev.GetRemoved() != nil:
			out = append(out, "removed "+ev.GetRemoved().GetName())
		case ev.GetMode() != nil:
			out = append(out, fmt.Sprintf("mode %s %s", ev.GetMode().GetTarget(), ev.GetMode().GetMode()))
		}
	}
	return out
}

// leadsGroup reports whether p's log says it runs group's sources.
func leadsGroup(p *pulsed, group string) bool {
	for _, l := range strings.Split(p.Logs(), "\n") {
		if strings.Contains(l, `msg="leading discovery group: running its sources"`) && strings.Contains(l, "group="+group+" ") {
			return true
		}
	}
	return false
}

// Three pulsed replicas on one etcd share a discovery group on a file
// source: exactly one runs it; when it is killed (kill -9), another takes
// over within the election lease TTL, re-syncs from the file without
// adding any target twice or removing one still listed, and a drain the
// dead leader began ends on time with the target's removal.
func TestDiscoveryReplicasOnEtcd(t *testing.T) {
	etcd := etcdtest.Start(t, time.Second)
	ups := []string{acceptAndClose(t), acceptAndClose(t), acceptAndClose(t)}
	dir := t.TempDir()
	sd := filepath.Join(dir, "api.json")
	writeSD := func(addrs ...string) {
		t.Helper()
		body := `[{"targets": ["` + strings.Join(addrs, `", "`) + `"]}]`
		if len(addrs) == 0 {
			body = `[]`
		}
		writeFile(t, sd+".tmp", body)
		if err := os.Rename(sd+".tmp", sd); err != nil {
			t.Fatal(err)
		}
	}
	writeSD()
	cfgPath := filepath.Join(dir, "discovery.yaml")
	// A drain long enough to outlive the handover (TTL 2s, then an
	// answer within 5s) and the new leader's first answer.
	const drain = 15 * time.Second
	writeFile(t, cfgPath, fmt.Sprintf("groups:\n  - name: api\n    file_sd_configs: [{files: [%q], refresh_interval: 100ms}]\n    template: {tcp: {}, interval: 200ms, rise: 1}\n    on_disappear: drain %v\n", sd, drain))

	bin := buildPulsed(t)
	var reps [3]*pulsed
	var clients [3]pb.HealthCheckerClient
	for i := range reps {
		reps[i] = startPulsed(t, bin, "-registry", "etcd", "-etcd-endpoints", etcd.Endpoint,
			"-etcd-prefix", "/pulse-disco/", "-etcd-lease-ttl", "2s", "-replica-id", fmt.Sprintf("r%d", i+1),
			"-discovery-config", cfgPath)
		clients[i] = dial(t, reps[i].Addr)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, p := range reps {
				t.Logf("r%d logs:\n%s", i+1, p.Logs())
			}
		}
	})
	leader := -1
	eventually(t, "one replica leads the group", func() bool {
		n := 0
		for i, p := range reps {
			if leadsGroup(p, "api") {
				leader, n = i, n+1
			}
		}
		return n == 1
	})
	var survivors []int
	for i := range reps {
		if i != leader {
			survivors = append(survivors, i)
		}
	}
	t.Logf("r%d leads; survivors r%d and r%d", leader+1, survivors[0]+1, survivors[1]+1)
	// The others know who leads and run nothing.
	for _, i := range survivors {
		eventually(t, fmt.Sprintf("r%d's pulse_discovery_leader", i+1), func() bool {
			return strings.Contains(metricsOf(t, reps[i]), "\npulse_discovery_leader{group=\"api\"} 0\n")
		})
		if !strings.Contains(reps[i].Logs(), "discovery group led by another replica") || !strings.Contains(reps[i].Logs(), fmt.Sprintf("leader=r%d", leader+1)) {
			t.Errorf("r%d does not say r%d leads", i+1, leader+1)
		}
	}
	if !strings.Contains(metricsOf(t, reps[leader]), "\npulse_discovery_leader{group=\"api\"} 1\n") {
		t.Errorf("the leader's pulse_discovery_leader is not 1")
	}

	held := openStream(t, clients[survivors[1]], 0)
	view := func(c pb.HealthCheckerClient) []string {
		var out []string
		for _, st := range listTargets(t, c).GetTargets() {
			out = append(out, fmt.Sprintf("%s %s %s", st.GetSpec().GetName(), st.GetSource(), st.GetMode()))
		}
		return out
	}
	a, b, c := "api-"+ups[0], "api-"+ups[1], "api-"+ups[2]
	writeSD(ups[0], ups[1], ups[2])
	for _, i := range survivors {
		eventually(t, fmt.Sprintf("r%d lists the discovered targets", i+1), func() bool {
			return cmp.Equal(view(clients[i]), sorted(a+" discovery:api MODE_ACTIVE", b+" discovery:api MODE_ACTIVE", c+" discovery:api MODE_ACTIVE"))
		})
	}
	// The leader drains c, which left the file; it is killed mid-drain.
	writeSD(ups[0], ups[1])
	eventually(t, "c drained", func() bool { return slices.Contains(held.events(), "mode "+c+" MODE_DRAINING") })
	drainedAt := time.Now()
	reps[leader].Signal(syscall.SIGKILL)
	<-reps[leader].Done()
	killed := time.Now()

	next := -1
	eventually(t, "a survivor takes the group over", func() bool {
		for _, i := range survivors {
			if leadsGroup(reps[i], "api") {
				next = i
				return true
			}
		}
		return false
	})
	took := time.Since(killed)
	t.Logf("r%d took the group over %v after r%d was killed (election lease TTL 2s)", next+1, took, leader+1)
	if took > 2*time.Second+testscale.D(5*time.Second) {
		t.Errorf("takeover took %v, far more than the 2s TTL", took)
	}
	// Its first answer: the re-sync.
	eventually(t, "the new leader's first answer", func() bool {
		return strings.Contains(reps[next].Logs(), `msg="discovery answer applied"`)
	})
	if time.Since(drainedAt) >= drain {
		t.Fatalf("the re-sync came %v after the drain began, after the drain's end: the test shows nothing", time.Since(drainedAt))
	}
	// Still draining the same drain; then a new target, and the drain's
	// end removes c.
	for _, i := range survivors {
		if got := view(clients[i]); !cmp.Equal(got, sorted(a+" discovery:api MODE_ACTIVE", b+" discovery:api MODE_ACTIVE", c+" discovery:api MODE_DRAINING")) {
			t.Errorf("r%d after the re-sync: %v", i+1, got)
		}
	}
	writeSD(ups[0], ups[1], "127.0.0.1:9")
	d := "api-127.0.0.1:9"
	eventually(t, "d added and c removed", func() bool {
		evs := held.events()
		return slices.Contains(evs, "added "+d) && slices.Contains(evs, "removed "+c)
	})
	removedAfter := time.Since(drainedAt)
	if removedAfter < drain-time.Second {
		t.Errorf("c removed %v after its drain began, before the drain's %v", removedAfter, drain)
	}
	for _, i := range survivors {
		eventually(t, fmt.Sprintf("r%d's final list", i+1), func() bool {
			return cmp.Equal(view(clients[i]), sorted(a+" discovery:api MODE_ACTIVE", b+" discovery:api MODE_ACTIVE", d+" discovery:api MODE_ACTIVE"))
		})
	}
	want := []string{"added " + a, "added " + b, "added " + c, "mode " + c + " MODE_DRAINING", "added " + d, "removed " + c}
	got := held.events()
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the stream on r%d: each target added once, only c removed, c drained once (-want +got):\n%s", survivors[1]+1, diff)
	}

	// A SIGHUP that drops the group from the leader's configuration (and
	// adds another): the leader resigns it and the other replica, whose
	// configuration still has it, takes it over; the new group runs on
	// the one replica that has it.
	other := survivors[0]
	if other == next {
		other = survivors[1]
	}
	writeFile(t, cfgPath, fmt.Sprintf("groups:\n  - name: web\n    file_sd_configs: [{files: [%q], refresh_interval: 100ms}]\n    template: {tcp: {}, interval: 200ms, rise: 1}\n", sd))
	reps[next].Signal(syscall.SIGHUP)
	eventually(t, "the old leader resigns the group, and the other replica takes it", func() bool {
		return strings.Contains(reps[next].Logs(), `msg="resigned from discovery group" component=discovery group=api`) && leadsGroup(reps[other], "api")
	})
	eventually(t, "the new group's targets", func() bool {
		return slices.Contains(held.events(), "added web-"+ups[0])
	})
	if !leadsGroup(reps[next], "web") {
		t.Errorf("r%d does not run the group only it has", next+1)
	}
	for _, ev := range held.events() {
		if strings.HasPrefix(ev, "removed api-") && ev != "removed "+c {
			t.Errorf("after the group moved: %s", ev)
		}
	}

	// A SIGHUP on the other replica drops the group from the last
	// configuration that had it: its targets leave as on_disappear says.
	reps[other].Signal(syscall.SIGHUP)
	eventually(t, "the group no replica has drains its targets", func() bool {
		evs := held.events()
		return slices.Contains(evs, "mode "+a+" MODE_DRAINING") && slices.Contains(evs, "mode "+b+" MODE_DRAINING") && slices.Contains(evs, "mode "+d+" MODE_DRAINING")
	})
}

// metricsOf returns p's /metrics.
func metricsOf(t *testing.T, p *pulsed) string {
	t.Helper()
	addr := ""
	for _, l := range strings.Split(p.Logs(), "\n") {
		if i := strings.Index(l, `msg="http listening"`); i >= 0 {
			if j := strings.Index(l, " addr="); j >= 0 {
				addr = strings.Fields(l[j+len(" addr="):])[0]
			}
		}
	}
	if addr == "" {
		t.Fatal("no HTTP listener address in the log")
	}
	_, body := httpGet(t, "http://"+addr+"/metrics")
	return body
}

// TestDiscoveryReplicaCutOffStops: a replica cut off from etcd while it
// campaigns for a discovery group another replica leads stops cleanly at
// SIGTERM within a few seconds, rather than waiting for etcd to take its
// resignation until the shutdown timeout forces it out with status 1.
func TestDiscoveryReplicaCutOffStops(t *testing.T) {
	etcd := etcdtest.Start(t, time.Second)
	proxy := etcd.Proxy(t)
	dir := t.TempDir()
	sd := filepath.Join(dir, "api.json")
	writeFile(t, sd, `[]`)
	cfgPath := filepath.Join(dir, "discovery.yaml")
	writeFile(t, cfgPath, fmt.Sprintf("groups:\n  - name: api\n    file_sd_configs: [{files: [%q], refresh_interval: 100ms}]\n    template: {tcp: {}}\n", sd))
	bin := buildPulsed(t)
	replica := func(id, endpoint string) *pulsed {
		return startPulsed(t, bin, "-registry", "etcd", "-etcd-endpoints", endpoint, "-etcd-prefix", "/pulse-cut/",
			"-etcd-lease-ttl", "2s", "-replica-id", id, "-discovery-config", cfgPath, "-shutdown-timeout", "20s")
	}
	r1 := replica("r1", etcd.Endpoint)
	eventually(t, "r1 leads the group", func() bool { return leadsGroup(r1, "api") })
	r2 := replica("r2", proxy.Endpoint)
	eventually(t, "r2 sees r1 lead", func() bool { return strings.Contains(r2.Logs(), "discovery group led by another replica") })
	// Both candidates' keys are in the election: r2 waits in its
	// campaign for r1's to go, the state a resignation starts from.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	eventually(t, "r2 campaigns", func() bool {
		resp, err := cli.Get(t.Context(), "/pulse-cut/discovery/api/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 2
	})

	proxy.Cut()
	start := time.Now()
	if err := r2.Stop(testscale.D(30 * time.Second)); err != nil {
		t.Fatalf("r2 cut off from etcd, at SIGTERM: %v\n%s", err, r2.Logs())
	}
	took := time.Since(start)
	t.Logf("r2, cut off from etcd, exited %v after SIGTERM", took.Round(time.Millisecond))
	// The elections' resignation and the registry's lease revocation each
	// wait 2s for etcd; the shutdown timeout is 20s.
	if took > testscale.D(10*time.Second) {
		t.Errorf("r2 took %v to stop, cut off from etcd\n%s", took, r2.Logs())
	}
}
