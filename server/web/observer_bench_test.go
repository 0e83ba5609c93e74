package web_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server/web"
)

// BenchmarkObserverHeapPerTarget reports the live heap the Observer holds
// per target ("B/target") after 20 failed probes of each of 10,000
// targets: the status page's recent results, kept by default and not at
// all after KeepRecent(0) (pulsed without a status page).
func BenchmarkObserverHeapPerTarget(b *testing.B) {
	const n, probes = 10000, 20
	specs := make([]checker.Spec, n)
	for i := range specs {
		specs[i] = checker.Spec{Name: fmt.Sprintf("t%06d", i), Group: "bench"}
	}
	for _, keep := range []int{web.DefaultRecentResults, 0} {
		b.Run(fmt.Sprintf("keep=%d", keep), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				b.StartTimer()
				o := web.NewObserver(web.ObserverOptions{})
				o.KeepRecent(keep)
				for range probes {
					for _, s := range specs {
						o.ObserveProbe(s, checker.Result{Err: "dial tcp 127.1.0.1:41000: connect: connection refused", Latency: time.Millisecond})
					}
				}
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/target")
				runtime.KeepAlive(o)
				b.StartTimer()
			}
		})
	}
}
