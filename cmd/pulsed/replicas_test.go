package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/testscale"
)

// stream collects one WatchTransitions stream's events in the background.
type stream struct {
	cancel context.CancelFunc
	mu     sync.Mutex
	evs    []*pb.WatchTransitionsResponse
	err    error
	done   chan struct{}
}

func openStream(t *testing.T, client pb.HealthCheckerClient, start uint64) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	ws, err := client.WatchTransitions(ctx, &pb.WatchTransitionsRequest{StartRevision: start})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &stream{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			ev, err := ws.Recv()
			s.mu.Lock()
			if err != nil {
				s.err = err
				s.mu.Unlock()
				return
			}
			s.evs = append(s.evs, ev)
			s.mu.Unlock()
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *stream) close() {
	s.cancel()
	<-s.done
}

// transitions returns "<revision> <text>" of every transition of name.
func (s *stream) transitions(name string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, ev := range s.evs {
		if tr := ev.GetTransition(); tr != nil && tr.GetTarget() == name {
			out = append(out, fmt.Sprintf("%d %s", ev.GetRevision(), tr.GetText()))
		}
	}
	return out
}

// last returns the revision of the newest event.
func (s *stream) last() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.evs) == 0 {
		return 0
	}
	return s.evs[len(s.evs)-1].GetRevision()
}

func (s *stream) waitFor(t *testing.T, name, suffix string, after int) string {
	t.Helper()
	var got string
	eventually(t, fmt.Sprintf("transition %q of %s on the stream", suffix, name), func() bool {
		trs := s.transitions(name)
		for _, tr := range trs[min(after, len(trs)):] {
			if strings.HasSuffix(tr, suffix) {
				got = tr
				return true
			}
		}
		return false
	})
	return got
}

const e2ePrefix = "/pulse-e2e/"

// stateWriter returns which replica wrote name's stored state.
func stateWriter(t *testing.T, cli *clientv3.Client, name string) string {
	t.Helper()
	resp, err := cli.Get(context.Background(), e2ePrefix+"states/"+name)
	if err != nil || len(resp.Kvs) != 1 {
		return ""
	}
	var v struct{ Writer string }
	if err := json.Unmarshal(resp.Kvs[0].Value, &v); err != nil {
		t.Fatal(err)
	}
	return v.Writer
}

func listTargets(t *testing.T, client pb.HealthCheckerClient) *pb.ListTargetsResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := client.ListTargets(ctx, &pb.ListTargetsRequest{})
	if err != nil {
		t.Fatalf("ListTargets: %v", err)
	}
	return resp
}

func healthyCount(resp *pb.ListTargetsResponse) int {
	n := 0
	for _, st := range resp.GetTargets() {
		if st.GetState() == pb.State_STATE_HEALTHY {
			n++
		}
	}
	return n
}

