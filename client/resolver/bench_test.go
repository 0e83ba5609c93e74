package resolver

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/pulsehealth/pulse/client"
)

// nopCC is a ClientConn that takes every update and does nothing with it.
type nopCC struct {
	grpcresolver.ClientConn
	updates int
}

func (c *nopCC) UpdateState(grpcresolver.State) error { c.updates++; return nil }

// BenchmarkResolverUpdate measures the resolver's side of one change of a
// 1,000-target group: a target's transition (in or out of rotation, in
// turn), the group's address list built again, and the update handed to
// gRPC (whose own cost, the balancer's diff, is not counted). One op is
// one change, and one update.
func BenchmarkResolverUpdate(b *testing.B) {
	const targets = 1000
	for _, kind := range []string{"tcp", "http"} {
		b.Run("probe="+kind, func(b *testing.B) {
			cc := &nopCC{}
			r := &pulseResolver{cc: cc, group: "edge", done: make(chan struct{})}
			sts := make([]client.Status, targets)
			for i := range sts {
				t := client.Target{Name: fmt.Sprintf("t%04d", i), Group: "edge"}
				if kind == "tcp" {
					t.TCP = &client.TCPProbe{Address: fmt.Sprintf("10.0.%d.%d:80", i/250, i%250)}
				} else {
					t.HTTP = &client.HTTPProbe{URL: fmt.Sprintf("http://10.0.%d.%d:8080/healthz", i/250, i%250)}
				}
				sts[i] = client.Status{Target: t, State: client.StateHealthy, Routable: true}
				r.changed(client.Change{Name: t.Name, Group: "edge", To: client.StateHealthy, Status: sts[i], More: i < targets-1})
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			for n := range b.N {
				i := n % targets
				st := sts[i]
				if (n/targets)%2 == 0 {
					st.State, st.Routable = client.StateUnhealthy, false
				}
				r.changed(client.Change{Name: st.Target.Name, Group: "edge", From: client.StateHealthy, To: st.State, Status: st})
			}
			b.StopTimer()
			b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			if cc.updates < b.N {
				b.Fatalf("%d updates for %d changes", cc.updates, b.N)
			}
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
