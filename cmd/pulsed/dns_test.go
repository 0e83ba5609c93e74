package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

func TestDNSFlags(t *testing.T) {
	checkFlags(t, []flagCase{
		{[]string{"-dns-listen", "127.0.0.1:8600"}, ""},
		{[]string{"-dns-listen", "localhost:8600", "-dns-domain", "consul", "-dns-ttl", "5s", "-dns-max-answers", "3"}, ""},
		{[]string{"-dns-listen", "0.0.0.0:8600"}, "-dns-listen 0.0.0.0:8600 is reachable from other machines"},
		{[]string{"-dns-listen", ":8600"}, "-dns-allow"},
		{[]string{"-dns-listen", "0.0.0.0:8600", "-insecure"}, ""},
		{[]string{"-dns-listen", "0.0.0.0:8600", "-dns-allow", "10.0.0.0/8, 192.168.1.7"}, ""},
		{[]string{"-dns-listen", "127.0.0.1:8600", "-dns-allow", "10.0.0.0/33"}, `-dns-allow: "10.0.0.0/33" is neither`},
		{[]string{"-dns-listen", "127.0.0.1:8600", "-dns-ttl", "1500ms"}, "-dns-ttl: must be whole seconds"},
		{[]string{"-dns-listen", "127.0.0.1:8600", "-dns-ttl", "-1s"}, "-dns-ttl"},
		{[]string{"-dns-listen", "127.0.0.1:8600", "-dns-domain", "."}, "-dns-domain: must not be the root"},
		{[]string{"-dns-listen", "127.0.0.1:8600", "-dns-max-answers", "-1"}, "-dns-max-answers"},
		{[]string{"-dns-listen", "127.0.0.1:8600", "-dns-rate-limit", "-2"}, "-dns-rate-limit"},
		{[]string{"-dns-listen", "127.0.0.1:8600", "-dns-rate-burst", "0"}, "-dns-rate-burst"},
		{[]string{"-dns-ttl", "1500ms"}, "-dns-ttl"}, // checked with DNS off too
		{[]string{"-dns-allow", "nonsense"}, "-dns-allow"},
		{[]string{}, ""},
	})
}

var (
	aptUpdate    sync.Once
	aptUpdateErr error
)

// debianTool returns the path of cmd, from Debian's package pkg. When it is
// missing the test installs the package if it runs as root with CI=true or
// PULSE_INSTALL_DEPS=1, and skips otherwise, saying how to install it.
func debianTool(t *testing.T, cmd, pkg string) string {
	t.Helper()
	if p, err := exec.LookPath(cmd); err == nil {
		return p
	}
	if os.Geteuid() != 0 || (os.Getenv("CI") != "true" && os.Getenv("PULSE_INSTALL_DEPS") != "1") {
		t.Skipf("%s is missing: apt-get install %s, or run the tests as root with PULSE_INSTALL_DEPS=1 to have them install it", cmd, pkg)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	aptUpdate.Do(func() {
		out, err := exec.CommandContext(ctx, "apt-get", "update").CombinedOutput()
		if err != nil {
			aptUpdateErr = fmt.Errorf("apt-get update: %v\n%s", err, out)
		}
	})
	if aptUpdateErr != nil {
		t.Fatal(aptUpdateErr)
	}
	install := exec.CommandContext(ctx, "apt-get", "install", "-y", pkg)
	install.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("apt-get install %s: %v\n%s", pkg, err, out)
	}
	p, err := exec.LookPath(cmd)
	if err != nil {
		t.Fatalf("%s is still missing after apt-get install %s", cmd, pkg)
	}
	return p
}

var dnsListening = regexp.MustCompile(`msg="dns listening"[^\n]* addr=(\S+)`)

// dnsAddr returns the DNS address pulsed logged.
func dnsAddr(t *testing.T, p *pulsed) string {
	t.Helper()
	var addr string
	eventually(t, "dns listening", func() bool {
		m := dnsListening.FindStringSubmatch(p.Logs())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	return addr
}

// resolveA returns the addresses of name's A records at the DNS server
// addr, asked with miekg/dns's client.
func resolveA(t *testing.T, addr, name string) []string {
	t.Helper()
	m := new(mdns.Msg)
	m.SetQuestion(name, mdns.TypeA)
	r, _, err := (&mdns.Client{Timeout: 5 * time.Second}).Exchange(m, addr)
	if err != nil {
		t.Fatalf("A %s at %s: %v", name, addr, err)
	}
	var out []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*mdns.A); ok {
			out = append(out, a.A.String())
		}
	}
	return out
}