// Three pulsed replicas share one fleet through a real etcd: any replica
// serves everything; a killed replica's targets are probed by the others
// and their transitions reach a stream held on another replica; a stream
// resumes on another replica; a paused owner cannot write stale state
// once its lease is gone; a partition from etcd leaves the replicas
// probing and serving, flagged, and they catch up when it heals.
func TestThreeReplicasOnEtcd(t *testing.T) {
	etcd := etcdtest.Start(t, time.Second)
	proxy := etcd.Proxy(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	bin := buildPulsed(t)

	var reps [3]*pulsed
	var clients [3]pb.HealthCheckerClient
	for i := range reps {
		reps[i] = startPulsed(t, bin, "-registry", "etcd", "-etcd-endpoints", proxy.Endpoint,
			"-etcd-prefix", e2ePrefix, "-etcd-lease-ttl", "3s", "-replica-id", fmt.Sprintf("r%d", i+1),
			"-interval", "200ms", "-timeout", "150ms", "-rise", "1", "-fall", "1", "-dns-listen", "127.0.0.1:0")
		clients[i] = dial(t, reps[i].Addr)
	}
	eventually(t, "three replicas", func() bool {
		return len(listTargets(t, clients[2]).GetChecker().GetReplicas()) == 3
	})

	// Register on r1; every replica serves the same view at the same
	// revision.
	backends := map[string]*switchServer{}
	var names []string
	for i := range 12 {
		name := fmt.Sprintf("web-%02d", i)
		names = append(names, name)
		backends[name] = newSwitchServer(t)
		if _, err := clients[0].AddTarget(t.Context(), &pb.AddTargetRequest{Target: &pb.Target{
			Name: name, Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: backends[name].URL}},
		}}); err != nil {
			t.Fatalf("AddTarget %s: %v", name, err)
		}
	}
	eventually(t, "12 healthy targets at one revision on every replica", func() bool {
		var revs []uint64
		for _, c := range clients {
			resp := listTargets(t, c)
			if healthyCount(resp) != 12 {
				return false
			}
			revs = append(revs, resp.GetRevision())
		}
		return revs[0] == revs[1] && revs[1] == revs[2]
	})
	// DNS answers from each replica's own checker, which holds the whole
	// registry: every replica resolves every target.
	var dnsAddrs [3]string
	for i := range reps {
		dnsAddrs[i] = dnsAddr(t, reps[i])
		eventually(t, fmt.Sprintf("r%d resolves the 12 targets", i+1), func() bool {
			for _, n := range names {
				if got := resolveA(t, dnsAddrs[i], n+".target.pulse."); len(got) != 1 || got[0] != "127.0.0.1" {
					return false
				}
			}
			return true
		})
	}
	owners := map[string][]string{}
	for _, n := range names {
		w := stateWriter(t, cli, n)
		owners[w] = append(owners[w], n)
	}
	if len(owners["r1"]) == 0 || len(owners["r2"]) == 0 || len(owners["r3"]) == 0 {
		t.Fatalf("targets not divided among the replicas: %v", owners)
	}

	// A stream held open on r3 sees r1's targets after r1 is killed.
	held := openStream(t, clients[2], 0)
	eventually(t, "the snapshot", func() bool { return held.last() > 0 })
	victim := owners["r1"][0]
	reps[0].Signal(syscall.SIGKILL)
	<-reps[0].Done()
	killed := time.Now()
	backends[victim].down.Store(true)
	got := held.waitFor(t, victim, victim+": healthy -> unhealthy", 0)
	// TTL 3s plus an interval (fall 1), with slack for a loaded machine.
	took := time.Since(killed)
	t.Logf("%s's failure arrived %v after its owner was killed (lease TTL 3s, interval 200ms)", victim, took)
	if took > 3*time.Second+200*time.Millisecond+testscale.D(5*time.Second) {
		t.Errorf("%s's failure arrived %v after its owner was killed: far more than the lease TTL plus an interval", victim, took)
	}
	if w := stateWriter(t, cli, victim); w != "r2" && w != "r3" {
		t.Fatalf("%s's state written by %q after r1 died", victim, w)
	}
	t.Logf("after r1 was killed: %s", got)
	for i := 1; i < 3; i++ { // and both survivors stop resolving it
		eventually(t, fmt.Sprintf("r%d's DNS drops %s", i+1, victim), func() bool {
			return len(resolveA(t, dnsAddrs[i], victim+".target.pulse.")) == 0
		})
	}

	// Resume on r2 from the revision r3's stream reached.
	resumeAt := held.last()
	held.close()
	resumed := openStream(t, clients[1], resumeAt)
	again := openStream(t, clients[2], resumeAt)
	backends[victim].down.Store(false)
	g1 := resumed.waitFor(t, victim, victim+": unhealthy -> healthy", 0)
	g2 := again.waitFor(t, victim, victim+": unhealthy -> healthy", 0)
	if g1 != g2 {
		t.Fatalf("the same resume on two replicas differs: r2 %q, r3 %q", g1, g2)
	}
	var rev uint64
	fmt.Sscan(g1, &rev)
	if rev <= resumeAt {
		t.Fatalf("resumed from %d but got revision %d", resumeAt, rev)
	}

	// Pause r2 (SIGSTOP) past its lease: r3 takes its targets, and r2,
	// once continued, writes nothing between its lease's end and its new
	// registration.
	paused := ""
	for _, n := range names {
		if stateWriter(t, cli, n) == "r2" {
			paused = n
			break
		}
	}
	if paused == "" {
		t.Fatal("r2 owns no target")
	}
	mctx, mcancel := context.WithCancel(t.Context())
	defer mcancel()
	members := cli.Watch(mctx, e2ePrefix+"members/r2")
	reps[1].Signal(syscall.SIGSTOP)
	var leaseGone, back int64
	for leaseGone == 0 || back == 0 {
		select {
		case resp := <-members:
			for _, ev := range resp.Events {
				switch {
				case ev.Type == clientv3.EventTypeDelete && leaseGone == 0:
					leaseGone = ev.Kv.ModRevision
					// r3 now owns r2's targets: fail one so r3 writes it.
					backends[paused].down.Store(true)
					again.waitFor(t, paused, paused+": healthy -> unhealthy", 0)
					if w := stateWriter(t, cli, paused); w != "r3" {
						t.Errorf("%s written by %q while r2 is paused", paused, w)
					}
					backends[paused].down.Store(false) // r2 still believes it failing-free: a stale view
					reps[1].Signal(syscall.SIGCONT)
				case ev.Type == clientv3.EventTypePut && leaseGone != 0:
					back = ev.Kv.ModRevision
				}
			}
		case <-time.After(testscale.D(30 * time.Second)):
			reps[1].Signal(syscall.SIGCONT)
			t.Fatalf("r2's lease: gone at %d, back at %d", leaseGone, back)
		}
	}
	wctx, wcancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer wcancel()
	for resp := range cli.Watch(wctx, e2ePrefix+"states/", clientv3.WithPrefix(), clientv3.WithRev(leaseGone+1)) {
		done := false
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision > back {
				done = true
				break
			}
			var v struct{ Writer string }
			json.Unmarshal(ev.Kv.Value, &v)
			if v.Writer == "r2" {
				t.Errorf("r2 wrote %s at revision %d, after its lease ended (%d) and before it registered again (%d)", ev.Kv.Key, ev.Kv.ModRevision, leaseGone, back)
			}
		}
		if done || resp.Header.Revision >= back {
			break
		}
	}
	eventually(t, "r2 back in step", func() bool {
		resp := listTargets(t, clients[1])
		return healthyCount(resp) == 12 && len(resp.GetChecker().GetReplicas()) == 2
	})

	// Cut r2 and r3 off etcd: they keep probing and answering from their
	// last view, flagged, refuse new targets, and catch up after.
	proxy.Cut()
	for _, c := range clients[1:] {
		eventually(t, "registry_error set", func() bool {
			return listTargets(t, c).GetChecker().GetRegistryError() != ""
		})
	}
	before := backends[names[0]].probes.Load()
	eventually(t, "probing goes on while cut off", func() bool { return backends[names[0]].probes.Load() > before+5 })
	if n := healthyCount(listTargets(t, clients[2])); n != 12 {
		t.Errorf("last view while cut off: %d healthy, want 12", n)
	}
	metrics := func(p *pulsed) string {
		m := regexp.MustCompile(`msg="http listening" component=http addr=(\S+)`).FindStringSubmatch(p.Logs())
		if m == nil {
			t.Fatal("no HTTP listener address in the log")
		}
		_, body := httpGet(t, "http://"+m[1]+"/metrics")
		return body
	}
	if body := metrics(reps[2]); !strings.Contains(body, "\npulse_registry_error 1\n") {
		t.Errorf("/metrics while cut off has no pulse_registry_error 1")
	}
	extra := newSwitchServer(t)
	actx, acancel := context.WithTimeout(t.Context(), 20*time.Second)
	_, err = clients[2].AddTarget(actx, &pb.AddTargetRequest{Target: &pb.Target{
		Name: "late", Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: extra.URL}},
	}})
	acancel()
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("AddTarget while cut off: %v, want UNAVAILABLE", err)
	}
	proxy.Heal()
	for _, c := range clients[1:] {
		eventually(t, "registry_error cleared", func() bool {
			return listTargets(t, c).GetChecker().GetRegistryError() == ""
		})
	}
	if _, err := clients[2].AddTarget(t.Context(), &pb.AddTargetRequest{Target: &pb.Target{
		Name: "late", Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: extra.URL}},
	}}); err != nil {
		t.Fatalf("AddTarget after the partition healed: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, c := range clients[1:] {
				for _, st := range listTargets(t, c).GetTargets() {
					t.Logf("r%d: %s %v owner-writer %s", i+2, st.GetSpec().GetName(), st.GetState(), stateWriter(t, cli, st.GetSpec().GetName()))
				}
			}
			t.Logf("r2 logs:\n%s", reps[1].Logs())
			t.Logf("r3 logs:\n%s", reps[2].Logs())
		}
	})
	eventually(t, "/metrics after the partition healed: pulse_registry_error 0 and pulse_replicas 2", func() bool {
		body := metrics(reps[2])
		return strings.Contains(body, "\npulse_registry_error 0\n") && strings.Contains(body, "\npulse_replicas 2\n")
	})
	eventually(t, "13 healthy targets on both replicas", func() bool {
		return healthyCount(listTargets(t, clients[1])) == 13 && healthyCount(listTargets(t, clients[2])) == 13
	})
}

