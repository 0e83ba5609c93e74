package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pulsehealth/pulse/client"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/testscale"
)

// silentServer accepts TCP connections on loopback and never answers: an
// HTTP probe of it lasts until its timeout. It closes them all when the
// test ends.
type silentServer struct {
	lis   net.Listener
	mu    sync.Mutex // protects conns
	conns []net.Conn
	done  chan struct{} // closed when the accepting goroutine has ended
}

func newSilentServer(t *testing.T) *silentServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &silentServer{lis: lis, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		<-s.done
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range s.conns {
			c.Close()
		}
	})
	return s
}

// accepted returns how many connections the server has accepted.
func (s *silentServer) accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// shuttingDown is the status a watch stream ends with when pulsed shuts
// down: it names the revision to resume from.
func shuttingDown(rev uint64) *regexp.Regexp {
	return regexp.MustCompile(fmt.Sprintf(`^pulsed is shutting down; reconnect and resume with start_revision %d$`, rev))
}

// SIGTERM while a ProbeNow waits for a target that never answers (timeout
// 30s): the ProbeNow ends at once with UNAVAILABLE, the open watch stream
// ends with UNAVAILABLE naming the revision to resume from, and pulsed
// exits 0, all within -shutdown-timeout.
func TestShutdownEndsProbeNowInFlight(t *testing.T) {
	bin := buildPulsed(t)
	silent := newSilentServer(t)
	// Without a ProbeNow pulsed exits at once (a -race binary waits 1s
	// more at exit); the old code waited for the probe's 30s and was
	// killed by its own bound, with status 1 and no resume revision.
	const bound = 5 * time.Second
	p := startPulsed(t, bin, "-shutdown-timeout", bound.String())
	client := dial(t, p.Addr)
	// A day's interval: the target's first scheduled probe is hours away
	// (its offset in the interval is a hash of its name), so the probe in
	// flight is the ProbeNow's.
	tg := &pb.Target{
		Name:     "silent",
		Probe:    &pb.Target_Http{Http: &pb.HttpProbe{Url: "http://" + silent.lis.Addr().String() + "/"}},
		Interval: durationpb.New(24 * time.Hour),
		Timeout:  durationpb.New(30 * time.Second),
	}
	if _, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tg}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w, err := client.WatchTransitions(ctx, &pb.WatchTransitionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var last uint64 // the revision of the last message received
	for {
		ev, err := w.Recv()
		if err != nil {
			t.Fatal(err)
		}
		last = ev.GetRevision()
		if ev.GetSnapshotComplete() != nil {
			break
		}
	}
	probed := make(chan error, 1)
	go func() {
		_, err := client.ProbeNow(ctx, &pb.ProbeNowRequest{Names: []string{"silent"}})
		probed <- err
	}()
	eventually(t, "the ProbeNow's probe to connect", func() bool { return silent.accepted() > 0 })
	select {
	case err := <-probed:
		t.Fatalf("ProbeNow ended before SIGTERM: %v", err)
	default:
	}

	start := time.Now()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := w.Recv()
		if err != nil {
			if st := status.Convert(err); st.Code() != codes.Unavailable || !shuttingDown(last).MatchString(st.Message()) {
				t.Errorf("watch stream ended with %v, want UNAVAILABLE naming start_revision %d", err, last)
			}
			break
		}
		last = ev.GetRevision() // a policy event (pulsed late on a loaded machine) moves it
	}
	t.Logf("watch stream ended %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	select {
	case err := <-probed:
		if st := status.Convert(err); st.Code() != codes.Unavailable || st.Message() != "pulsed is shutting down; retry against a running instance" {
			t.Errorf("ProbeNow in flight at SIGTERM ended with %v, want UNAVAILABLE saying pulsed is shutting down", err)
		}
	case <-time.After(testscale.D(30 * time.Second)):
		t.Fatal("ProbeNow still in flight 30s after SIGTERM")
	}
	t.Logf("ProbeNow ended %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	select {
	case <-p.Done():
	case <-time.After(testscale.D(30 * time.Second)):
		t.Fatalf("pulsed still running 30s after SIGTERM\n%s", p.Logs())
	}
	took := time.Since(start)
	if err := p.Err(); err != nil {
		t.Errorf("pulsed exited with %v, want 0\n%s", err, p.Logs())
	}
	if took >= bound {
		t.Errorf("pulsed took %v to exit after SIGTERM, want less than -shutdown-timeout %v", took.Round(time.Millisecond), bound)
	}
	t.Logf("pulsed exited %v after SIGTERM", took.Round(time.Millisecond))
}