// dig runs dig against addr and returns its output.
func dig(t *testing.T, bin, addr string, args ...string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append([]string{"@" + host, "-p", port, "+time=2", "+tries=2"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("dig %q: %v\n%s", args, err, out)
	}
	return string(out)
}

// digShort returns dig +short's lines, sorted.
func digShort(t *testing.T, bin, addr string, args ...string) []string {
	t.Helper()
	lines := strings.Fields(strings.TrimSpace(dig(t, bin, addr, append([]string{"+short"}, args...)...)))
	if args[len(args)-1] == "SRV" { // four fields a record
		var recs []string
		for i := 0; i+3 < len(lines); i += 4 {
			recs = append(recs, strings.Join(lines[i:i+4], " "))
		}
		lines = recs
	}
	slices.Sort(lines)
	return lines
}

// backend is an HTTP server whose /health answers 200 or 503 as told, and
// which counts the other requests it serves.
type backend struct {
	srv     *httptest.Server
	healthy atomic.Bool
	served  atomic.Int64
}

func newBackend(t *testing.T, name string) *backend {
	t.Helper()
	b := &backend{}
	b.healthy.Store(true)
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			if !b.healthy.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			return
		}
		b.served.Add(1)
		io.WriteString(w, name)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *backend) port() string {
	_, port, _ := net.SplitHostPort(b.srv.Listener.Addr().String())
	return port
}

func addEdge(t *testing.T, client pb.HealthCheckerClient, backends []*backend) {
	t.Helper()
	for i, b := range backends {
		_, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: &pb.Target{
			Name: fmt.Sprintf("web-%d", i+1), Group: "edge",
			Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: b.srv.URL + "/health"}},
		}})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// The real pulsed answers dig: A, SRV with the additional addresses, one