// A replica talks to an etcd that serves TLS and requires client
// certificates; without its certificate it refuses to start, saying why.
func TestReplicaOverTLS(t *testing.T) {
	etcd, files := etcdtest.StartTLS(t)
	bin := buildPulsed(t)
	p := startPulsed(t, bin, "-registry", "etcd", "-etcd-endpoints", etcd.Endpoint, "-replica-id", "tls-1",
		"-etcd-ca", files.CA, "-etcd-cert", files.ClientCert, "-etcd-key", files.ClientKey)
	client := dial(t, p.Addr)
	if _, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tcpTarget("over-tls")}); err != nil {
		t.Fatalf("AddTarget through a TLS etcd: %v", err)
	}
	resp := listTargets(t, client)
	if len(resp.GetTargets()) != 1 || resp.GetChecker().GetReplica() != "tls-1" {
		t.Fatalf("ListTargets: %d targets, replica %q", len(resp.GetTargets()), resp.GetChecker().GetReplica())
	}
	p.stop(t)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-listen", "127.0.0.1:0", "-http-listen", "", "-registry", "etcd",
		"-etcd-endpoints", etcd.Endpoint, "-etcd-ca", files.CA).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "-registry etcd: register with etcd at "+etcd.Endpoint) {
		t.Fatalf("pulsed without a client certificate: %v\n%s", err, out)
	}
}
