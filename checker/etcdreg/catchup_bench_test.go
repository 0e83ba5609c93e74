package etcdreg_test

import (
	"fmt"
	"runtime"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
)

// BenchmarkCatchUp measures what CatchUp adds to a read (State, Healthy,
// ListTargets) with replicas on a loopback etcd, against the read alone
// ("status"): "caught-up", nothing changed since (one linearizable read
// of etcd's revision); "another-prefix", etcd's revision moved by a key
// this fleet does not watch (the read, a progress request and its
// notification); "write-on-a", the read on replica b right after an
// AddTarget acknowledged on a (the read and the wait for b's watch to
// bring the target). The writes are not timed. "caught-up-parallel" is
// "caught-up" with 64 reads at a time.
//
//	go test -run '^$' -bench CatchUp -benchtime 2000x -count 3 ./checker/etcdreg/
func BenchmarkCatchUp(b *testing.B) {
	etcd := etcdtest.Start(b, 0)
	be := newBackend()
	ra := benchReplica(b, etcd.Endpoint, "a", be)
	rb := benchReplica(b, etcd.Endpoint, "b", be)
	if _, _, err := ra.c.Add(target("web")); err != nil {
		b.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint}, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	read := func(b *testing.B, name string, catchUp bool) {
		if catchUp {
			if err := rb.c.CatchUp(b.Context()); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := rb.c.Status(name); err != nil {
			b.Fatal(err)
		}
	}
	waitB(b, func() bool { _, err := rb.c.Status("web"); return err == nil })
	b.Run("status", func(b *testing.B) {
		for b.Loop() {
			read(b, "web", false)
		}
	})
	b.Run("caught-up", func(b *testing.B) {
		for b.Loop() {
			read(b, "web", true)
		}
	})
	// Reads on 64 goroutines at once: what each read costs when they come
	// together, as from many clients.
	b.Run("caught-up-parallel", func(b *testing.B) {
		b.SetParallelism(64 / max(1, runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				// b.Fatal is the benchmark goroutine's only.
				if err := rb.c.CatchUp(b.Context()); err != nil {
					b.Error(err)
					return
				}
				if _, err := rb.c.Status("web"); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("another-prefix", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			if _, err := cli.Put(b.Context(), "/another-fleet/k", fmt.Sprint(i)); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			read(b, "web", true)
		}
	})
	n := 0
	b.Run("write-on-a", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			n++
			name := fmt.Sprintf("bench-%d", n)
			if _, _, err := ra.c.Add(target(name)); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			read(b, name, true)
		}
	})
}
