package history_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/history"
)

// BenchmarkObserveProbe is the cost one probe result adds: 5,000 targets
// probed in turn, a second apart each round.
func BenchmarkObserveProbe(b *testing.B) {
	const n = 5000
	r := history.New(history.Options{})
	specs := make([]checker.Spec, n)
	for i := range specs {
		specs[i] = checker.Spec{Name: fmt.Sprint("t", i), Group: "g"}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		at := t0.Add(time.Duration(i/n) * time.Second)
		r.ObserveProbe(specs[i%n], checker.Result{Pass: i%7 != 0, Latency: time.Duration(i%200) * time.Millisecond, Time: at})
	}
}

// BenchmarkMemoryPerTarget reports the heap a probed target's history
// takes, as bytes/target; -benchtime=Nx sets the number of targets.
func BenchmarkMemoryPerTarget(b *testing.B) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := history.New(history.Options{})
	for i := 0; i < b.N; i++ {
		s := checker.Spec{Name: fmt.Sprint("target-", i), Group: "g"}
		r.ObserveProbe(s, checker.Result{Pass: true, Latency: time.Millisecond, Time: t0})
		r.ObserveTransition(checker.Transition{Target: s.Name, Group: "g", Time: t0, Reason: "added"})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(b.N), "bytes/target")
	runtime.KeepAlive(r)
}

// BenchmarkQuery30Days is one target's History over 30 days by the hour,
// every hour recorded.
func BenchmarkQuery30Days(b *testing.B) {
	r := history.New(history.Options{})
	s := checker.Spec{Name: "a", Group: "g"}
	for h := 0; h < history.HourSlots; h++ {
		r.ObserveProbe(s, checker.Result{Pass: h%5 != 0, Latency: time.Duration(h) * time.Millisecond, Time: t0.Add(time.Duration(h) * time.Hour)})
	}
	now := t0.Add(history.HourSlots * time.Hour)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := r.Query("a", now, 30*24*time.Hour, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
}
