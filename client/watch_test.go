package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/client"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/server"
)

// next returns the watch's next event other than progress.
func next(t *testing.T, ch <-chan client.Event) client.Event {
	t.Helper()
	ctx := within(t)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("the watch ended")
			}
			if ev.Kind != client.EventProgress {
				return ev
			}
		case <-ctx.Done():
			t.Fatal("no event in time")
		}
	}
}

// nextKind returns the next event of kind k, checking that the events it
// skips are only progress, disconnections and resumptions.
func nextKind(t *testing.T, ch <-chan client.Event, k client.EventKind) client.Event {
	t.Helper()
	for {
		ev := next(t, ch)
		if ev.Kind == k {
			return ev
		}
		if ev.Kind != client.EventDisconnected && ev.Kind != client.EventResumed {
			t.Fatalf("got %v event at %d (%+v) waiting for %v", ev.Kind, ev.Revision, ev, k)
		}
	}
}

func names(sts []client.Status) []string {
	var out []string
	for _, st := range sts {
		out = append(out, st.Target.Name+"="+st.State.String())
	}
	return out
}

// TestWatchFollows checks the plain events of a watch: the snapshot as one
// event, then added, transition and removed in revision order.
func TestWatchFollows(t *testing.T) {
	e := newEnv(t, 1, checker.Config{})
	c := e.client(t)
	ctx := within(t)
	c.Add(ctx, tcpTarget("a", "edge", "10.0.0.1:80"))
	c.Add(ctx, tcpTarget("other", "data", "10.0.0.9:80"))

	ch := c.Watch(ctx, client.Filter{Group: "edge"})
	snap := next(t, ch)
	if snap.Kind != client.EventSnapshot || snap.Resnapshot || !cmp.Equal(names(snap.Snapshot), []string{"a=unhealthy"}) {
		t.Fatalf("first event %+v; want the snapshot of a", snap)
	}
	c.Add(ctx, tcpTarget("b", "edge", "10.0.0.2:80"))
	e.set("10.0.0.2:80", true)
	e.round(t)
	c.Remove(ctx, "a")

	added := next(t, ch)
	tr := next(t, ch)
	removed := next(t, ch)
	if added.Kind != client.EventAdded || added.Status.Target.Name != "b" || added.Status.Target.TCP.Address != "10.0.0.2:80" {
		t.Errorf("got %+v; want b added", added)
	}
	if tr.Kind != client.EventTransition || tr.Transition.Text != "b: unhealthy -> healthy" || tr.Transition.To != client.StateHealthy || tr.Transition.Result == nil {
		t.Errorf("got %+v; want b's transition to healthy", tr)
	}
	if removed.Kind != client.EventRemoved || removed.Name != "a" || removed.Group != "edge" {
		t.Errorf("got %+v; want a removed", removed)
	}
	if !(snap.Revision < added.Revision && added.Revision < tr.Revision && tr.Revision < removed.Revision) {
		t.Errorf("revisions %d %d %d %d do not increase", snap.Revision, added.Revision, tr.Revision, removed.Revision)
	}
}

// TestWatchResumesAfterACut cuts the connection while events happen: the
// watch says it is disconnected, then resumes from its revision and
// delivers what happened meanwhile, without a new snapshot.
func TestWatchResumesAfterACut(t *testing.T) {
	e := newEnv(t, 1, checker.Config{})
	c := e.client(t)
	ctx := within(t)
	c.Add(ctx, tcpTarget("a", "edge", "10.0.0.1:80"))
	var states []error
	ch := c.Watch(ctx, client.Filter{}, client.OnStreamState(func(err error) { states = append(states, err) }))
	snap := nextKind(t, ch, client.EventSnapshot)

	e.cuts.cut(true)
	down := next(t, ch)
	if down.Kind != client.EventDisconnected || !errors.Is(down.Err, client.ErrUnavailable) || down.Revision != snap.Revision || down.RetryIn <= 0 {
		t.Fatalf("after the cut: %+v; want disconnected at %d, unavailable, with a delay", down, snap.Revision)
	}
	e.set("10.0.0.1:80", true)
	e.round(t)
	c2 := newEnvClient(t, e) // the registry changes while this client is cut off
	c2.Add(ctx, tcpTarget("b", "edge", "10.0.0.2:80"))
	e.cuts.heal()
	if ev := nextKind(t, ch, client.EventResumed); ev.Revision != snap.Revision {
		t.Errorf("resumed after %d; want after the snapshot's %d", ev.Revision, snap.Revision)
	}

	tr := nextKind(t, ch, client.EventTransition)
	added := nextKind(t, ch, client.EventAdded)
	if tr.Transition.Target != "a" || tr.Revision <= snap.Revision || added.Status.Target.Name != "b" || added.Revision <= tr.Revision {
		t.Errorf("after the resume: %+v then %+v; want a's transition, then b added", tr, added)
	}
	// The stream-state callback ran on the follower's goroutine, which
	// delivered the events since: no race reading it here.
	if len(states) < 2 || states[0] == nil || states[len(states)-1] != nil {
		t.Errorf("stream states %v; want errors, then nil once resumed", states)
	}
}

