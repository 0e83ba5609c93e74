package main

import (
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// slowBackend answers /healthz at once, / with its name, and /slow with its
// name only once release is closed, counting the /slow requests it holds.
type slowBackend struct {
	name    string
	addr    string
	held    atomic.Int32
	release chan struct{}
}

func newSlowBackend(t *testing.T, name string) *slowBackend {
	t.Helper()
	b := &slowBackend{name: name, release: make(chan struct{})}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.addr = lis.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		b.held.Add(1)
		defer b.held.Add(-1)
		select {
		case <-b.release:
			io.WriteString(w, b.name)
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, b.name) })
	srv := &http.Server{Handler: mux}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Close() })
	return b
}

// TestDrainThroughPulseLB: a backend drained in pulsed (RemoveTarget with
// drain_for) gets no new requests from pulse-lb, while the slow request it
// was serving when the drain began completes.
func TestDrainThroughPulseLB(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs pulsed")
	}
	p := startPulsed(t, buildPulsed(t), "-data-dir", "")
	a, b := newSlowBackend(t, "web-1"), newSlowBackend(t, "web-2")
	lb := startLB(t, append(e2eFlags(), "--backends", "http://"+a.addr+",http://"+b.addr, "--names", "web-1,web-2", "--pulse", p.Addr, "--group", "edge")...)
	lb.logs.waitHealthy(t, 0, "web-1")
	lb.logs.waitHealthy(t, 0, "web-2")

	// A slow request is in flight on one backend: the one to drain.
	slow := make(chan reply, 1)
	go func() {
		r, err := lb.tryPath("/slow")
		if err != nil {
			r.body = err.Error()
		}
		slow <- r
	}()
	var drained, other *slowBackend
	deadline := time.Now().Add(waitBound)
	for drained == nil {
		switch {
		case a.held.Load() == 1:
			drained, other = a, b
		case b.held.Load() == 1:
			drained, other = b, a
		case time.Now().After(deadline):
			t.Fatal("the slow request reached no backend")
		default:
			time.Sleep(time.Millisecond) // poll: the request is on its way
		}
	}

	conn, err := grpc.NewClient(p.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mark := lb.logs.mark()
	resp, err := pb.NewHealthCheckerClient(conn).RemoveTarget(t.Context(), &pb.RemoveTargetRequest{Name: drained.name, DrainFor: durationpb.New(time.Minute)})
	if err != nil || !resp.GetRemoved() || resp.GetRemoveTime() == nil {
		t.Fatalf("RemoveTarget with drain_for: %v, %v", resp, err)
	}
	lb.logs.waitFor(t, mark, transition(drained.name, "healthy", "unhealthy"))

	// New requests go to the other backend only.
	for range 6 {
		if r := lb.get(t); r.status != http.StatusOK || r.body != other.name {
			t.Errorf("during the drain: %d %q, want 200 from %s", r.status, r.body, other.name)
		}
	}
	if n := drained.held.Load(); n != 1 {
		t.Fatalf("the drained backend holds %d slow requests, want the one in flight", n)
	}
	close(drained.release)
	select {
	case r := <-slow:
		if r.status != http.StatusOK || r.body != drained.name {
			t.Errorf("the slow request in flight: %d %q, want 200 from %s", r.status, r.body, drained.name)
		}
	case <-time.After(waitBound):
		t.Fatal("the slow request in flight did not complete")
	}
	close(other.release)
}
