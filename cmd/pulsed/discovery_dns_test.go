package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/netlab"
	"github.com/pulsehealth/pulse/internal/pulsedproc"
	"github.com/pulsehealth/pulse/internal/testscale"
)

// unboundConf is a configuration of Debian's unbound serving zone
// svc.test from records (local-data lines), on port 53 of the namespace's
// loopback, refusing every other name so that it never asks another
// server. With servfail, svc.test has no data and is sent to a stub
// server it may not ask (a loopback address, which unbound refuses to
// query by default): every name in it answers SERVFAIL.
func unboundConf(dir string, servfail bool, records ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `server:
  interface: 127.0.0.1
  port: 53
  do-daemonize: no
  chroot: ""
  username: ""
  directory: %q
  pidfile: ""
  use-syslog: no
  logfile: ""
  verbosity: 1
  access-control: 127.0.0.0/8 allow
  module-config: "iterator"
  local-zone: "." refuse
`, dir)
	if servfail {
		b.WriteString("  local-zone: \"svc.test.\" transparent\nstub-zone:\n  name: \"svc.test.\"\n  stub-addr: 127.0.0.1@5399\n")
	} else {
		b.WriteString("  local-zone: \"svc.test.\" static\n")
		for _, r := range records {
			fmt.Fprintf(&b, "  local-data: %q\n", r)
		}
	}
	b.WriteString("remote-control:\n  control-enable: no\n")
	return b.String()
}