// toggleServer is an HTTP target that answers 200 while up, 503 when down.
func toggleServer(t *testing.T) (*httptest.Server, *atomic.Bool) {
	t.Helper()
	var up atomic.Bool
	up.Store(true)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !up.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(s.Close)
	return s, &up
}

// follower reads a client.Watch and checks its contract as it goes: one
// snapshot, never a second; every event after a revision it delivered
// before; each resume from exactly the last revision delivered.
type follower struct {
	t        *testing.T
	ch       <-chan client.Event
	filtered bool           // events it does not see move the resume point too
	log      []client.Event // the snapshot and the events, in order
	last     uint64         // the last revision delivered
	resets   int            // re-snapshots
}

// next reads events until until returns true for one, failing the test
// after 30s (scaled) without it.
func (f *follower) next(what string, until func(client.Event) bool) {
	f.t.Helper()
	deadline := time.After(testscale.D(30 * time.Second))
	for {
		var ev client.Event
		select {
		case ev = <-f.ch:
		case <-deadline:
			f.t.Fatalf("timed out waiting for %s; last revision delivered %d", what, f.last)
		}
		switch ev.Kind {
		case 0:
			f.t.Fatalf("watch ended waiting for %s", what)
		case client.EventStopped:
			f.t.Fatalf("watch stopped waiting for %s: %v", what, ev.Err)
		case client.EventDisconnected:
		case client.EventResumed:
			if ev.Revision < f.last || !f.filtered && ev.Revision != f.last {
				f.t.Errorf("resumed after %d; the last revision delivered is %d", ev.Revision, f.last)
			}
			f.last = ev.Revision
		case client.EventSnapshot:
			if len(f.log) > 0 {
				f.resets++
				f.t.Errorf("re-snapshot at %d after %d (%v); want the stream resumed", ev.Revision, f.last, ev.Err)
			}
			f.log = append(f.log, ev)
			f.last = ev.Revision
		default:
			if ev.Revision <= f.last {
				f.t.Errorf("%v event at %d after %d: repeated or out of order", ev.Kind, ev.Revision, f.last)
			}
			f.log = append(f.log, ev)
			f.last = ev.Revision
		}
		if until(ev) {
			return
		}
	}
}

// catchUp reads events until the follower has delivered rev.
func (f *follower) catchUp(rev uint64) {
	f.t.Helper()
	if f.last >= rev {
		return
	}
	f.next(fmt.Sprintf("revision %d", rev), func(client.Event) bool { return f.last >= rev })
}

// stateAt returns each target's state as the events up to rev make it.
func (f *follower) stateAt(rev uint64) map[string]client.State {
	out := map[string]client.State{}
	for _, ev := range f.log {
		if ev.Revision > rev {
			break
		}
		switch ev.Kind {
		case client.EventSnapshot:
			clear(out)
			for _, st := range ev.Snapshot {
				out[st.Target.Name] = st.State
			}
		case client.EventAdded, client.EventUpdated:
			out[ev.Status.Target.Name] = ev.Status.State
		case client.EventRemoved:
			delete(out, ev.Name)
		case client.EventTransition:
			out[ev.Transition.Target] = ev.Transition.To
		}
	}
	return out
}

// checkView compares the states the events give with what pulsed lists.
func (f *follower) checkView(cl *client.Client, when string) {
	f.t.Helper()
	list, err := cl.List(f.t.Context(), "")
	if err != nil {
		f.t.Fatal(err)
	}
	f.catchUp(list.Revision)
	want := map[string]client.State{}
	for _, st := range list.Targets {
		want[st.Target.Name] = st.State
	}
	if diff := cmp.Diff(want, f.stateAt(list.Revision)); diff != "" {
		f.t.Errorf("%s: the events up to %d do not give the listed targets (-list +events):\n%s", when, list.Revision, diff)
	}
}

