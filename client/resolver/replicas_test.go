package resolver_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
	"github.com/pulsehealth/pulse/client"
	"github.com/pulsehealth/pulse/client/resolver"
	"github.com/pulsehealth/pulse/internal/pulsedproc"
	"github.com/pulsehealth/pulse/internal/testscale"
)

// buildPulsed builds the real pulsed. Without the race detector, even
// under -race: this package tests the client, and the build stays short.
func buildPulsed(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testscale.D(5*time.Minute))
	defer cancel()
	bin, err := pulsedproc.Build(ctx, t.TempDir(), pulsedproc.Package)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// runPulsed starts pulsed on a free loopback port; the test's end kills
// it.
func runPulsed(t *testing.T, bin string, args ...string) *pulsedproc.Process {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testscale.D(30*time.Second))
	defer cancel()
	p, err := pulsedproc.Start(ctx, bin, append([]string{"-listen", "127.0.0.1:0", "-http-listen", "", "-watch-progress", "100ms"}, args...), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

// TestRealPulsedReplicas runs the resolver against two real pulsed
// replicas sharing one registry on a real etcd, named in the target
// (pulse://r1,r2/edge), with a real grpc.ClientConn and round_robin over
// three real gRPC backends. Beside it a Watch follows the same replicas.
// When the replica both follow is killed, the watch resumes on the other
// from the same revision (no new snapshot) and traffic goes on; the
// survivor takes the dead replica's targets over, so a backend that then
// fails leaves rotation; and with both replicas dead, traffic goes on to
// the last good set.
func TestRealPulsedReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs pulsed and etcd")
	}
	etcd := etcdtest.Start(t, 0)
	bin := buildPulsed(t)
	flags := []string{"-registry", "etcd", "-etcd-endpoints", etcd.Endpoint, "-etcd-prefix", "/pulse-resolver-test/", "-etcd-lease-ttl", "2s"}
	r1 := runPulsed(t, bin, append(flags, "-replica-id", "r1")...)
	r2 := runPulsed(t, bin, append(flags, "-replica-id", "r2")...)
	addrs := []string{r1.Addr, r2.Addr}

	bs := []*backend{newBackend(t), newBackend(t), newBackend(t)}
	c, err := client.New(t.Context(), addrs, client.WithToken(""), client.WithBackoff(20*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := within(t)
	for i, b := range bs {
		b.setHealthy(true)
		tg := client.Target{Name: fmt.Sprintf("b%d", i), Group: "edge", GRPC: &client.GRPCProbe{Address: b.addr},
			Interval: 100 * time.Millisecond, Timeout: 100 * time.Millisecond, Rise: 1, Fall: 2}
		if _, _, err := c.Add(ctx, tg); err != nil {
			t.Fatal(err)
		}
	}
	events := c.Watch(ctx, client.Filter{Group: "edge"})
	if ev := <-events; ev.Kind != client.EventSnapshot {
		t.Fatalf("first event %+v; want the snapshot", ev)
	}

	rb := &recordingBuilder{Builder: resolver.NewBuilder(nil, client.WithToken(""), client.WithBackoff(20*time.Millisecond, 200*time.Millisecond)), rec: &recorder{}}
	conn, err := grpc.NewClient("pulse://"+strings.Join(addrs, ",")+"/edge",
		grpc.WithResolvers(rb),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"round_robin": {}}]}`),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	until(t, conn, bs, "all three backends in the resolver's list", func() bool { a, _ := rb.rec.last(); return len(a) == 3 })
	if got := spread(t, conn, bs, 30); slices.Contains(got, 0) {
		t.Fatalf("RPCs per backend %v: want traffic to all three", got)
	}

	// The watch and the resolver follow r1, listed first. Kill it.
	r1.Kill()
	bs[2].setHealthy(false) // seen once r2 has taken r1's targets over
	var sawDown bool
follow:
	for ev := range events {
		switch {
		case ev.Kind == client.EventDisconnected:
			sawDown = true
		case ev.Kind == client.EventSnapshot:
			t.Fatalf("the watch re-snapshotted (%v) instead of resuming on r2", ev.Err)
		case ev.Kind == client.EventTransition && ev.Transition.Target == "b2" && ev.Transition.To == client.StateUnhealthy:
			break follow
		}
	}
	if !sawDown {
		t.Error("the watch did not say it lost r1")
	}
	until(t, conn, bs, "b2 to leave the resolver's list", func() bool { a, _ := rb.rec.last(); return len(a) == 2 && !slices.Contains(a, bs[2].addr) })
	if got := spread(t, conn, bs, 30); got[2] != 0 || got[0] == 0 || got[1] == 0 {
		t.Errorf("RPCs per backend %v after b2's transition (from r2): want none to b2", got)
	}

	// Both replicas gone: traffic goes on to the last good set.
	r2.Kill()
	until(t, conn, bs, "the resolver to report pulsed gone", func() bool { _, errs := rb.rec.last(); return errs > 0 })
	if got := spread(t, conn, bs, 30); got[0] == 0 || got[1] == 0 || got[2] != 0 {
		t.Errorf("RPCs per backend %v with both replicas gone: want b0 and b1, the last good set", got)
	}
}