// newEnvClient is a client of e that the cutter does not cut.
func newEnvClient(t *testing.T, e *env) *client.Client {
	t.Helper()
	c, err := client.New(t.Context(), e.addrs, client.WithToken(""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestWatchResnapshots cuts the watch for longer than pulsed's history:
// the resume answers OUT_OF_RANGE, and the watch starts over with a
// snapshot that says so and holds the registry as it is.
func TestWatchResnapshots(t *testing.T) {
	e := newEnv(t, 1, checker.Config{HistorySize: 4})
	c := e.client(t)
	ctx := within(t)
	c.Add(ctx, tcpTarget("a", "edge", "10.0.0.1:80"))
	ch := c.Watch(ctx, client.Filter{})
	nextKind(t, ch, client.EventSnapshot)

	e.cuts.cut(true)
	nextKind(t, ch, client.EventDisconnected)
	other := newEnvClient(t, e)
	for _, n := range []string{"b", "c", "d", "e", "f", "g"} {
		if _, _, err := other.Add(ctx, tcpTarget(n, "edge", "10.0.0.2:80")); err != nil {
			t.Fatal(err)
		}
	}
	other.Remove(ctx, "a")
	e.cuts.heal()

	snap := nextKind(t, ch, client.EventSnapshot)
	if !snap.Resnapshot || !errors.Is(snap.Err, client.ErrOutOfRange) {
		t.Errorf("second snapshot: resnapshot %v, err %v; want true and ErrOutOfRange", snap.Resnapshot, snap.Err)
	}
	want := []string{"b=unhealthy", "c=unhealthy", "d=unhealthy", "e=unhealthy", "f=unhealthy", "g=unhealthy"}
	if !cmp.Equal(names(snap.Snapshot), want) {
		t.Errorf("snapshot %v; want %v", names(snap.Snapshot), want)
	}
	list, _ := other.List(ctx, "")
	if snap.Revision != list.Revision {
		t.Errorf("snapshot at %d, ListTargets at %d", snap.Revision, list.Revision)
	}
}

// TestWatchFailsOver follows two servers of one registry (as two replicas
// on etcd share one): when the one it follows stops, the watch resumes on
// the other from the same revision, without a snapshot.
func TestWatchFailsOver(t *testing.T) {
	e := newEnv(t, 2, checker.Config{})
	c := e.client(t)
	ctx := within(t)
	c.Add(ctx, tcpTarget("a", "edge", "10.0.0.1:80"))
	ch := c.Watch(ctx, client.Filter{})
	snap := nextKind(t, ch, client.EventSnapshot)

	e.servers[0].Stop()
	e.set("10.0.0.1:80", true)
	e.round(t)
	tr := nextKind(t, ch, client.EventTransition)
	if tr.Transition.Target != "a" || tr.Revision <= snap.Revision {
		t.Errorf("after the failover: %+v", tr)
	}
	if _, err := c.State(ctx, "a"); err != nil {
		t.Errorf("State after the failover: %v", err)
	}
}

// unknownEvent is an event of a kind this client does not know: a field
// of the oneof added by a newer pulsed.
func unknownEvent(rev uint64) *pb.WatchTransitionsResponse {
	ev := &pb.WatchTransitionsResponse{Revision: rev}
	b := protowire.AppendTag(nil, 60, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte{0x08, 0x01})
	ev.ProtoReflect().SetUnknown(b)
	return ev
}

func snapshotAt(rev uint64, stream grpc.ServerStreamingServer[pb.WatchTransitionsResponse]) {
	stream.Send(&pb.WatchTransitionsResponse{Revision: rev, Event: &pb.WatchTransitionsResponse_Snapshot{Snapshot: &pb.TargetStatus{
		Spec: &pb.Target{Name: "a", Group: "edge", Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "10.0.0.1:80"}}}, State: pb.State_STATE_UNHEALTHY}}})
	stream.Send(&pb.WatchTransitionsResponse{Revision: rev, Event: &pb.WatchTransitionsResponse_SnapshotComplete{SnapshotComplete: &pb.SnapshotComplete{}}})
}

func transitionAt(rev uint64, to pb.State) *pb.WatchTransitionsResponse {
	return &pb.WatchTransitionsResponse{Revision: rev, Event: &pb.WatchTransitionsResponse_Transition{Transition: &pb.Transition{
		Target: "a", Group: "edge", From: pb.State_STATE_UNHEALTHY, To: to}}}
}

// fakeClient is a client of f with short backoffs.
func fakeClient(t *testing.T, f *fakePulse, opts ...client.Option) *client.Client {
	t.Helper()
	addr := f.serve(t)
	c, err := client.New(t.Context(), []string{addr}, append([]client.Option{client.WithToken(""), client.WithBackoff(time.Millisecond, 10*time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestWatchSkipsUnknownEvents: an event of a kind the client does not
// know moves the resume point and is not delivered; a duplicate replayed
// by the resumed stream is dropped.
func TestWatchSkipsUnknownEvents(t *testing.T) {
	f := &fakePulse{watch: func(n int, req *pb.WatchTransitionsRequest, stream grpc.ServerStreamingServer[pb.WatchTransitionsResponse]) error {
		switch n {
		case 0:
			snapshotAt(10, stream)
			stream.Send(unknownEvent(11))
			return status.Error(codes.Unavailable, "going away")
		default:
			stream.Send(unknownEvent(11)) // replayed: at or below the resume point
			stream.Send(transitionAt(12, pb.State_STATE_HEALTHY))
			<-stream.Context().Done()
			return nil
		}
	}}
	c := fakeClient(t, f)
	ch := c.Watch(within(t), client.Filter{})
	var got []string
	for ev := range ch {
		got = append(got, ev.Kind.String())
		if ev.Kind == client.EventTransition {
			if ev.Revision != 12 {
				t.Errorf("transition at %d; want 12", ev.Revision)
			}
			break
		}
	}
	if want := []string{"snapshot", "disconnected", "resumed", "transition"}; !cmp.Equal(got, want) {
		t.Errorf("events %v; want %v", got, want)
	}
	// The unknown event moved the resume point into revision 11, which may
	// carry more events: the watch resumes from 10 and drops the replayed one.
	if starts := f.startRevisions(); !cmp.Equal(starts, []uint64{0, 10}) {
		t.Errorf("start revisions %v; want [0 10]: the unknown event moves the resume point", starts)
	}
}

// With replicas one revision can carry several events (one transaction
// that changed several targets). A stream that breaks inside a revision
// resumes from the revision before it; the follower drops what it
// delivered and delivers the rest of the revision, each event once.
func TestWatchResumesInsideARevision(t *testing.T) {
	named := func(rev uint64, name string) *pb.WatchTransitionsResponse {
		ev := transitionAt(rev, pb.State_STATE_HEALTHY)
		ev.GetTransition().Target = name
		return ev
	}
	f := &fakePulse{watch: func(n int, req *pb.WatchTransitionsRequest, stream grpc.ServerStreamingServer[pb.WatchTransitionsResponse]) error {
		switch n {
		case 0:
			snapshotAt(10, stream)
			stream.Send(named(11, "a"))
			stream.Send(named(11, "b"))
			return status.Error(codes.Unavailable, "going away") // c, also at 11, not sent
		default:
			for _, name := range []string{"a", "b", "c"} {
				stream.Send(named(11, name))
			}
			stream.Send(named(12, "d"))
			stream.Send(named(13, "e"))
			stream.Send(&pb.WatchTransitionsResponse{Revision: 13, Event: &pb.WatchTransitionsResponse_Progress{Progress: &pb.Progress{}}})
			return status.Error(codes.Unavailable, "going away")
		}
	}}
	c := fakeClient(t, f)
	ctx, cancel := context.WithCancel(within(t))
	defer cancel()
	ch := c.Watch(ctx, client.Filter{})
	var got []string
	for ev := range ch {
		if ev.Kind == client.EventTransition {
			got = append(got, fmt.Sprintf("%s@%d", ev.Transition.Target, ev.Revision))
		}
		if len(f.startRevisions()) == 3 {
			break
		}
	}
	if want := []string{"a@11", "b@11", "c@11", "d@12", "e@13"}; !cmp.Equal(got, want) {
		t.Errorf("transitions %v; want %v", got, want)
	}
	// Revision 13 was complete (a progress event followed): the third
	// stream resumes from it, not from 12.
	if starts := f.startRevisions(); !cmp.Equal(starts, []uint64{0, 10, 13}) {
		t.Errorf("start revisions %v; want [0 10 13]", starts)
	}
}

// TestWatchResumesFromTheNamedRevision: after RESOURCE_EXHAUSTED the watch
// resumes from the revision pulsed names, and drops the events it replays
// that were delivered already.
func TestWatchResumesFromTheNamedRevision(t *testing.T) {
	f := &fakePulse{watch: func(n int, req *pb.WatchTransitionsRequest, stream grpc.ServerStreamingServer[pb.WatchTransitionsResponse]) error {
		switch n {
		case 0:
			snapshotAt(10, stream)
			stream.Send(transitionAt(11, pb.State_STATE_HEALTHY))
			stream.Send(transitionAt(12, pb.State_STATE_UNHEALTHY))
			return status.Error(codes.ResourceExhausted, "watcher too slow: the last revision delivered is 11; watch again with start_revision 11")
		default:
			stream.Send(transitionAt(12, pb.State_STATE_UNHEALTHY))
			stream.Send(transitionAt(13, pb.State_STATE_HEALTHY))
			<-stream.Context().Done()
			return nil
		}
	}}
	c := fakeClient(t, f)
	ch := c.Watch(within(t), client.Filter{})
	var revs []uint64
	for ev := range ch {
		if ev.Kind == client.EventResumed {
			continue
		}
		if ev.Kind == client.EventDisconnected {
			if !errors.Is(ev.Err, client.ErrResourceExhausted) {
				t.Errorf("disconnected with %v; want ErrResourceExhausted", ev.Err)
			}
			continue
		}
		revs = append(revs, ev.Revision)
		if ev.Revision == 13 {
			break
		}
	}
	if !cmp.Equal(revs, []uint64{10, 11, 12, 13}) {
		t.Errorf("revisions delivered %v; want [10 11 12 13]", revs)
	}
	if starts := f.startRevisions(); !cmp.Equal(starts, []uint64{0, 11}) {
		t.Errorf("start revisions %v; want [0 11]", starts)
	}
}

// TestWatchResumesWhereShutdownSaid: a stream pulsed ends as it shuts
// down names the revision to resume from; the watch resumes from exactly
// that one, complete, not from the one before it (which pulsed, restarted
// on its store, no longer holds: OUT_OF_RANGE and a snapshot). A named
// revision below the last delivered one is resumed from, and its replayed
// events are dropped.
func TestWatchResumesWhereShutdownSaid(t *testing.T) {
	shutdown := func(rev uint64) error {
		return status.Errorf(codes.Unavailable, "pulsed is shutting down; reconnect and resume with start_revision %d", rev)
	}
	f := &fakePulse{watch: func(n int, req *pb.WatchTransitionsRequest, stream grpc.ServerStreamingServer[pb.WatchTransitionsResponse]) error {
		switch n {
		case 0:
			snapshotAt(10, stream)
			stream.Send(transitionAt(11, pb.State_STATE_HEALTHY))
			return shutdown(11)
		case 1:
			if req.GetStartRevision() < 11 {
				// As a restarted pulsed, whose history starts at 11.
				return status.Errorf(codes.OutOfRange, "start revision %d is older than the history: the oldest revision a watch can resume from is 11; watch again with start_revision 0 to re-snapshot", req.GetStartRevision())
			}
			stream.Send(transitionAt(12, pb.State_STATE_UNHEALTHY))
			stream.Send(transitionAt(13, pb.State_STATE_HEALTHY))
			return shutdown(12) // its last event not sent, say
		default:
			if req.GetStartRevision() == 0 {
				return status.Error(codes.InvalidArgument, "no second snapshot in this test") // ends the watch
			}
			stream.Send(transitionAt(13, pb.State_STATE_HEALTHY))
			stream.Send(transitionAt(14, pb.State_STATE_UNHEALTHY))
			<-stream.Context().Done()
			return nil
		}
	}}
	c := fakeClient(t, f)
	ch := c.Watch(within(t), client.Filter{})
	var got []string
	for ev := range ch {
		switch ev.Kind {
		case client.EventDisconnected:
			if !errors.Is(ev.Err, client.ErrUnavailable) {
				t.Errorf("disconnected with %v; want ErrUnavailable", ev.Err)
			}
			continue
		case client.EventSnapshot:
			if ev.Resnapshot {
				t.Errorf("re-snapshot at %d: %v", ev.Revision, ev.Err)
			}
		}
		got = append(got, fmt.Sprintf("%v@%d", ev.Kind, ev.Revision))
		if ev.Revision == 14 {
			break
		}
	}
	want := []string{"snapshot@10", "transition@11", "resumed@11", "transition@12", "transition@13", "resumed@12", "transition@14"}
	if !cmp.Equal(got, want) {
		t.Errorf("events %v; want %v", got, want)
	}
	if starts := f.startRevisions(); !cmp.Equal(starts, []uint64{0, 11, 12}) {
		t.Errorf("start revisions %v; want [0 11 12]", starts)
	}
}

// TestWatchResumesPastFilteredEvents: a filtered stream's end may name a
// revision past its last event (events the filter leaves out): the watch
// resumes from it, as pulsed restarted on its store holds nothing before.
func TestWatchResumesPastFilteredEvents(t *testing.T) {
	f := &fakePulse{watch: func(n int, req *pb.WatchTransitionsRequest, stream grpc.ServerStreamingServer[pb.WatchTransitionsResponse]) error {
		switch {
		case n == 0:
			snapshotAt(10, stream)
			stream.Send(transitionAt(11, pb.State_STATE_HEALTHY))
			return status.Error(codes.Unavailable, "pulsed is shutting down; reconnect and resume with start_revision 15")
		case req.GetStartRevision() == 0:
			return status.Error(codes.InvalidArgument, "no second snapshot in this test") // ends the watch
		case req.GetStartRevision() < 15:
			return status.Errorf(codes.OutOfRange, "start revision %d is older than the history: the oldest revision a watch can resume from is 15; watch again with start_revision 0 to re-snapshot", req.GetStartRevision())
		default:
			stream.Send(transitionAt(16, pb.State_STATE_UNHEALTHY))
			<-stream.Context().Done()
			return nil
		}
	}}
	c := fakeClient(t, f)
	var got []string
	for ev := range c.Watch(within(t), client.Filter{Group: "edge"}) {
		if ev.Kind == client.EventDisconnected {
			continue
		}
		got = append(got, fmt.Sprintf("%v@%d", ev.Kind, ev.Revision))
		if ev.Revision >= 16 || ev.Kind == client.EventSnapshot && ev.Resnapshot {
			break
		}
	}
	want := []string{"snapshot@10", "transition@11", "resumed@15", "transition@16"}
	if !cmp.Equal(got, want) {
		t.Errorf("events %v; want %v", got, want)
	}
}

// TestWatchFromAnotherServersRevision: FromRevision with a revision pulsed
// refuses (FAILED_PRECONDITION) starts over with a snapshot that says so.
func TestWatchFromAnotherServersRevision(t *testing.T) {
	f := &fakePulse{watch: func(n int, req *pb.WatchTransitionsRequest, stream grpc.ServerStreamingServer[pb.WatchTransitionsResponse]) error {
		if req.GetStartRevision() != 0 {
			return status.Error(codes.FailedPrecondition, "start_revision 500 is ahead of 10")
		}
		snapshotAt(10, stream)
		<-stream.Context().Done()
		return nil
	}}
	c := fakeClient(t, f)
	ev := next(t, c.Watch(within(t), client.Filter{}, client.FromRevision(500)))
	if ev.Kind != client.EventSnapshot || !ev.Resnapshot || !errors.Is(ev.Err, client.ErrFailedPrecondition) || ev.Revision != 10 {
		t.Errorf("first event %+v; want a re-snapshot at 10 for FAILED_PRECONDITION", ev)
	}
	if starts := f.startRevisions(); !cmp.Equal(starts, []uint64{500, 0}) {
		t.Errorf("start revisions %v; want [500 0]", starts)
	}
}

// TestWatchIdleTimeout: a stream silent past the idle timeout is treated
// as dead, and resumed.
func TestWatchIdleTimeout(t *testing.T) {
	f := &fakePulse{watch: func(n int, req *pb.WatchTransitionsRequest, stream grpc.ServerStreamingServer[pb.WatchTransitionsResponse]) error {
		if req.GetStartRevision() == 0 { // a slow machine may time the first stream out too
			snapshotAt(10, stream)
		}
		<-stream.Context().Done()
		return nil
	}}
	c := fakeClient(t, f, client.WithIdleTimeout(20*time.Millisecond))
	ch := c.Watch(within(t), client.Filter{})
	nextKind(t, ch, client.EventSnapshot)
	down := nextKind(t, ch, client.EventDisconnected)
	if !strings.Contains(down.Err.Error(), "idle timeout") {
		t.Errorf("disconnected with %v; want the idle timeout named", down.Err)
	}
	// On a loaded machine a resumed stream can time out too, before it
	// reaches pulsed: the events that says are read, so the watch goes on.
	waitFor(t, "a resume from 10", func() bool {
		for drained := false; !drained; {
			select {
			case <-ch:
			default:
				drained = true
			}
		}
		return slices.Contains(f.startRevisions(), 10)
	})
}

// TestWatchStops: a filter pulsed refuses stops the watch with the error,
// and the channel closes.
func TestWatchStops(t *testing.T) {
	e := newEnv(t, 1, checker.Config{})
	c := e.client(t)
	ch := c.Watch(within(t), client.Filter{Group: "not a group!"})
	ev := next(t, ch)
	if ev.Kind != client.EventStopped || !errors.Is(ev.Err, client.ErrInvalidArgument) {
		t.Fatalf("got %+v; want stopped with ErrInvalidArgument", ev)
	}
	if _, ok := <-ch; ok {
		t.Error("the channel is still open after EventStopped")
	}
}

// TestWatchEndsWithItsContext: the channel closes when the context ends,
// and no goroutine is left (goleak checks at the end).
func TestWatchEndsWithItsContext(t *testing.T) {
	e := newEnv(t, 1, checker.Config{}, server.WithProgressInterval(time.Millisecond))
	c := e.client(t)
	ctx, cancel := context.WithCancel(within(t))
	ch := c.Watch(ctx, client.Filter{})
	nextKind(t, ch, client.EventSnapshot)
	cancel()
	for range ch {
	}
}

// TestBeforeStream: the function runs before every stream, and its errors,
// whatever their code, are retried rather than fatal.
func TestBeforeStream(t *testing.T) {
	f := &fakePulse{watch: func(n int, req *pb.WatchTransitionsRequest, stream grpc.ServerStreamingServer[pb.WatchTransitionsResponse]) error {
		if n == 0 {
			snapshotAt(10, stream)
			return status.Error(codes.Unavailable, "going away")
		}
		stream.Send(transitionAt(11, pb.State_STATE_HEALTHY))
		<-stream.Context().Done()
		return nil
	}}
	c := fakeClient(t, f)
	var calls atomic.Int32
	var events []string
	ch := c.Watch(within(t), client.Filter{},
		client.BeforeStream(func(context.Context) error {
			if calls.Add(1) == 2 {
				return &client.Error{Code: codes.InvalidArgument, Message: "registering: target.rise: must be at most 1000"}
			}
			return nil
		}),
		client.OnEvent(func(ev client.Event) { events = append(events, ev.Kind.String()) }))
	for ev := next(t, ch); ev.Kind != client.EventTransition; ev = next(t, ch) {
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("BeforeStream ran %d times; want 3: before the first stream, then failing once, then before the resume", n)
	}
	if want := []string{"snapshot", "disconnected", "disconnected", "resumed", "transition"}; !cmp.Equal(events, want) {
		t.Errorf("OnEvent saw %v; want %v", events, want)
	}
}