// target, NXDOMAIN, NOERROR with nothing routable, REFUSED, over UDP and
// TCP.
func TestDNSWithDig(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	digBin := debianTool(t, "dig", "dnsutils")
	bin := buildPulsed(t)
	backends := []*backend{newBackend(t, "web-1"), newBackend(t, "web-2"), newBackend(t, "web-3")}
	p := startPulsed(t, bin, "-interval", "100ms", "-timeout", "100ms", "-rise", "1", "-fall", "1",
		"-dns-listen", "127.0.0.1:0", "-dns-ttl", "2s")
	addr := dnsAddr(t, p)
	addEdge(t, dial(t, p.Addr), backends)
	backends[2].healthy.Store(false)

	wantSRV := []string{ // web-1 and web-2: web-3 is down
		"1 1 " + backends[0].port() + " web-1.target.pulse.",
		"1 1 " + backends[1].port() + " web-2.target.pulse.",
	}
	slices.Sort(wantSRV)
	eventually(t, "edge SRV with two records", func() bool {
		return slices.Equal(digShort(t, digBin, addr, "_edge._tcp.pulse", "SRV"), wantSRV)
	})
	// The backends share one address: one A record.
	if got := digShort(t, digBin, addr, "edge.pulse", "A"); !slices.Equal(got, []string{"127.0.0.1"}) {
		t.Errorf("dig edge.pulse A = %q, want one 127.0.0.1", got)
	}
	if got := digShort(t, digBin, addr, "+tcp", "_edge._tcp.pulse", "SRV"); !slices.Equal(got, wantSRV) {
		t.Errorf("dig +tcp _edge._tcp.pulse SRV = %q, want %q", got, wantSRV)
	}
	full := dig(t, digBin, addr, "_edge._tcp.pulse", "SRV")
	for _, want := range []string{"status: NOERROR", "flags: qr aa rd;", "ANSWER: 2, AUTHORITY: 0, ADDITIONAL: 3", // the OPT is the third
		"web-1.target.pulse.\t2\tIN\tA\t127.0.0.1"} {
		if !strings.Contains(full, want) {
			t.Errorf("dig SRV lacks %q:\n%s", want, full)
		}
	}
	if got := digShort(t, digBin, addr, "web-1.target.pulse", "A"); !slices.Equal(got, []string{"127.0.0.1"}) {
		t.Errorf("dig web-1.target.pulse = %q", got)
	}
	for _, tc := range []struct{ name, want string }{
		{"nothing.pulse", "status: NXDOMAIN"},
		{"web-3.target.pulse", "status: NOERROR"}, // known, down
		{"example.com", "status: REFUSED"},
	} {
		if out := dig(t, digBin, addr, tc.name, "A"); !strings.Contains(out, tc.want) || strings.Contains(out, "ANSWER: 1") {
			t.Errorf("dig %s: want %s and no answer:\n%s", tc.name, tc.want, out)
		}
	}
	if out := dig(t, digBin, addr, "nothing.pulse", "A"); !strings.Contains(out, "pulse.\t\t\t2\tIN\tSOA\tns.pulse. hostmaster.pulse.") {
		t.Errorf("NXDOMAIN without the SOA (TTL 2) in the authority section:\n%s", out)
	}
	// example.com is outside the zone, not refused by -dns-allow: an alert
	// on reason="policy" must not fire for a resolver's stray queries.
	m := metricsOf(t, p)
	for _, want := range []string{`pulse_dns_refused_total{reason="zone"} 1`, `pulse_dns_refused_total{reason="policy"} 0`} {
		if !strings.Contains(m, want+"\n") {
			t.Errorf("/metrics lacks %s:\n%s", want, grep(m, "pulse_dns_refused"))
		}
	}
	p.stop(t)
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// haproxyConfig is the configuration the README shows, with short holds
// so that the test is quick.
const haproxyConfig = `global
    log stderr format raw local0 info

defaults
    mode http
    log global
    timeout connect 1s
    timeout client 5s
    timeout server 5s

resolvers pulse
    nameserver pulsed %s
    accepted_payload_size 8192
    resolve_retries 3
    timeout resolve 200ms
    timeout retry 200ms
    hold valid 1s
    hold obsolete 0s
    hold nx 1s
    hold other 1s
    hold refused 1s
    hold timeout 1s

frontend web
    bind 127.0.0.1:%s
    default_backend edge

backend edge
    balance roundrobin
    server-template web 5 _edge._tcp.pulse resolvers pulse init-addr none resolve-prefer ipv4
`

// HAProxy resolves the group's SRV name through pulsed and sends traffic
// only to routable backends: one made unhealthy stops getting requests
// within the TTL plus HAProxy's hold valid, and comes back after it
// recovers.
func TestDNSWithHAProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	haproxy := debianTool(t, "haproxy", "haproxy")
	bin := buildPulsed(t)
	backends := []*backend{newBackend(t, "web-1"), newBackend(t, "web-2"), newBackend(t, "web-3")}
	const ttl = time.Second
	p := startPulsed(t, bin, "-interval", "100ms", "-timeout", "100ms", "-rise", "1", "-fall", "1",
		"-dns-listen", "127.0.0.1:0", "-dns-ttl", ttl.String())
	addr := dnsAddr(t, p)
	client := dial(t, p.Addr)
	addEdge(t, client, backends)

	front := freePort(t)
	cfgPath := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(cfgPath, fmt.Appendf(nil, haproxyConfig, addr, front), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(haproxy, "-c", "-f", cfgPath).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
	var hlogs bytes.Buffer // read only once haproxy has exited
	hp := exec.Command(haproxy, "-db", "-f", cfgPath)
	hp.Stdout, hp.Stderr = &hlogs, &hlogs
	if err := hp.Start(); err != nil {
		t.Fatal(err)
	}
	hpDone := make(chan error, 1)
	go func() { hpDone <- hp.Wait() }()
	t.Cleanup(func() {
		hp.Process.Signal(syscall.SIGTERM)
		select {
		case <-hpDone:
		case <-time.After(10 * time.Second):
			hp.Process.Kill()
			<-hpDone
		}
		if t.Failed() {
			t.Logf("haproxy:\n%s\npulsed:\n%s", hlogs.String(), p.Logs())
		}
	})

	httpc := &http.Client{Timeout: 2 * time.Second}
	get := func() {
		resp, err := httpc.Get("http://127.0.0.1:" + front + "/")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	served := func() [3]int64 {
		return [3]int64{backends[0].served.Load(), backends[1].served.Load(), backends[2].served.Load()}
	}
	// within sends requests, at most n, until cond holds of the counts
	// served since it began.
	within := func(what string, n int, cond func(d [3]int64) bool) {
		t.Helper()
		before := served()
		for range n {
			get()
			now := served()
			if cond([3]int64{now[0] - before[0], now[1] - before[1], now[2] - before[2]}) {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("%s: not after %d requests (served %v in all)", what, n, served())
	}

	within("all three backends get traffic", 1000, func(d [3]int64) bool { return d[0] > 0 && d[1] > 0 && d[2] > 0 })

	// web-2 fails its health check: Pulse drops it from the answers, and
	// HAProxy stops sending it requests within the TTL and its hold valid.
	backends[1].healthy.Store(false)
	eventually(t, "web-2 unhealthy in Pulse", func() bool {
		h, err := client.Healthy(t.Context(), &pb.HealthyRequest{Group: "edge"})
		return err == nil && !slices.Contains(h.GetNames(), "web-2")
	})
	marked := time.Now()
	// The bound: the TTL, HAProxy's hold valid, one resolution in flight
	// (timeout resolve), and a second of slack for a loaded machine.
	bound := ttl + time.Second + 200*time.Millisecond + time.Second
	lastHit, streak := marked, 0
	for i := 0; streak < 30; i++ {
		if i == 1000 {
			t.Fatalf("web-2 still gets requests after 1000 (last one %v after Pulse marked it)", lastHit.Sub(marked))
		}
		before := served()
		get()
		after := served()
		switch {
		case after[1] != before[1]:
			lastHit, streak = time.Now(), 0
		case after[0]+after[2] > before[0]+before[2]:
			streak++ // served by a healthy backend
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d := lastHit.Sub(marked); d > bound {
		t.Errorf("web-2 got a request %v after Pulse marked it unhealthy; want at most %v", d, bound)
	} else {
		t.Logf("web-2's last request came %v after Pulse marked it unhealthy (bound %v)", d, bound)
	}

	// Recovery: web-2 is answered again and gets requests.
	backends[1].healthy.Store(true)
	within("web-2 gets traffic again", 1000, func(d [3]int64) bool { return d[1] > 0 })
	p.stop(t)
}

// rawDNS sends q as one DNS message to addr over network ("udp", or "tcp"
// with its 2-byte length prefix) and returns the parsed reply.
func rawDNS(t *testing.T, network, addr string, q []byte) (*mdns.Msg, error) {
	t.Helper()
	c, err := net.DialTimeout(network, addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var reply []byte
	if network == "udp" {
		if _, err := c.Write(q); err != nil {
			return nil, err
		}
		reply = make([]byte, 65535)
		n, err := c.Read(reply)
		if err != nil {
			return nil, err
		}
		reply = reply[:n]
	} else {
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(q))), q...)); err != nil {
			return nil, err
		}
		var n uint16
		if err := binary.Read(c, binary.BigEndian, &n); err != nil {
			return nil, err
		}
		reply = make([]byte, n)
		if _, err := io.ReadFull(c, reply); err != nil {
			return nil, err
		}
	}
	r := new(mdns.Msg)
	if err := r.Unpack(reply); err != nil {
		return nil, fmt.Errorf("reply does not parse: %w (% x)", err, reply)
	}
	return r, nil
}

// A 12-byte query whose header announces a question it does not carry,
// over UDP and over TCP, is answered FORMERR; pulsed does not exit and
// answers good queries afterwards.
func TestDNSEmptyQuestionKeepsPulsedUp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	bin := buildPulsed(t)
	p := startPulsed(t, bin, "-dns-listen", "127.0.0.1:0")
	addr := dnsAddr(t, p)
	emptyQuestion := []byte{0x00, 0x01, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}
	for _, network := range []string{"udp", "tcp"} {
		r, err := rawDNS(t, network, addr, emptyQuestion)
		if err != nil {
			t.Fatalf("12-byte query over %s: %v\n%s", network, err, p.Logs())
		}
		if r.Id != 1 || !r.Response || r.Rcode != mdns.RcodeFormatError {
			t.Errorf("12-byte query over %s: ID %d QR=%v %s, want ID 1, QR, FORMERR", network, r.Id, r.Response, mdns.RcodeToString[r.Rcode])
		}
		select {
		case <-p.Done():
			t.Fatalf("pulsed exited after the 12-byte query over %s: %v\n%s", network, p.Err(), p.Logs())
		default:
		}
		good := new(mdns.Msg)
		good.SetQuestion("pulse.", mdns.TypeSOA)
		q, err := good.Pack()
		if err != nil {
			t.Fatal(err)
		}
		if r, err = rawDNS(t, network, addr, q); err != nil {
			t.Fatalf("SOA over %s after the 12-byte query: %v\n%s", network, err, p.Logs())
		}
		if r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 1 {
			t.Errorf("SOA over %s after the 12-byte query: %s %v, want the SOA", network, mdns.RcodeToString[r.Rcode], r.Answer)
		}
	}
	p.stop(t)
}
