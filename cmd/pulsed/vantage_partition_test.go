package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/netlab"
	"github.com/pulsehealth/pulse/internal/pulsedproc"
	"github.com/pulsehealth/pulse/internal/testscale"
)

// Three pulsed replicas, each in a network namespace of its own, share a
// fleet on an etcd in a fourth; the targets are HTTP servers in a fifth,
// and one more target in a sixth. Every target is probed from three
// vantages with a quorum of two. Only addresses inside these namespaces
// are used.
//
//   - One replica's path to the targets breaks (its path to etcd stays):
//     nothing is published, and every replica marks that vantage suspect;
//     healed, it recovers.
//   - One vantage alone cannot reach one target: it stays healthy, and its
//     status shows that vantage's verdict and why.
//   - A target really dies: the quorum publishes it down, the same
//     transition on every replica.
//   - A fourth replica joins and one of the three is killed: its vantages
//     move to the newcomer, which stores its own verdicts, and nothing is
//     published.
func TestVantagesAcrossRealPartitions(t *testing.T) {
	lab := netlab.New(t)
	etcdHost := lab.AddHost("etcd")
	var repHosts []*netlab.Host
	for i := range 4 {
		repHosts = append(repHosts, lab.AddHost(fmt.Sprintf("r%d", i+1)))
	}
	backends, lonely := lab.AddHost("backends"), lab.AddHost("lonely")
	bin := buildPulsed(t)
	etcdURL := startNetnsEtcd(t, etcdHost, repHosts[0])

	// The targets: t1..t5 on the backends, solo alone.
	servers := map[string]*http.Server{}
	serve := func(h *netlab.Host, name string, port int) string {
		l, err := h.Listen(fmt.Sprintf("%s:%d", h.Addr, port))
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
		servers[name] = srv
		return fmt.Sprintf("http://%s:%d/healthz", h.Addr, port)
	}
	urls := map[string]string{}
	names := []string{"t1", "t2", "t3", "t4", "t5"}
	for i, n := range names {
		urls[n] = serve(backends, n, 8081+i)
	}
	urls["solo"] = serve(lonely, "solo", 8080)
	all := append(slices.Clone(names), "solo")

	type rep struct {
		id     string
		host   *netlab.Host
		proc   *pulsedproc.Process
		client pb.HealthCheckerClient
		stream *stream
	}
	start := func(i int) *rep {
		h := repHosts[i]
		id := fmt.Sprintf("r%d", i+1)
		ctx, cancel := context.WithTimeout(t.Context(), testscale.D(time.Minute))
		defer cancel()
		proc, err := pulsedproc.Start(ctx, "ip", []string{"netns", "exec", h.NS, bin,
			"-registry", "etcd", "-etcd-endpoints", etcdURL, "-etcd-prefix", "/pulse-vantages/", "-etcd-lease-ttl", "3s",
			"-replica-id", id, "-vantage", "zone-" + id, "-vantage-suspect-after", "2s", "-listen", "127.0.0.1:0", "-http-listen", "",
			"-interval", "300ms", "-timeout", "200ms", "-rise", "1", "-fall", "2"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(proc.Kill)
		conn, err := grpc.NewClient("passthrough:///"+proc.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return h.Dial(ctx, addr) }))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		r := &rep{id: id, host: h, proc: proc, client: pb.NewHealthCheckerClient(conn)}
		return r
	}
	reps := []*rep{start(0), start(1), start(2)}
	for _, r := range reps {
		r.stream = openStream(t, r.client, 0)
	}
	for _, n := range all {
		tg := &pb.Target{Name: n, Vantages: 3, Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: urls[n]}}}
		if _, err := reps[0].client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tg}); err != nil {
			t.Fatalf("AddTarget %s: %v", n, err)
		}
	}
	// status returns name's status on r, and its vantages as text.
	status := func(r *rep, name string) (*pb.TargetStatus, string) {
		st, err := r.client.State(t.Context(), &pb.StateRequest{Name: name})
		if err != nil {
			t.Fatalf("State %s on %s: %v", name, r.id, err)
		}
		var parts []string
		for _, v := range st.GetStatus().GetVantages() {
			s := v.GetLabel() + "=" + strings.ToLower(strings.TrimPrefix(v.GetState().String(), "STATE_"))
			if v.GetError() != "" {
				s += "(" + v.GetError() + ")"
			}
			parts = append(parts, s)
		}
		slices.Sort(parts)
		return st.GetStatus(), strings.Join(parts, " ")
	}
	healthyFromAll := "zone-r1=healthy zone-r2=healthy zone-r3=healthy"
	for _, r := range reps {
		for _, n := range all {
			r.stream.waitFor(t, n, "-> healthy", 0)
			eventually(t, fmt.Sprintf("%s: %s healthy from three vantages", r.id, n), func() bool {
				_, vs := status(r, n)
				return vs == healthyFromAll
			})
		}
	}
	transitionsSoFar := func(r *rep) int {
		n := 0
		for _, name := range all {
			n += len(r.stream.transitions(name))
		}
		return n
	}
	// noTransitions checks that r's stream published nothing since before.
	noTransitions := func(what string, before []int) {
		t.Helper()
		for i, r := range reps[:len(before)] {
			if got := transitionsSoFar(r); got != before[i] {
				var trs []string
				for _, n := range all {
					trs = append(trs, r.stream.transitions(n)...)
				}
				t.Errorf("%s: %s published %d transitions: %q", what, r.id, got-before[i], trs)
			}
		}
	}
	counts := func() []int {
		var out []int
		for _, r := range reps {
			out = append(out, transitionsSoFar(r))
		}
		return out
	}

	// 1. r2's path to every target breaks silently; its path to etcd stays.
	before := counts()
	cut := time.Now()
	reps[1].host.Cut(backends, netlab.Drop)
	reps[1].host.Cut(lonely, netlab.Drop)
	var suspects []string
	for _, r := range reps {
		ev := r.stream.waitPolicy(t, pb.PolicyEvent_KIND_VANTAGE_SUSPECT, 0)
		p := ev.GetPolicy()
		if p.GetReplica() != "r2" || p.GetVantage() != "zone-r2" || p.GetDisagree() < 3 {
			t.Errorf("%s: VANTAGE_SUSPECT for %s (%s), %d of %d; want r2 (zone-r2), at least 3", r.id, p.GetReplica(), p.GetVantage(), p.GetDisagree(), p.GetJudged())
		}
		suspects = append(suspects, fmt.Sprintf("%d %s", ev.GetRevision(), p.GetText()))
	}
	t.Logf("r2 marked suspect %v after its path broke: %s", time.Since(cut).Round(10*time.Millisecond), suspects[0])
	if suspects[1] != suspects[0] || suspects[2] != suspects[0] {
		t.Errorf("replicas disagree on VANTAGE_SUSPECT: %q", suspects)
	}
	if _, vs := status(reps[0], "t1"); !strings.Contains(vs, "zone-r2=unhealthy(") {
		t.Errorf("t1's vantages while r2's path is cut: %q; want zone-r2 unhealthy with its error", vs)
	}
	noTransitions("r2's path cut", before)
	reps[1].host.Heal(backends, netlab.Drop)
	reps[1].host.Heal(lonely, netlab.Drop)
	for _, r := range reps {
		r.stream.waitPolicy(t, pb.PolicyEvent_KIND_VANTAGE_RECOVERED, 0)
	}
	noTransitions("r2's path healed", before)

	// 2. r3 alone cannot reach solo: solo stays healthy and says why.
	reps[2].host.Cut(lonely, netlab.Drop)
	eventually(t, "r3's verdict on solo stored", func() bool {
		_, vs := status(reps[0], "solo")
		return strings.Contains(vs, "zone-r3=unhealthy(")
	})
	for _, r := range reps {
		st, vs := status(r, "solo")
		if st.GetState() != pb.State_STATE_HEALTHY || !strings.Contains(vs, "zone-r1=healthy") || !strings.Contains(vs, "zone-r2=healthy") {
			t.Errorf("%s: solo is %v with vantages %q; want healthy, r1 and r2 healthy", r.id, st.GetState(), vs)
		}
		if _, vs := status(r, "solo"); !strings.Contains(strings.ToLower(vs), "timeout") && !strings.Contains(strings.ToLower(vs), "deadline") {
			t.Errorf("%s: solo's vantages %q do not say r3 timed out", r.id, vs)
		}
	}
	noTransitions("one vantage cut from one target", before)
	reps[2].host.Heal(lonely, netlab.Drop)
	eventually(t, "r3 sees solo again", func() bool {
		_, vs := status(reps[0], "solo")
		return vs == healthyFromAll
	})

	// 3. t1 really dies: published down by the quorum, alike everywhere.
	killed := time.Now()
	servers["t1"].Close()
	var downs []string
	for _, r := range reps {
		downs = append(downs, r.stream.waitFor(t, "t1", "healthy -> unhealthy", 0))
	}
	t.Logf("t1 killed: published down on every replica %v later (fall 2 x interval 300ms, then the verdicts and the state through etcd): %s",
		time.Since(killed).Round(10*time.Millisecond), downs[0])
	if downs[1] != downs[0] || downs[2] != downs[0] {
		t.Errorf("replicas published t1 going down differently: %q", downs)
	}

	// 4. r4 joins, then r1 is killed: its vantages move, nothing is
	// published for the targets still up.
	before = counts()
	r4 := start(3)
	reps = append(reps, r4)
	r4.stream = openStream(t, r4.client, 0)
	r1 := reps[0]
	r1.proc.Kill()
	survivors := reps[1:]
	up := all[1:] // t1 is down
	for _, r := range survivors {
		for _, n := range up {
			eventually(t, fmt.Sprintf("%s: %s's vantages without r1, each with a stored verdict", r.id, n), func() bool {
				st, vs := status(r, n)
				return len(st.GetVantages()) == 3 && !strings.Contains(vs, "zone-r1=") && strings.Count(vs, "=healthy") == 3
			})
		}
	}
	for i, r := range survivors[:2] {
		if got := transitionsSoFar(r); got != before[i+1] {
			t.Errorf("r1 killed: %s published %d transitions", r.id, got-before[i+1])
		}
	}
}

