package main

import (
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// panics returns the stream's panic events with their revisions.
func (s *stream) panics() []*pb.WatchTransitionsResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*pb.WatchTransitionsResponse
	for _, ev := range s.evs {
		if k := ev.GetPolicy().GetKind(); k == pb.PolicyEvent_KIND_PANIC_ENTERED || k == pb.PolicyEvent_KIND_PANIC_EXITED {
			out = append(out, ev)
		}
	}
	return out
}

// changes counts the stream's transitions and panic events.
func (s *stream) changes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, ev := range s.evs {
		k := ev.GetPolicy().GetKind()
		if ev.GetTransition() != nil || k == pb.PolicyEvent_KIND_PANIC_ENTERED || k == pb.PolicyEvent_KIND_PANIC_EXITED {
			n++
		}
	}
	return n
}

// groupState returns a replica's unhealthy and held targets of group.
func groupState(t *testing.T, client pb.HealthCheckerClient, group string) (unhealthy, held []string) {
	t.Helper()
	for _, st := range listTargets(t, client).GetTargets() {
		if st.GetSpec().GetGroup() != group {
			continue
		}
		if st.GetState() == pb.State_STATE_UNHEALTHY {
			unhealthy = append(unhealthy, st.GetSpec().GetName())
		}
		if st.GetPanicHeld() {
			held = append(held, st.GetSpec().GetName())
		}
	}
	slices.Sort(unhealthy)
	slices.Sort(held)
	return unhealthy, held
}

