package server_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding/gzip"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/pulsehealth/pulse/checker"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/testscale"
	"github.com/pulsehealth/pulse/server"
)

type stream = grpc.ServerStreamingClient[pb.WatchTransitionsResponse]

// watch opens a stream and waits for its headers: from then on every event
// reaches it.
func watch(t *testing.T, ctx context.Context, e *env, req *pb.WatchTransitionsRequest) stream {
	t.Helper()
	w, err := e.client.WatchTransitions(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Header(); err != nil {
		t.Fatal(err)
	}
	return w
}

// readSnapshot reads a stream's snapshot up to its marker.
func readSnapshot(t *testing.T, w stream) (names []string, rev uint64) {
	t.Helper()
	for {
		ev, err := w.Recv()
		if err != nil {
			t.Fatal(err)
		}
		switch e := ev.GetEvent().(type) {
		case *pb.WatchTransitionsResponse_Snapshot:
			names = append(names, e.Snapshot.GetSpec().GetName()+"="+e.Snapshot.GetState().String())
			rev = ev.GetRevision()
		case *pb.WatchTransitionsResponse_SnapshotComplete:
			if names != nil && ev.GetRevision() != rev {
				t.Errorf("snapshot at %d, marker at %d", rev, ev.GetRevision())
			}
			return names, ev.GetRevision()
		default:
			t.Fatalf("%v before the snapshot's end", ev)
		}
	}
}

// describe renders an event shortly: a transition by its text, others as
// "added web-1".
func describe(ev *pb.WatchTransitionsResponse) string {
	switch e := ev.GetEvent().(type) {
	case *pb.WatchTransitionsResponse_Transition:
		return e.Transition.GetText()
	case *pb.WatchTransitionsResponse_Added:
		return "added " + e.Added.GetSpec().GetName()
	case *pb.WatchTransitionsResponse_Updated:
		return "updated " + e.Updated.GetSpec().GetName()
	case *pb.WatchTransitionsResponse_Removed:
		return "removed " + e.Removed.GetName()
	case *pb.WatchTransitionsResponse_Progress:
		return "progress"
	default:
		return fmt.Sprintf("%T", e)
	}
}

// recvN reads n events and checks their revisions increase.
func recvN(t *testing.T, w stream, n int) []string {
	t.Helper()
	var out []string
	var last uint64
	for range n {
		ev, err := w.Recv()
		if err != nil {
			t.Fatalf("after %v: %v", out, err)
		}
		if ev.GetRevision() <= last {
			t.Errorf("revision %d after %d", ev.GetRevision(), last)
		}
		last = ev.GetRevision()
		out = append(out, describe(ev))
	}
	return out
}

func TestWatchSnapshotThenLive(t *testing.T) {
	e := start(t, checker.Config{})
	e.add(t, tcpTarget("web-1", "edge"))
	e.add(t, tcpTarget("db-1", "data"))
	e.set("web-1:80", true)
	e.c.RunRound(t.Context())

	all := watch(t, t.Context(), e, &pb.WatchTransitionsRequest{})
	snap, rev := readSnapshot(t, all)
	if diff := cmp.Diff([]string{"db-1=STATE_UNHEALTHY", "web-1=STATE_HEALTHY"}, snap); diff != "" {
		t.Errorf("snapshot (-want +got):\n%s", diff)
	}
	list, _ := e.client.ListTargets(t.Context(), &pb.ListTargetsRequest{})
	if list.GetRevision() != rev {
		t.Errorf("snapshot at %d, ListTargets at %d", rev, list.GetRevision())
	}
	edge := watch(t, t.Context(), e, &pb.WatchTransitionsRequest{Group: "edge"})
	if snap, _ := readSnapshot(t, edge); !cmp.Equal(snap, []string{"web-1=STATE_HEALTHY"}) {
		t.Errorf("edge snapshot %v", snap)
	}

	e.set("web-1:80", false)
	e.c.RunRound(t.Context()) // web-1 falls
	e.add(t, tcpTarget("web-2", "edge"))
	e.client.RemoveTarget(t.Context(), &pb.RemoveTargetRequest{Name: "db-1"})

	if diff := cmp.Diff([]string{"web-1: healthy -> unhealthy", "added web-2", "removed db-1"}, recvN(t, all, 3)); diff != "" {
		t.Errorf("all (-want +got):\n%s", diff)
	}
	ev, err := edge.Recv()
	if err != nil {
		t.Fatal(err)
	}
	want := &pb.Transition{
		Target: "web-1", Group: "edge",
		From: pb.State_STATE_HEALTHY, To: pb.State_STATE_UNHEALTHY,
		Text:   "web-1: healthy -> unhealthy",
		Result: &pb.ProbeResult{Pass: false, Error: "connection refused"},
		Mode:   pb.Mode_MODE_ACTIVE,
	}
	if diff := cmp.Diff(want, ev.GetTransition(), protocmp.Transform(),
		protocmp.IgnoreFields(&pb.Transition{}, "time"),
		protocmp.IgnoreFields(&pb.ProbeResult{}, "time", "latency")); diff != "" {
		t.Errorf("edge transition (-want +got):\n%s", diff)
	}
	if ev.GetRevision() != rev+1 || ev.GetTransition().GetTime() == nil {
		t.Errorf("edge transition at revision %d (snapshot %d), time %v", ev.GetRevision(), rev, ev.GetTransition().GetTime())
	}
	if got := recvN(t, edge, 1); got[0] != "added web-2" {
		t.Errorf("edge then got %v", got)
	}
}

func TestWatchResumeAndItsErrors(t *testing.T) {
	e := start(t, checker.Config{HistorySize: 2})
	for _, n := range []string{"a", "b", "c", "d"} {
		e.add(t, tcpTarget(n, ""))
	}
	list, _ := e.client.ListTargets(t.Context(), &pb.ListTargetsRequest{})
	rev := list.GetRevision() // 4 events: the history holds the last 2
	w := watch(t, t.Context(), e, &pb.WatchTransitionsRequest{StartRevision: rev - 2})
	if got := recvN(t, w, 2); !cmp.Equal(got, []string{"added c", "added d"}) {
		t.Errorf("resume after %d: %v", rev-2, got)
	}

	for _, tt := range []struct {
		start uint64
		code  codes.Code
		msg   string
	}{
		{rev - 3, codes.OutOfRange, fmt.Sprintf("start revision %d is older than the history: the oldest revision a watch can resume from is %d; watch again with start_revision 0", rev-3, rev-2)},
		{rev + 1, codes.FailedPrecondition, fmt.Sprintf("start revision %d is ahead of the current revision %d", rev+1, rev)},
	} {
		s, err := e.client.WatchTransitions(t.Context(), &pb.WatchTransitionsRequest{StartRevision: tt.start})
		if err == nil {
			_, err = s.Recv()
		}
		wantCode(t, err, tt.code, tt.msg)
	}
}

func TestWatchProgressOnIdleStream(t *testing.T) {
	e := start(t, checker.Config{}, server.WithProgressInterval(20*time.Millisecond))
	e.add(t, tcpTarget("a", "g1"))
	e.add(t, tcpTarget("b", "g2"))
	w := watch(t, t.Context(), e, &pb.WatchTransitionsRequest{Group: "g1"})
	_, rev := readSnapshot(t, w)
	e.add(t, tcpTarget("c", "g2")) // not for this stream, but moves the revision
	for {
		ev, err := w.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetProgress() == nil {
			t.Fatalf("unexpected %v", ev)
		}
		if ev.GetRevision() == rev+1 {
			return // the stream has seen everything up to c's addition
		}
		if ev.GetRevision() != rev {
			t.Fatalf("progress at %d, want %d or %d", ev.GetRevision(), rev, rev+1)
		}
	}
}

// A stream whose client stops reading never blocks the checker or another
// stream: once it is further behind than the history holds it is ended, and
// when its client reads again it gets what was in flight, then
// RESOURCE_EXHAUSTED naming the last revision delivered, from which it can
// resume.
func TestStuckStreamBlocksNobody(t *testing.T) {
	e := start(t, checker.Config{HistorySize: 500})
	e.add(t, tcpTarget("flappy", ""))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stuck := watch(t, ctx, e, &pb.WatchTransitionsRequest{})
	readSnapshot(t, stuck)
	reader := watch(t, ctx, e, &pb.WatchTransitionsRequest{})
	readSnapshot(t, reader)

	var got atomic.Int64
	readerErr := make(chan error, 1)
	go func() {
		var last uint64
		for {
			ev, err := reader.Recv()
			if err != nil {
				readerErr <- err
				return
			}
			if last != 0 && ev.GetRevision() != last+1 {
				readerErr <- fmt.Errorf("revision %d after %d", ev.GetRevision(), last)
				return
			}
			last = ev.GetRevision()
			got.Add(1)
		}
	}()
	const flips = 10000
	for i := range flips {
		e.set("flappy:80", i%2 == 0)
		if n := len(e.c.RunRound(t.Context())); n != 1 {
			t.Fatalf("round %d made %d transitions", i, n)
		}
		if i%200 == 199 { // keep the reader within the history
			deadline := time.Now().Add(testscale.D(10 * time.Second))
			for got.Load() < int64(i+1) {
				if time.Now().After(deadline) {
					t.Fatalf("reader stuck at %d of %d", got.Load(), i+1)
				}
				time.Sleep(100 * time.Microsecond)
			}
		}
	}
	deadline := time.Now().Add(testscale.D(10 * time.Second))
	for got.Load() < flips {
		if time.Now().After(deadline) {
			t.Fatalf("reader got %d of %d", got.Load(), flips)
		}
		time.Sleep(100 * time.Microsecond)
	}

	var last uint64
	var err error
	n := 0
	for {
		var ev *pb.WatchTransitionsResponse
		if ev, err = stuck.Recv(); err != nil {
			break
		}
		last = ev.GetRevision()
		n++
	}
	if n >= flips {
		t.Errorf("the stuck stream received all %d events; it should have been ended", n)
	}
	wantCode(t, err, codes.ResourceExhausted, fmt.Sprintf("watcher fell behind: the last revision delivered is %d; watch again with start_revision %d", last, last))
	select {
	case err := <-readerErr:
		t.Fatalf("reader ended: %v", err)
	default:
	}
}

func TestShutdownEndsWatchersWithUnavailable(t *testing.T) {
	e := start(t, checker.Config{})
	w := watch(t, t.Context(), e, &pb.WatchTransitionsRequest{})
	_, rev := readSnapshot(t, w)
	e.c.Close()
	_, err := w.Recv()
	wantCode(t, err, codes.Unavailable, fmt.Sprintf("pulsed is shutting down; reconnect and resume with start_revision %d", rev))
	// A normal stop is no failure: the stream's end is logged at INFO.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(e.logs.String(), "grpc.method=WatchTransitions"); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the watch's end was not logged")
		}
	}
	for _, line := range strings.Split(e.logs.String(), "\n") {
		if strings.Contains(line, "grpc.method=WatchTransitions") && !strings.Contains(line, "level=INFO") {
			t.Errorf("the stream pulsed ended as it stopped is logged as %q, want level=INFO", line)
		}
	}
}

