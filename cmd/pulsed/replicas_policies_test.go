package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// policies returns "<revision> <text>" of every policy event of kind on
// the stream, about replica when it is not empty.
func (s *stream) policies(kind pb.PolicyEvent_Kind, replica string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, ev := range s.evs {
		if p := ev.GetPolicy(); p != nil && p.GetKind() == kind && (replica == "" || p.GetReplica() == replica) {
			out = append(out, fmt.Sprintf("%d %s", ev.GetRevision(), p.GetText()))
		}
	}
	return out
}

func targetState(t *testing.T, c pb.HealthCheckerClient, name string) *pb.TargetStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	resp, err := c.State(ctx, &pb.StateRequest{Name: name})
	if status.Code(err) == codes.NotFound {
		// A replica learns of a target added through another one from
		// etcd, a moment later: nil reads as "not yet" to the callers,
		// which poll.
		return nil
	}
	if err != nil {
		t.Fatalf("State(%s): %v", name, err)
	}
	return resp.GetStatus()
}

// flapView is what every replica must answer alike of a damped target.
func flapView(st *pb.TargetStatus) string {
	return fmt.Sprintf("state %v verdict %v flapping %v transitions %d", st.GetState(), st.GetVerdict(), st.GetFlapping(), st.GetTransitionsInWindow())
}