// Three replicas hold a group of ten targets between them, with pulsed's
// default panic threshold (-max-unhealthy-fraction 0.5); eight backends
// fail at once. etcd's history never has more than five of the group
// unhealthy; every replica holds the same three, and its stream carries
// the same PANIC_ENTERED, once, at the same revision. The replica owning a
// held target is killed (SIGKILL): the survivors take it over, the holds
// stay, and no transition or panic event follows.
func TestReplicasPanicThreshold(t *testing.T) {
	etcd := etcdtest.Start(t, time.Second)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	bin := buildPulsed(t)

	var reps [3]*pulsed
	var clients [3]pb.HealthCheckerClient
	for i := range reps {
		reps[i] = startPulsed(t, bin, "-registry", "etcd", "-etcd-endpoints", etcd.Endpoint,
			"-etcd-prefix", e2ePrefix, "-etcd-lease-ttl", "3s", "-replica-id", fmt.Sprintf("r%d", i+1),
			"-max-unhealthy-fraction", "0.5",
			"-interval", "200ms", "-timeout", "150ms", "-rise", "1", "-fall", "1")
		clients[i] = dial(t, reps[i].Addr)
	}
	eventually(t, "three replicas", func() bool {
		return len(listTargets(t, clients[2]).GetChecker().GetReplicas()) == 3
	})

	backends := map[string]*switchServer{}
	var names []string
	for i := range 10 {
		name := fmt.Sprintf("edge-%d", i)
		names = append(names, name)
		backends[name] = newSwitchServer(t)
		if _, err := clients[i%3].AddTarget(t.Context(), &pb.AddTargetRequest{Target: &pb.Target{
			Name: name, Group: "edge", Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: backends[name].URL}},
		}}); err != nil {
			t.Fatalf("AddTarget %s: %v", name, err)
		}
	}
	eventually(t, "ten healthy targets on every replica", func() bool {
		for _, c := range clients {
			if healthyCount(listTargets(t, c)) != 10 {
				return false
			}
		}
		return true
	})
	// A new target starts unhealthy until its first probe passes, so etcd's
	// history is checked from the revision at which every one was healthy.
	whole, err := cli.Get(t.Context(), "/none")
	if err != nil {
		t.Fatal(err)
	}
	from := whole.Header.Revision
	owners := map[string]bool{}
	for _, n := range names {
		owners[stateWriter(t, cli, n)] = true
	}
	if len(owners) < 2 {
		t.Fatalf("the group's targets are not spread over the replicas: %v", owners)
	}
	var streams [3]*stream
	for i, c := range clients {
		streams[i] = openStream(t, c, 0)
	}

	for _, n := range names[:8] {
		backends[n].down.Store(true)
	}
	var held []string
	for i, c := range clients {
		eventually(t, fmt.Sprintf("five unhealthy and three held on r%d", i+1), func() bool {
			u, h := groupState(t, c, "edge")
			if len(u) == 5 && len(h) == 3 {
				held = h
				return true
			}
			return false
		})
	}
	for i, c := range clients {
		if _, h := groupState(t, c, "edge"); !slices.Equal(h, held) {
			t.Errorf("r%d holds %v, another replica %v", i+1, h, held)
		}
	}
	for i, s := range streams {
		eventually(t, fmt.Sprintf("PANIC_ENTERED on r%d's stream", i+1), func() bool { return len(s.panics()) >= 1 })
	}
	want := streams[0].panics()
	if len(want) != 1 || want[0].GetPolicy().GetKind() != pb.PolicyEvent_KIND_PANIC_ENTERED {
		t.Fatalf("r1's stream: %v, want one PANIC_ENTERED", want)
	}
	for i, s := range streams[1:] {
		if diff := cmp.Diff(want, s.panics(), protocmp.Transform()); diff != "" {
			t.Errorf("panic events of r1 and r%d differ (-r1 +r%d):\n%s", i+2, i+2, diff)
		}
	}
	t.Logf("PANIC_ENTERED at revision %d: %s", want[0].GetRevision(), want[0].GetPolicy().GetText())
	checkGroupHistory(t, etcd, names, from, 5)

	// Kill -9 the owner of a held target.
	victim := stateWriter(t, cli, held[0])
	var k int
	fmt.Sscanf(victim, "r%d", &k)
	if k < 1 || k > 3 {
		t.Fatalf("%s's state written by %q", held[0], victim)
	}
	var survivors []int
	for i := range reps {
		if i != k-1 {
			survivors = append(survivors, i)
		}
	}
	before := map[int]int{}
	for _, i := range survivors {
		before[i] = streams[i].changes()
	}
	reps[k-1].Signal(syscall.SIGKILL)
	<-reps[k-1].Done()
	for _, i := range survivors {
		eventually(t, fmt.Sprintf("r%d sees two replicas", i+1), func() bool {
			return len(listTargets(t, clients[i]).GetChecker().GetReplicas()) == 2
		})
	}
	// The new owner probes the held target a few times.
	probes := backends[held[0]].probes.Load()
	eventually(t, "the new owner probes "+held[0], func() bool { return backends[held[0]].probes.Load() >= probes+3 })
	for _, i := range survivors {
		u, h := groupState(t, clients[i], "edge")
		if !slices.Equal(h, held) || len(u) != 5 {
			t.Errorf("after %s was killed, r%d: unhealthy %v, held %v; want five and %v", victim, i+1, u, h, held)
		}
		if got := streams[i].changes(); got != before[i] {
			t.Errorf("r%d's stream got %d transitions or panic events after %s was killed, want none", i+1, got-before[i], victim)
		}
	}
	checkGroupHistory(t, etcd, names, from, 5)
}

// checkGroupHistory fails unless etcd's history, from revision from on,
// never has more than most of names unhealthy.
func checkGroupHistory(t *testing.T, etcd *etcdtest.Server, names []string, from int64, most int) {
	t.Helper()
	h := etcd.GroupHistory(t, e2ePrefix, names)
	for _, g := range h {
		if g.Rev >= from && g.Unhealthy > most {
			t.Fatalf("at revision %d etcd has %d of the group unhealthy, more than %d: %v", g.Rev, g.Unhealthy, most, h)
		}
	}
	t.Logf("etcd's history of the group (revision:unhealthy/held): %v", h)
}
