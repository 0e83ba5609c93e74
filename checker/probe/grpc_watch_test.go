package probe

import (
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/pulsehealth/pulse/internal/testscale"
)

// A gRPC prober whose server goes away reports its channel lost, once:
// the refused reconnects that follow tell nothing more. Close ends the
// watch (the package's goleak check sees its goroutine gone).
func TestGRPCWatchReportsALostChannel(t *testing.T) {
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	addr, _ := startGRPC(t, srv)
	p := newGRPCTestProber(t, newTestFactory(t), GRPCSpec{Address: addr}).(*grpcProber)
	lost := watched(p)
	if err := probeWithin(t, timeoutCtx(t, testscale.D(5*time.Second)), p); err != nil {
		t.Fatal(err)
	}
	srv.Stop() // the process dies: its connections close
	if got := receive(t, lost, "the lost channel to be reported"); got != LostChannel {
		t.Errorf("reported %q, want %q", got, LostChannel)
	}
	for range 2 {
		if err := probeWithin(t, timeoutCtx(t, testscale.D(5*time.Second)), p); err == nil {
			t.Fatal("a probe of a stopped server passed")
		}
	}
	select {
	case r := <-lost:
		t.Errorf("a second report, %q, for failed reconnects", r)
	default:
	}
	p.Close()
}

// watched returns the channel a WatchConn callback of p sends its
// reasons to.
func watched(p connWatcher) chan string {
	ch := make(chan string, 16)
	p.WatchConn(func(reason string) { ch <- reason })
	return ch
}

// connWatcher is what the checker asks of a prober that keeps a
// connection (its ConnWatcher).
type connWatcher interface {
	Prober
	WatchConn(func(string))
}

func receive(t *testing.T, ch <-chan string, what string) string {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(testscale.D(10 * time.Second)):
		t.Fatalf("timed out waiting for %s", what)
		return ""
	}
}
