package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/etcdreg"
	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/testscale"
)

// startOnEtcd starts a replica named id on etcd behind a bufconn server.
func startOnEtcd(t *testing.T, endpoint, id string) *env {
	t.Helper()
	reg, err := etcdreg.Open(t.Context(), etcdreg.Options{
		Endpoints: []string{endpoint}, Prefix: "/pulse-catchup/", ID: id, LeaseTTL: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() }) // after the checker closes
	e := start(t, checker.Config{Shared: reg})
	reg.Run(e.c)
	return e
}

// A write acknowledged on one replica is seen by a read on another at
// once: State, ListTargets and Healthy wait until the replica that answers
// has applied etcd's revision of the moment they were called.
func TestReadsFollowWritesAcrossReplicas(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	a := startOnEtcd(t, etcd.Endpoint, "a")
	b := startOnEtcd(t, etcd.Endpoint, "b")
	const n = 200
	for i := range n {
		name := fmt.Sprintf("web-%03d", i)
		if _, err := a.client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tcpTarget(name, "")}); err != nil {
			t.Fatalf("AddTarget %s on a: %v", name, err)
		}
		if _, err := b.client.State(t.Context(), &pb.StateRequest{Name: name}); err != nil {
			t.Fatalf("State %s on b right after a acknowledged it: %v", name, err)
		}
		if i%20 != 19 {
			continue
		}
		list, err := b.client.ListTargets(t.Context(), &pb.ListTargetsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if got := len(list.GetTargets()); got != i+1 {
			t.Fatalf("ListTargets on b after %d targets acknowledged on a: %d", i+1, got)
		}
	}
	// A watch's snapshot too: 'pulsectl add' on a, then 'pulsectl wait'
	// on b.
	for i := range 20 {
		name := fmt.Sprintf("snap-%02d", i)
		if _, err := a.client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tcpTarget(name, "")}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		w, err := b.client.WatchTransitions(ctx, &pb.WatchTransitionsRequest{Names: []string{name}})
		if err != nil {
			t.Fatal(err)
		}
		ev, err := w.Recv()
		cancel()
		if err != nil || ev.GetSnapshot().GetSpec().GetName() != name {
			t.Fatalf("b's snapshot of %s right after a acknowledged it: %v %v", name, ev, err)
		}
	}
	// A removal too, and Healthy.
	a.set("web-000:80", true)
	if _, err := a.client.RemoveTarget(t.Context(), &pb.RemoveTargetRequest{Name: "web-001"}); err != nil {
		t.Fatal(err)
	}
	h, err := b.client.Healthy(t.Context(), &pb.HealthyRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range h.GetNames() {
		if name == "web-001" {
			t.Fatalf("Healthy on b lists web-001 after a acknowledged its removal")
		}
	}
}

// A watch resumes on one replica from a revision another gave it even
// when nothing under the fleet's prefix changed up to it: a reached it
// through a progress notification after another fleet's write moved
// etcd's revision, and b's watch would bring it only with etcd's next
// notification, minutes away (ten in these tests' etcd). A revision from
// another etcd, ahead of this one's, is FAILED_PRECONDITION at once.
func TestWatchResumesAcrossReplicasFromRevisionOfAnotherPrefix(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	a := startOnEtcd(t, etcd.Endpoint, "a")
	b := startOnEtcd(t, etcd.Endpoint, "b")
	etcd.Put(t, "/another-fleet/k", "v")
	if err := a.c.CatchUp(t.Context()); err != nil {
		t.Fatal(err)
	}
	last := a.c.Revision()
	if b.c.Revision() >= last {
		t.Fatalf("b applied revision %d already, a %d: the test needs b behind", b.c.Revision(), last)
	}
	// watch returns once the stream's headers came: the watch is
	// registered before the target is added.
	w := watch(t, t.Context(), b, &pb.WatchTransitionsRequest{StartRevision: last})
	if _, err := a.client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tcpTarget("next", "")}); err != nil {
		t.Fatal(err)
	}
	ev, err := w.Recv()
	if err != nil || describe(ev) != "added next" {
		t.Fatalf("b's watch from a's revision %d: first event %v, %v; want next added", last, ev, err)
	}

	// Twice CatchUp's bound (2s) at most: a replica never applies a
	// revision etcd has not reached, so waiting for it would last as long
	// as the wait's bound.
	began := time.Now()
	future, err := b.client.WatchTransitions(t.Context(), &pb.WatchTransitionsRequest{StartRevision: last + 1_000_000})
	if err == nil {
		_, err = future.Recv()
	}
	if took := time.Since(began); status.Code(err) != codes.FailedPrecondition || took >= 5*time.Second {
		t.Fatalf("b's watch from another etcd's revision %d: %v after %v, want FAILED_PRECONDITION within 5s", last+1_000_000, err, took)
	}
}

// With etcd stopped, reads keep answering from the replica's view, and
// promptly: the wait for etcd's revision is bounded (2s), and once a read
// found etcd unreachable the next ones do not wait at all.
func TestReadsAnswerWhileEtcdIsDown(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	e := startOnEtcd(t, etcd.Endpoint, "a")
	if _, err := e.client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tcpTarget("web-1", "")}); err != nil {
		t.Fatal(err)
	}
	etcd.Stop()
	bound := 2*time.Second + testscale.D(time.Second)
	reads := []struct {
		name string
		call func(context.Context) error
	}{
		{"State", func(ctx context.Context) error {
			_, err := e.client.State(ctx, &pb.StateRequest{Name: "web-1"})
			return err
		}},
		{"ListTargets", func(ctx context.Context) error {
			list, err := e.client.ListTargets(ctx, &pb.ListTargetsRequest{})
			if err == nil && len(list.GetTargets()) != 1 {
				err = fmt.Errorf("%d targets, want web-1", len(list.GetTargets()))
			}
			return err
		}},
		{"Healthy", func(ctx context.Context) error {
			_, err := e.client.Healthy(ctx, &pb.HealthyRequest{})
			return err
		}},
	}
	for round := range 2 {
		for _, r := range reads {
			ctx, cancel := context.WithTimeout(t.Context(), 4*bound)
			began := time.Now()
			err := r.call(ctx)
			took := time.Since(began)
			cancel()
			if err != nil {
				t.Fatalf("%s while etcd is down (round %d): %v", r.name, round, err)
			}
			if took > bound {
				t.Errorf("%s while etcd is down (round %d) took %v, want at most %v", r.name, round, took, bound)
			}
		}
	}
}