// The pool policies hold across three real pulsed replicas on a real etcd:
// a degraded replica's CHECKER_DEGRADED, with its ID, is on every
// replica's stream at the same revision and in every ListTargets; a
// passive outcome sent to a replica that does not own the target counts,
// and the rate limit is the target's, whatever replica is asked; a
// flapping target whose owner leaves stays flapping on the new owner,
// which does not count its transitions again.
func TestReplicatedPolicies(t *testing.T) {
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
		args := []string{"-registry", "etcd", "-etcd-endpoints", etcd.Endpoint,
			"-etcd-prefix", e2ePrefix, "-etcd-lease-ttl", "3s", "-replica-id", fmt.Sprintf("r%d", i+1),
			"-interval", "200ms", "-timeout", "150ms", "-rise", "1", "-fall", "1", "-dns-listen", "127.0.0.1:0"}
		if i == 2 {
			// r3 takes any lag for overload: degraded at its first probe.
			args = append(args, "-overload-lag", "1ns")
		}
		reps[i] = startPulsed(t, bin, args...)
		clients[i] = dial(t, reps[i].Addr)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, p := range reps {
				t.Logf("r%d logs:\n%s", i+1, p.Logs())
			}
		}
	})
	eventually(t, "three replicas", func() bool {
		return len(listTargets(t, clients[2]).GetChecker().GetReplicas()) == 3
	})
	var streams [3]*stream
	for i, c := range clients {
		streams[i] = openStream(t, c, 0)
	}
	add := func(tg *pb.Target) *switchServer {
		t.Helper()
		srv := newSwitchServer(t)
		tg.Probe = &pb.Target_Http{Http: &pb.HttpProbe{Url: srv.URL}}
		if _, err := clients[0].AddTarget(t.Context(), &pb.AddTargetRequest{Target: tg}); err != nil {
			t.Fatalf("AddTarget %s: %v", tg.GetName(), err)
		}
		return srv
	}

	// Overload: targets until r3 owns one; its overload reaches every
	// stream, the same event at the same revision, and every ListTargets.
	for i := 0; ; i++ {
		name := fmt.Sprintf("load-%02d", i)
		add(&pb.Target{Name: name})
		eventually(t, name+" stored", func() bool { return stateWriter(t, cli, name) != "" })
		if stateWriter(t, cli, name) == "r3" {
			break
		}
		if i == 20 {
			t.Fatal("r3 owns none of 20 targets")
		}
	}
	var degraded [3][]string
	eventually(t, "r3's CHECKER_DEGRADED on the three streams", func() bool {
		for i, s := range streams {
			if degraded[i] = s.policies(pb.PolicyEvent_KIND_CHECKER_DEGRADED, "r3"); len(degraded[i]) == 0 {
				return false
			}
		}
		return true
	})
	if degraded[0][0] != degraded[1][0] || degraded[1][0] != degraded[2][0] || !strings.Contains(degraded[0][0], "replica r3: checker degraded: ") {
		t.Fatalf("r3's CHECKER_DEGRADED differs or says otherwise: r1 %q, r2 %q, r3 %q", degraded[0][0], degraded[1][0], degraded[2][0])
	}
	t.Logf("on every stream: %s", degraded[0][0])
	for i, c := range clients {
		if got := listTargets(t, c).GetChecker().GetDegradedReplicas(); !slices.Contains(got, "r3") {
			t.Errorf("r%d's ListTargets: degraded_replicas %v, want r3 in it", i+1, got)
		}
	}

	// Passive outcomes, sent to a replica that does not own the target.
	add(&pb.Target{Name: "passive-1", InitialState: pb.State_STATE_HEALTHY, Interval: durationpb.New(10 * time.Second),
		Timeout: durationpb.New(time.Second), PassiveOutcomes: true, PassiveRate: 1})
	owner := -1
	eventually(t, "passive-1's owner", func() bool {
		for i, c := range clients {
			if targetState(t, c, "passive-1").GetNextProbeTime() != nil {
				owner = i
				return true
			}
		}
		return false
	})
	other := (owner + 1) % 3
	began := time.Now()
	resp, err := clients[other].ReportOutcome(t.Context(), &pb.ReportOutcomeRequest{Target: "passive-1", Error: "502 from upstream"})
	if err != nil || !resp.GetCounted() {
		t.Fatalf("ReportOutcome on r%d (r%d owns passive-1): %v, %v", other+1, owner+1, resp, err)
	}
	var down [3]string
	for i, s := range streams {
		down[i] = s.waitFor(t, "passive-1", "passive-1: healthy -> unhealthy", 0)
	}
	if down[0] != down[1] || down[1] != down[2] {
		t.Fatalf("the passive failure's transition differs: %q", down)
	}
	counted := 1
	for i := range 3 {
		resp, err := clients[i].ReportOutcome(t.Context(), &pb.ReportOutcomeRequest{Target: "passive-1", Error: "502 from upstream"})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetCounted() {
			counted++
		}
	}
	// One token a second, burst one: the first took it.
	if most := 1 + int(time.Since(began).Seconds()); counted > most {
		t.Errorf("%d outcomes counted within %v at 1 a second across the replicas, want at most %d", counted, time.Since(began), most)
	}
	eventually(t, "passive_results alike on every replica", func() bool {
		for _, c := range clients {
			if targetState(t, c, "passive-1").GetPassiveResults() != uint64(counted) {
				return false
			}
		}
		return true
	})

	// Flap damping: three transitions in the window make flappy flap;
	// then its verdict recovers, held unhealthy.
	srv := add(&pb.Target{Name: "flappy", InitialState: pb.State_STATE_HEALTHY, FlapThreshold: 3,
		FlapWindow: durationpb.New(time.Minute), FlapStableFor: durationpb.New(time.Minute)})
	for i, step := range []string{"healthy -> unhealthy", "unhealthy -> healthy", "healthy -> unhealthy"} {
		srv.down.Store(i%2 == 0)
		streams[0].waitFor(t, "flappy", "flappy: "+step, i)
	}
	srv.down.Store(false)
	want := "state STATE_UNHEALTHY verdict STATE_HEALTHY flapping true transitions 4"
	eventually(t, "flappy flapping, its verdict healthy, on every replica", func() bool {
		for _, c := range clients {
			if flapView(targetState(t, c, "flappy")) != want {
				return false
			}
		}
		return true
	})
	var started [3][]string
	eventually(t, "FLAPPING_STARTED on the three streams", func() bool {
		for i, s := range streams {
			if started[i] = s.policies(pb.PolicyEvent_KIND_FLAPPING_STARTED, ""); len(started[i]) == 0 {
				return false
			}
		}
		return true
	})
	if len(started[0]) != 1 || !slices.Equal(started[0], started[1]) || !slices.Equal(started[1], started[2]) {
		t.Fatalf("FLAPPING_STARTED on the streams: %q", started)
	}

	// Its owner leaves (SIGTERM: its lease is revoked, the others take its
	// targets at once).
	w := stateWriter(t, cli, "flappy")
	var gone int
	fmt.Sscanf(w, "r%d", &gone)
	gone--
	if gone < 0 || gone > 2 {
		t.Fatalf("flappy's state written by %q", w)
	}
	trsBefore := len(streams[(gone+1)%3].transitions("flappy"))
	reps[gone].Signal(syscall.SIGTERM)
	<-reps[gone].Done()
	var left []int
	for i := range 3 {
		if i != gone {
			left = append(left, i)
		}
	}
	eventually(t, "a new owner probing flappy", func() bool {
		for _, i := range left {
			if targetState(t, clients[i], "flappy").GetActiveResults() >= 5 {
				return true
			}
		}
		return false
	})
	for _, i := range left {
		if got := flapView(targetState(t, clients[i], "flappy")); got != want {
			t.Errorf("r%d after the move: %s, want %s (still flapping, not counted again)", i+1, got, want)
		}
		if got := streams[i].policies(pb.PolicyEvent_KIND_FLAPPING_ENDED, ""); len(got) != 0 {
			t.Errorf("r%d streamed FLAPPING_ENDED after the move: %q", i+1, got)
		}
		if got := streams[i].transitions("flappy"); len(got) != trsBefore {
			t.Errorf("r%d streamed flappy's transitions after the move: %q", i+1, got[trsBefore:])
		}
	}
}