// startNetnsEtcd runs the etcd pinned in go.mod in host h, on h's address,
// and waits until it answers from client, another host. It returns its
// client URL.
func startNetnsEtcd(t *testing.T, h, client *netlab.Host) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "etcd")
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "go.etcd.io/etcd/server/v3").CombinedOutput(); err != nil {
		t.Fatalf("build etcd: %v\n%s", err, out)
	}
	url := "http://" + h.Addr + ":2379"
	peer := "http://127.0.0.1:2380"
	cmd := h.Command(t.Context(), bin, "--name", "lab", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", url, "--advertise-client-urls", url,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "lab="+peer,
		"--log-level", "error")
	var out strings.Builder
	var mu sync.Mutex
	cmd.Stdout, cmd.Stderr = lockedWriter{&mu, &out}, lockedWriter{&mu, &out}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return client.Dial(ctx, addr) },
	}}
	eventually(t, "etcd answers", func() bool {
		resp, err := hc.Get(url + "/health")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), `"health":"true"`)
	})
	return url
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// waitPolicy waits for the stream's first policy event of kind after the
// first after of them, and returns it.
func (s *stream) waitPolicy(t *testing.T, kind pb.PolicyEvent_Kind, after int) *pb.WatchTransitionsResponse {
	t.Helper()
	var got *pb.WatchTransitionsResponse
	eventually(t, fmt.Sprintf("%v on the stream", kind), func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		n := 0
		for _, ev := range s.evs {
			if ev.GetPolicy().GetKind() == kind {
				if n == after {
					got = ev
					return true
				}
				n++
			}
		}
		return false
	})
	return got
}