// A filtered stream ended by the shutdown names the last published
// revision, past the events its filter leaves out: a pulsed restarted on
// its store holds nothing before that revision, so a resume from the
// stream's last event would answer OUT_OF_RANGE.
func TestShutdownNamesTheLastRevisionToFilteredStreams(t *testing.T) {
	e := start(t, checker.Config{})
	w := watch(t, t.Context(), e, &pb.WatchTransitionsRequest{Group: "edge"})
	readSnapshot(t, w)
	e.add(t, tcpTarget("a", "edge"))
	if ev, err := w.Recv(); err != nil || describe(ev) != "added a" {
		t.Fatalf("got %v %v, want a added", ev, err)
	}
	e.add(t, tcpTarget("b", "other"))
	list, err := e.client.ListTargets(t.Context(), &pb.ListTargetsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	e.c.Close()
	_, err = w.Recv()
	wantCode(t, err, codes.Unavailable, fmt.Sprintf("pulsed is shutting down; reconnect and resume with start_revision %d", list.GetRevision()))
}

func TestGroupHealthBridge(t *testing.T) {
	e := start(t, checker.Config{})
	hc := healthpb.NewHealthClient(e.conn)
	check := func(svc string) (healthpb.HealthCheckResponse_ServingStatus, codes.Code) {
		resp, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: svc})
		return resp.GetStatus(), status.Code(err)
	}
	if st, code := check("edge"); code != codes.NotFound {
		t.Errorf("unknown group: %v %v, want NotFound", st, code)
	}
	wctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	hw, err := hc.Watch(wctx, &healthpb.HealthCheckRequest{Service: "edge"})
	if err != nil {
		t.Fatal(err)
	}
	watchNext := func() healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := hw.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus()
	}
	if st := watchNext(); st != healthpb.HealthCheckResponse_SERVICE_UNKNOWN {
		t.Errorf("Watch of an unknown group: %v", st)
	}

	e.add(t, tcpTarget("web-1", "edge"))
	e.add(t, tcpTarget("web-2", "edge"))
	if st, code := check("edge"); st != healthpb.HealthCheckResponse_NOT_SERVING || code != codes.OK {
		t.Errorf("group with no routable target: %v %v", st, code)
	}
	if st := watchNext(); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Watch after adds: %v", st)
	}
	e.set("web-2:80", true)
	e.c.RunRound(t.Context())
	if st, _ := check("edge"); st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("group with a routable target: %v", st)
	}
	if st := watchNext(); st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("Watch after web-2 rose: %v", st)
	}
	e.set("web-2:80", false)
	e.c.RunRound(t.Context())
	if st := watchNext(); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Watch after web-2 fell: %v", st)
	}

	for _, svc := range []string{"", "pulse.v1.HealthChecker"} {
		if st, _ := check(svc); st != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("pulsed itself (%q): %v", svc, st)
		}
	}
	sw, err := hc.Watch(wctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := sw.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("Watch of pulsed: %v %v", resp, err)
	}
	e.health.Shutdown()
	if st, _ := check(""); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("pulsed after Shutdown: %v", st)
	}
	if resp, err := sw.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Watch of pulsed after Shutdown: %v %v", resp, err)
	}
	if !strings.Contains(fmt.Sprint(check("edge")), "NOT_SERVING") {
		t.Errorf("groups keep answering after Shutdown")
	}
}

