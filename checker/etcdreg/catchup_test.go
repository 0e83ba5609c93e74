package etcdreg_test

import (
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
	"github.com/pulsehealth/pulse/internal/testscale"
)

// A target acknowledged on one replica is known to another as soon as its
// CatchUp returns, every time.
func TestCatchUpSeesWritesOfAnotherReplica(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	b := newBackend()
	r1 := startReplica(t, etcd.Endpoint, "a", b)
	r2 := startReplica(t, etcd.Endpoint, "b", b)
	for i := range 200 {
		name := fmt.Sprintf("web-%03d", i)
		if _, _, err := r1.c.Add(target(name)); err != nil {
			t.Fatal(err)
		}
		if err := r2.c.CatchUp(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, err := r2.c.Status(name); err != nil {
			t.Fatalf("b right after a acknowledged %s: %v", name, err)
		}
	}
}

// A replica whose keys saw no change reaches etcd's newer revision (keys
// of another fleet, under another prefix, moved it) through a progress
// notification it asks for: at once, not after CatchUp's 2s bound, with
// etcd's periodic notifications off.
func TestCatchUpAsksForProgress(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	r := startReplica(t, etcd.Endpoint, "a", newBackend())
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for i := range 20 {
		resp, err := cli.Put(t.Context(), "/another-fleet/k", fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		if err := r.c.CatchUp(t.Context()); err != nil {
			t.Fatal(err)
		}
		if took, want := time.Since(began), testscale.D(time.Second); took > want {
			t.Fatalf("CatchUp took %v, want under %v", took, want)
		}
		if got, want := r.c.Revision(), uint64(resp.Header.Revision); got < want {
			t.Fatalf("after CatchUp the replica is at revision %d, etcd's was %d", got, want)
		}
	}
}

// With etcd stopped CatchUp returns within its bound, and at once while
// the replica knows etcd is unreachable: reads answer from its view.
func TestCatchUpWhileEtcdIsDown(t *testing.T) {
	etcd := etcdtest.Start(t, 0)
	r := startReplicaTTL(t, etcd.Endpoint, "a", newBackend(), 3*time.Second)
	if _, _, err := r.c.Add(target("x")); err != nil {
		t.Fatal(err)
	}
	etcd.Stop()
	bound := 2*time.Second + testscale.D(time.Second)
	catchUp := func(what string) {
		t.Helper()
		began := time.Now()
		if err := r.c.CatchUp(t.Context()); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if took := time.Since(began); took > bound {
			t.Fatalf("%s took %v, want at most %v", what, took, bound)
		}
		if _, err := r.c.Status("x"); err != nil {
			t.Fatalf("%s: the replica's view lost x: %v", what, err)
		}
	}
	catchUp("CatchUp right after etcd stopped")
	eventually(t, "the replica knows etcd is unreachable", func() bool { return r.c.StoreErr() != nil })
	began := time.Now()
	catchUp("CatchUp once etcd is known unreachable")
	if took, want := time.Since(began), testscale.D(100*time.Millisecond); took > want {
		t.Errorf("CatchUp with etcd known unreachable took %v, want at once (under %v)", took, want)
	}
}