// A Go client's Watch across a restart of pulsed on its store: the stream
// resumes from the revision pulsed named as it shut down, with no new
// snapshot, and the client misses no event and sees none twice. So does a
// watch of one group, whose last event is older than the last revision.
func TestWatchResumesAcrossRestart(t *testing.T) {
	bin := buildPulsed(t)
	dir := t.TempDir()
	web, up := toggleServer(t)
	// No progress event in the test's time: the last thing delivered before
	// each shutdown is an event.
	args := []string{"-data-dir", dir, "-interval", "200ms", "-timeout", "200ms", "-rise", "1", "-fall", "1", "-watch-progress", "10m"}
	p := startPulsed(t, bin, args...)
	var addr atomic.Pointer[string] // the running pulsed's
	addr.Store(&p.Addr)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cl, err := client.New(ctx, []string{"passthrough:///pulsed"}, client.WithToken(""), client.WithIdleTimeout(0),
		client.WithBackoff(5*time.Millisecond, 100*time.Millisecond),
		client.WithDialOptions(grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", *addr.Load())
		})))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	f := &follower{t: t, ch: cl.Watch(ctx, client.Filter{})}
	f.next("the snapshot", func(ev client.Event) bool { return ev.Kind == client.EventSnapshot })
	edge := &follower{t: t, ch: cl.Watch(ctx, client.Filter{Group: "edge"}), filtered: true}
	edge.next("the snapshot", func(ev client.Event) bool { return ev.Kind == client.EventSnapshot })
	disconnected := func(ev client.Event) bool { return ev.Kind == client.EventDisconnected }

	healthy := func(name string) func(client.Event) bool {
		return func(ev client.Event) bool {
			return ev.Kind == client.EventTransition && ev.Transition.Target == name && ev.Transition.To == client.StateHealthy
		}
	}
	resumed := func(ev client.Event) bool { return ev.Kind == client.EventResumed || ev.Kind == client.EventSnapshot }
	if _, _, err := cl.Add(ctx, client.Target{Name: "web", Group: "edge", HTTP: &client.HTTPProbe{URL: web.URL}}); err != nil {
		t.Fatal(err)
	}
	f.next("web healthy", healthy("web"))
	edge.next("web healthy", healthy("web"))
	if _, _, err := cl.Add(ctx, client.Target{Name: "closed", TCP: &client.TCPProbe{Address: "127.0.0.1:9"}}); err != nil {
		t.Fatal(err)
	}
	f.checkView(cl, "before the restart")
	last := f.log[len(f.log)-1]
	t.Logf("last event before the restart: %v at %d", last.Kind, last.Revision)

	p.stop(t)
	f.next("the disconnection", disconnected)
	edge.next("the disconnection", disconnected)
	up.Store(false) // web fails after the restart: a transition to follow
	p = startPulsed(t, bin, args...)
	addr.Store(&p.Addr)
	f.next("the resumed stream", resumed)
	edge.next("the resumed stream", resumed)
	unhealthy := func(ev client.Event) bool {
		return ev.Kind == client.EventTransition && ev.Transition.Target == "web" && ev.Transition.To == client.StateUnhealthy
	}
	f.next("web unhealthy", unhealthy)
	edge.next("web unhealthy", unhealthy)
	if _, _, err := cl.Add(ctx, client.Target{Name: "later", TCP: &client.TCPProbe{Address: "127.0.0.1:9"}}); err != nil {
		t.Fatal(err)
	}
	f.next("later added", func(ev client.Event) bool { return ev.Kind == client.EventAdded && ev.Status.Target.Name == "later" })
	f.checkView(cl, "after the restart")

	// Again, with a transition the last event before the shutdown.
	up.Store(true)
	f.next("web healthy again", healthy("web"))
	edge.next("web healthy again", healthy("web"))
	f.checkView(cl, "before the second restart")
	p.stop(t)
	f.next("the disconnection", disconnected)
	edge.next("the disconnection", disconnected)
	p = startPulsed(t, bin, args...)
	addr.Store(&p.Addr)
	f.next("the resumed stream", resumed)
	edge.next("the resumed stream", resumed)
	if _, err := cl.Remove(ctx, "later"); err != nil {
		t.Fatal(err)
	}
	f.next("later removed", func(ev client.Event) bool { return ev.Kind == client.EventRemoved && ev.Name == "later" })
	f.checkView(cl, "after the second restart")
	if f.resets+edge.resets > 0 {
		t.Errorf("%d and %d re-snapshots across two restarts", f.resets, edge.resets)
	}
	p.stop(t)
}
