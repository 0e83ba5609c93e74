package client

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// BenchmarkViewApply measures what a View does per event of the stream
// with 10,000 targets in 10 groups: convert the received message, apply it
// and call a subscriber, which reads the changed group's routable set
// once per revision (as the resolver does). One op is one event; allocs/op
// is allocations per event.
func BenchmarkViewApply(b *testing.B) {
	const targets, groups = 10_000, 10
	v := newView(Filter{})
	snap := Event{Kind: EventSnapshot, Revision: 1}
	for i := range targets {
		snap.Snapshot = append(snap.Snapshot, Status{
			Target: Target{Name: fmt.Sprintf("t%05d", i), Group: fmt.Sprintf("g%d", i%groups), TCP: &TCPProbe{Address: fmt.Sprintf("10.0.%d.%d:80", i/250, i%250)}},
			State:  StateHealthy,
		})
	}
	v.apply(snap)
	for _, sub := range []struct {
		name string
		fn   func(Change)
	}{
		{"subscriber=none", nil},
		{"subscriber=routable", func(c Change) {
			if !c.More {
				_ = v.Routable(c.Group)
			}
		}},
	} {
		b.Run(sub.name, func(b *testing.B) {
			if sub.fn != nil {
				defer v.Subscribe(sub.fn)()
			}
			// Messages as they come off the wire: each target in turn
			// flips, so every event changes the view.
			msgs := make([]*pb.WatchTransitionsResponse, targets)
			state := make([]pb.State, targets)
			for i := range state {
				state[i] = pb.State_STATE_HEALTHY
			}
			rev := uint64(2)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			for n := range b.N {
				i := n % targets
				if n%targets == 0 {
					b.StopTimer()
					for j := range msgs {
						to := pb.State_STATE_UNHEALTHY
						if state[j] == to {
							to = pb.State_STATE_HEALTHY
						}
						msgs[j] = &pb.WatchTransitionsResponse{Revision: rev, Event: &pb.WatchTransitionsResponse_Transition{Transition: &pb.Transition{
							Target: fmt.Sprintf("t%05d", j), Group: fmt.Sprintf("g%d", j%groups), From: state[j], To: to,
							Result: &pb.ProbeResult{Error: "connection refused"}, Text: "flip"}}}
						state[j] = to
						rev++
					}
					b.StartTimer()
				}
				ev, _ := eventFromProto(msgs[i])
				v.apply(ev)
			}
			b.StopTimer()
			cpu := float64((processCPU() - cpu0).Nanoseconds()) / float64(b.N)
			b.ReportMetric(cpu, "cpu-ns/op")
			b.ReportMetric(cpu*10_000/1e9*100, "%cpu@10k/s")
		})
	}
}

// processCPU returns the CPU time the process has used (user and system,
// every thread, the garbage collector's included). On a shared machine
// wall time per op overstates the cost; CPU time per op does not.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
