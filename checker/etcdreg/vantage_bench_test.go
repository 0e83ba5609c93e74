package etcdreg_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
)

// BenchmarkVantages measures what probing from k vantages costs, three
// replicas on one etcd, 30 targets with Spec.Vantages k (rise and fall 1):
// each iteration takes every target down (or up again), runs one round on
// every replica at once, and ends when every replica publishes every new
// state. It reports the probes per target and round, the etcd writes per
// published transition (etcd's revision counts every write), and the time
// from the round's start to the last replica publishing it (what k adds
// to detection, beyond fall x interval):
//
//	go test -run '^$' -bench Vantages -benchtime 20x ./checker/etcdreg/
func BenchmarkVantages(b *testing.B) {
	for _, k := range []uint8{1, 2, 3} {
		b.Run(fmt.Sprintf("k=%d", k), func(b *testing.B) { benchVantages(b, k) })
	}
}

func benchVantages(b *testing.B, k uint8) {
	etcd := etcdtest.Start(b, 0)
	p := newPaths()
	var reps []*replica
	for i := range 3 {
		reps = append(reps, benchVantage(b, etcd.Endpoint, fmt.Sprintf("r%d", i+1), p))
	}
	waitB(b, func() bool {
		for _, r := range reps {
			if len(r.reg.Members()) != 3 {
				return false
			}
		}
		return true
	})
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint}})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	revision := func() int64 {
		resp, err := cli.Get(context.Background(), "/no-such-key")
		if err != nil {
			b.Fatal(err)
		}
		return resp.Header.Revision
	}
	const n = 30
	var names []string
	for i := range n {
		s := target(fmt.Sprintf("t%02d", i))
		s.InitialState, s.Vantages = checker.StateHealthy, k
		names = append(names, s.Name)
		if _, _, err := reps[0].c.Add(s); err != nil {
			b.Fatal(err)
		}
	}
	probes := func() int {
		total := 0
		for _, r := range reps {
			for _, nm := range names {
				total += p.count(r.id, nm)
			}
		}
		return total
	}
	flip := func(down bool) {
		for _, nm := range names {
			p.setDown(nm, down)
		}
		var wg sync.WaitGroup
		for _, r := range reps {
			wg.Go(func() { r.c.RunRound(context.Background()) })
		}
		wg.Wait()
		want := checker.StateHealthy
		if down {
			want = checker.StateUnhealthy
		}
		waitB(b, func() bool {
			for _, r := range reps {
				for _, nm := range names {
					if state(r, nm) != want {
						return false
					}
				}
			}
			return true
		})
	}
	flip(false)
	flip(true)
	flip(false) // every vantage has stored its first verdict
	rev0, probes0 := revision(), probes()
	b.ResetTimer()
	for i := range b.N {
		flip(i%2 == 0)
	}
	b.StopTimer()
	rounds := float64(b.N)
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/rounds, "ms/round-published")
	b.ReportMetric(float64(probes()-probes0)/(n*rounds), "probes/target/round")
	b.ReportMetric(float64(revision()-rev0)/(n*rounds), "etcd-writes/transition")
	b.ReportMetric(0, "ns/op")
}

// benchVantage is a replica that probes p's paths only when the
// benchmark runs a round.
func benchVantage(b *testing.B, endpoint, id string, p *paths) *replica {
	return benchReplicaProbing(b, endpoint, id, func(name string) checker.Prober { return pathProber{p: p, replica: id, name: name} })
}