// pulsed in a network namespace of its own, whose /etc/resolv.conf (bind
// mounted in a mount namespace of its own) names an unbound on port 53 of
// that namespace's loopback, follows dns_sd_configs of type A, AAAA and
// SRV: the discovered targets appear; a record removed from unbound's
// data is drained then removed; SERVFAIL and a timeout keep the last
// good set (and are counted); the records restored are followed again.
// Every packet stays inside the namespace.
func TestDiscoveryDNSSource(t *testing.T) {
	lab := netlab.New(t) // root, or skip (fail with PULSE_REQUIRE_NETNS=1)
	unbound := debianTool(t, "unbound", "unbound")
	unshare := debianTool(t, "unshare", "util-linux")
	host := lab.AddHost("dns")
	dir := t.TempDir()

	full := []string{
		"api.svc.test. 1 IN A 127.0.0.2",
		"api.svc.test. 1 IN A 127.0.0.3",
		"api.svc.test. 1 IN AAAA ::2",
		"_api._tcp.svc.test. 1 IN SRV 0 0 8001 b1.svc.test.",
		"_api._tcp.svc.test. 1 IN SRV 0 0 8002 b2.svc.test.",
		"b1.svc.test. 1 IN A 127.0.0.5",
		"b2.svc.test. 1 IN A 127.0.0.6",
	}
	ubConf := filepath.Join(dir, "unbound.conf")
	writeFile(t, ubConf, unboundConf(dir, false, full...))
	if out, err := exec.Command(unbound+"-checkconf", ubConf).CombinedOutput(); err != nil {
		t.Fatalf("unbound-checkconf: %v\n%s", err, out)
	}
	ub := host.Command(context.Background(), unbound, "-d", "-c", ubConf)
	var ubLog strings.Builder
	ub.Stdout, ub.Stderr = &ubLog, &ubLog
	ub.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := ub.Start(); err != nil {
		t.Fatal(err)
	}
	ubDone := make(chan struct{})
	go func() { ub.Wait(); close(ubDone) }()
	t.Cleanup(func() {
		ub.Process.Signal(syscall.SIGCONT)
		ub.Process.Kill()
		<-ubDone
		if t.Failed() {
			t.Logf("unbound:\n%s", ubLog.String())
		}
	})
	// unbound answers in the namespace before pulsed starts.
	eventually(t, "unbound answering on 127.0.0.1:53 in the namespace", func() bool {
		out, _ := host.Command(t.Context(), "dig", "+short", "+time=1", "+tries=1", "@127.0.0.1", "api.svc.test", "A").Output()
		return strings.Contains(string(out), "127.0.0.2")
	})
	reloadUnbound := func(servfail bool, records ...string) {
		t.Helper()
		writeFile(t, ubConf, unboundConf(dir, servfail, records...))
		if err := ub.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}

	resolv := filepath.Join(dir, "resolv.conf")
	writeFile(t, resolv, "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
	cfgPath := filepath.Join(dir, "discovery.yaml")
	writeFile(t, cfgPath, `groups:
  - name: a
    dns_sd_configs:
      - {names: [api.svc.test], type: A, port: 8080, refresh_interval: 1s}
      - {names: [api.svc.test], type: AAAA, port: 8080, refresh_interval: 1s}
    template: {tcp: {}, interval: 1s}
    on_disappear: drain 2s
  - name: srv
    dns_sd_configs:
      - {names: [_api._tcp.svc.test], type: SRV, refresh_interval: 1s}
    template: {tcp: {}, interval: 1s}
    on_disappear: remove
`)

	bin := buildPulsed(t)
	ctx, cancel := context.WithTimeout(t.Context(), testscale.D(time.Minute))
	defer cancel()
	// ip netns exec, then a mount namespace of pulsed's own in which
	// resolv.conf is the test's: each execs the next, so the process is
	// pulsed's.
	args := []string{"netns", "exec", host.NS, unshare, "--mount", "--propagation", "private",
		"sh", "-c", `mount --bind "$0" /etc/resolv.conf && exec "$@"`, resolv,
		bin, "-data-dir", "", "-listen", "127.0.0.1:0", "-http-listen", "127.0.0.1:0", "-discovery-config", cfgPath}
	proc, err := pulsedproc.Start(ctx, "ip", args, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proc.Kill)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pulsed:\n%s", proc.Logs())
		}
	})
	conn, err := grpc.NewClient("passthrough:///"+proc.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return host.Dial(ctx, addr) }))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewHealthCheckerClient(conn)
	held := openStream(t, client, 0)

	view := func() []string {
		var out []string
		for _, st := range listTargets(t, client).GetTargets() {
			out = append(out, fmt.Sprintf("%s %s %s", st.GetSpec().GetName(), st.GetSource(), st.GetMode()))
		}
		return out
	}
	all := sorted(
		"a-127.0.0.2:8080 discovery:a MODE_ACTIVE",
		"a-127.0.0.3:8080 discovery:a MODE_ACTIVE",
		"a-::2:8080 discovery:a MODE_ACTIVE",
		"srv-b1.svc.test:8001 discovery:srv MODE_ACTIVE",
		"srv-b2.svc.test:8002 discovery:srv MODE_ACTIVE",
	)
	eventually(t, "the targets unbound's A, AAAA and SRV records name", func() bool { return cmp.Equal(view(), all) })

	// Removed from unbound's data: a-127.0.0.3 is drained then removed
	// (on_disappear: drain 2s), srv-b2 removed at once.
	reloadUnbound(false, slices.DeleteFunc(slices.Clone(full), func(r string) bool {
		return strings.Contains(r, "127.0.0.3") || strings.Contains(r, "8002")
	})...)
	eventually(t, "the removed records' targets drained, then removed", func() bool {
		evs := held.events()
		i := slices.Index(evs, "mode a-127.0.0.3:8080 MODE_DRAINING")
		return i >= 0 && slices.Contains(evs[i:], "removed a-127.0.0.3:8080") && slices.Contains(evs, "removed srv-b2.svc.test:8002")
	})
	left := sorted(
		"a-127.0.0.2:8080 discovery:a MODE_ACTIVE",
		"a-::2:8080 discovery:a MODE_ACTIVE",
		"srv-b1.svc.test:8001 discovery:srv MODE_ACTIVE",
	)
	if got := view(); !cmp.Equal(got, left) {
		t.Fatalf("after the removal: %v, want %v", got, left)
	}

	// The lookups fail (SERVFAIL, then a timeout): the last good set
	// stays through several failed refreshes, and the failures are
	// counted.
	metricsURL := "http://" + regexp.MustCompile(`msg="http listening" component=http addr=(\S+)`).FindStringSubmatch(proc.Logs())[1] + "/metrics"
	web := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return host.Dial(ctx, addr) }}}
	failures := func() int {
		resp, err := web.Get(metricsURL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		m := regexp.MustCompile(`\npulse_discovery_prometheus_sd_dns_lookup_failures_total (\d+)\n`).FindSubmatch(body)
		if m == nil {
			t.Fatalf("no pulse_discovery_prometheus_sd_dns_lookup_failures_total in /metrics")
		}
		n, _ := strconv.Atoi(string(m[1]))
		return n
	}
	for _, how := range []string{"SERVFAIL", "timeout"} {
		switch how {
		case "SERVFAIL":
			reloadUnbound(true)
			eventually(t, "unbound answers SERVFAIL", func() bool {
				out, _ := host.Command(t.Context(), "dig", "+time=1", "+tries=1", "@127.0.0.1", "api.svc.test", "A").Output()
				return strings.Contains(string(out), "status: SERVFAIL")
			})
		case "timeout":
			reloadUnbound(false, full...)
			// Paused, unbound reads queries but never answers them.
			ub.Process.Signal(syscall.SIGSTOP)
		}
		before := failures()
		// Every source of both groups fails at least twice.
		eventually(t, how+": failed lookups counted", func() bool { return failures() >= before+6 })
		if got := view(); !cmp.Equal(got, left) {
			t.Fatalf("after %s: %v, want the last good set %v", how, got, left)
		}
		if how == "timeout" {
			ub.Process.Signal(syscall.SIGCONT)
		}
	}
	if !strings.Contains(proc.Logs(), "Error refreshing DNS targets") || !strings.Contains(proc.Logs(), "127.0.0.1:53: i/o timeout") {
		t.Errorf("pulsed's log does not say the lookups failed and timed out")
	}

	// The records back (and unbound answering): followed again; the
	// target that stayed through the failures was never added twice.
	eventually(t, "the records back", func() bool { return cmp.Equal(view(), all) })
	// The view follows the registry; the held stream's events may arrive
	// a moment later.
	var bad []string
	defer func() {
		if len(bad) > 0 {
			held.mu.Lock()
			err := held.err
			held.mu.Unlock()
			t.Errorf("on the held stream (ended: %v): %v; its events: %v", err, bad, held.events())
		}
	}()
	eventually(t, "every add on the held stream", func() bool {
		count := map[string]int{}
		for _, ev := range held.events() {
			if name, ok := strings.CutPrefix(ev, "added "); ok {
				count[name]++
			}
		}
		bad = bad[:0]
		for name, n := range count {
			want := 1
			if name == "a-127.0.0.3:8080" || name == "srv-b2.svc.test:8002" {
				want = 2 // removed, then back
			}
			if n != want {
				bad = append(bad, fmt.Sprintf("%s added %d times, want %d", name, n, want))
			}
		}
		return len(bad) == 0
	})
}
