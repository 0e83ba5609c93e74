package main

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

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
