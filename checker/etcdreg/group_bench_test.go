package etcdreg_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/etcdreg"
	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
	"github.com/pulsehealth/pulse/checker/probe"
)

// BenchmarkTransitionsAt3Replicas measures what a state change costs with
// three replicas on one etcd, from the owners' results to every replica
// having applied it: of 30 targets, one or all flip at once (fail, then
// pass), each owner runs one round, and the iteration ends when every
// replica shows every new state. "ungrouped" writes each state in its own
// transaction (the baseline); "group" puts the targets in one group, so
// every change goes through the group's guard (threshold 1: nothing held,
// the same transitions). Compare their ns/transition:
//
//	go test -run '^$' -bench TransitionsAt3Replicas -benchtime 40x ./checker/etcdreg/
func BenchmarkTransitionsAt3Replicas(b *testing.B) {
	for _, flips := range []int{1, 30} {
		for _, group := range []string{"", "edge"} {
			name := "ungrouped"
			if group != "" {
				name = "group"
			}
			b.Run(fmt.Sprintf("%s/flips=%d", name, flips), func(b *testing.B) { benchTransitions(b, group, flips) })
		}
	}
}

func benchTransitions(b *testing.B, group string, flips int) {
	etcd := etcdtest.Start(b, 0)
	be := newBackend()
	var reps []*replica
	for i := range 3 {
		reps = append(reps, benchReplica(b, etcd.Endpoint, fmt.Sprintf("r%d", i+1), be))
	}
	waitB(b, func() bool {
		for _, r := range reps {
			if len(r.reg.Members()) != 3 {
				return false
			}
		}
		return true
	})
	const n = 30
	var names []string
	for i := range n {
		s := target(fmt.Sprintf("t%02d", i))
		s.Group, s.InitialState = group, checker.StateHealthy
		names = append(names, s.Name)
		if _, _, err := reps[i%3].c.Add(s); err != nil {
			b.Fatal(err)
		}
	}
	if group != "" {
		if _, err := reps[0].c.SetGroupPolicy(group, checker.GroupPolicy{MaxUnhealthyFraction: 1}); err != nil {
			b.Fatal(err)
		}
	}
	flip := func(fail bool, names []string) {
		for _, nm := range names {
			be.setFailing(nm, fail)
		}
		for _, r := range reps {
			r.c.RunRound(context.Background())
		}
		want := checker.StateHealthy
		if fail {
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
	flip(false, names)
	b.ResetTimer()
	for i := range b.N {
		flip(i%2 == 0, names[:flips])
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*flips), "ns/transition")
}

// benchReplica is a replica that probes only when the benchmark runs a
// round: its interval is an hour.
func benchReplica(b *testing.B, endpoint, id string, be *backend) *replica {
	return benchReplicaProbing(b, endpoint, id, func(name string) checker.Prober { return fakeProber{b: be, replica: id, name: name} })
}

// benchReplicaProbing is benchReplica with the prober newProber makes for
// each target, by name.
func benchReplicaProbing(b *testing.B, endpoint, id string, newProber func(name string) checker.Prober) *replica {
	reg, err := etcdreg.Open(context.Background(), etcdreg.Options{Endpoints: []string{endpoint}, Prefix: prefix, ID: id, LeaseTTL: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	c, err := checker.New(checker.Config{
		Shared:   reg,
		Defaults: checker.Defaults{Interval: time.Hour, Timeout: time.Second, Rise: 1, Fall: 1},
		NewProber: func(s probe.Spec) (checker.Prober, error) {
			return newProber(s.HTTP.URL[strings.LastIndex(s.HTTP.URL, "/")+1:]), nil
		},
	})
	if err != nil {
		reg.Close()
		b.Fatal(err)
	}
	reg.Run(c)
	r := &replica{id: id, reg: reg, c: c}
	b.Cleanup(r.stop)
	return r
}

// waitB polls cond, briefly, until it holds or 30s pass.
func waitB(b *testing.B, cond func() bool) {
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatal("timed out")
		}
		time.Sleep(200 * time.Microsecond)
	}
}