// Streams share each event's encoded message, but only among streams that
// encode alike: a stream that asked for gzip and one that did not receive
// the same event, each in its own encoding, whichever sent it first. The
// gzip stream sends first; the plain one resumes from before the event.
func TestWatchSharedEncodingFollowsCompression(t *testing.T) {
	e := start(t, checker.Config{})
	e.add(t, tcpTarget("web-1", "edge"))
	before := e.c.Revision()
	zipped, err := e.client.WatchTransitions(t.Context(), &pb.WatchTransitionsRequest{StartRevision: before}, grpc.UseCompressor(gzip.Name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zipped.Header(); err != nil {
		t.Fatal(err)
	}
	e.set("web-1:80", true)
	e.c.RunRound(t.Context()) // web-1 rises
	if diff := cmp.Diff([]string{"web-1: unhealthy -> healthy"}, recvN(t, zipped, 1)); diff != "" {
		t.Errorf("gzip stream (-want +got):\n%s", diff)
	}
	plain := watch(t, t.Context(), e, &pb.WatchTransitionsRequest{StartRevision: before})
	if diff := cmp.Diff([]string{"web-1: unhealthy -> healthy"}, recvN(t, plain, 1)); diff != "" {
		t.Errorf("plain stream (-want +got):\n%s", diff)
	}
	// And the other way round: a plain stream first, then gzip.
	e.set("web-1:80", false)
	e.c.RunRound(t.Context()) // web-1 falls
	if diff := cmp.Diff([]string{"web-1: healthy -> unhealthy"}, recvN(t, plain, 1)); diff != "" {
		t.Errorf("plain stream (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"web-1: healthy -> unhealthy"}, recvN(t, zipped, 1)); diff != "" {
		t.Errorf("gzip stream (-want +got):\n%s", diff)
	}
}
