package history_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
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
// takes, as bytes/target: with a history file (bbolt's own heap included,
// and the file's size after one Flush as file-bytes/target) and in memory
// only, as pulsed keeps it without a data directory; and how long the
// first Flush (every target new) and the next take, and what the next
// allocates. -benchtime=Nx sets
// the number of targets.
func BenchmarkMemoryPerTarget(b *testing.B) {
	b.Run("file", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "history.db")
		memoryPerTarget(b, func() *history.Recorder {
			db := openDB(b, path)
			b.Cleanup(func() { db.Close() })
			r, err := history.Open(db, history.Options{Clock: fakeclock.New(t0)})
			if err != nil {
				b.Fatal(err)
			}
			return r
		})
		if fi, err := os.Stat(path); err == nil {
			b.ReportMetric(float64(fi.Size())/float64(b.N), "file-bytes/target")
		}
	})
	b.Run("memory", func(b *testing.B) {
		memoryPerTarget(b, func() *history.Recorder { return history.New(history.Options{Clock: fakeclock.New(t0)}) })
	})
}

func memoryPerTarget(b *testing.B, open func() *history.Recorder) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := open()
	for i := 0; i < b.N; i++ {
		s := checker.Spec{Name: fmt.Sprintf("target-%07d", i), Group: "g"}
		r.ObserveProbe(s, checker.Result{Pass: true, Latency: time.Millisecond, Time: t0})
		r.ObserveTransition(checker.Transition{Target: s.Name, Group: "g", Time: t0, Reason: "added"})
	}
	// The first Flush, which makes every target's record.
	start := time.Now()
	if err := r.Flush(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(time.Since(start).Milliseconds()), "first-flush-ms")
	// Probed again since the Flush: what memory holds between two.
	for i := 0; i < b.N; i++ {
		s := checker.Spec{Name: fmt.Sprintf("target-%07d", i), Group: "g"}
		r.ObserveProbe(s, checker.Result{Pass: true, Latency: time.Millisecond, Time: t0.Add(time.Second)})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(b.N), "bytes/target")
	runtime.KeepAlive(r)
	// A Flush of every target, as pulsed makes each minute, and what it
	// allocates: garbage once written.
	runtime.ReadMemStats(&before)
	start = time.Now()
	if err := r.Flush(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(time.Since(start).Milliseconds()), "flush-ms")
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N), "flush-alloc-bytes/target")
}

// BenchmarkFileBytes30Days reports the size of a history file holding 30
// days of b.N targets probed every 10 minutes, as file-bytes/target.
func BenchmarkFileBytes30Days(b *testing.B) {
	path := filepath.Join(b.TempDir(), "history.db")
	db := openDB(b, path)
	defer db.Close()
	clock := fakeclock.New(t0)
	r, err := history.Open(db, history.Options{Clock: clock, MaxEvents: 100})
	if err != nil {
		b.Fatal(err)
	}
	record30Days(b, r, clock)
	if fi, err := os.Stat(path); err == nil {
		b.ReportMetric(float64(fi.Size())/float64(b.N), "file-bytes/target")
	}
}

// BenchmarkMemory30Days reports the heap that 30 days of history of b.N
// targets probed every 10 minutes take in memory only (history.New), as
// bytes/target.
func BenchmarkMemory30Days(b *testing.B) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	clock := fakeclock.New(t0)
	r := history.New(history.Options{Clock: clock, MaxEvents: 100})
	record30Days(b, r, clock)
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(b.N), "bytes/target")
	runtime.KeepAlive(r)
}

// record30Days records 30 days of b.N targets into r, probed every 10
// minutes with a transition every 7 hours, flushing each hour of clock.
func record30Days(b *testing.B, r *history.Recorder, clock *fakeclock.Clock) {
	for h := 0; h < history.HourSlots; h++ {
		at := t0.Add(time.Duration(h) * time.Hour)
		for i := 0; i < b.N; i++ {
			s := checker.Spec{Name: fmt.Sprintf("target-%07d", i), Group: "g"}
			for m := 0; m < 60; m += 10 {
				r.ObserveProbe(s, checker.Result{Pass: (h+m)%7 != 0, Latency: time.Duration(h%300) * time.Millisecond, Time: at.Add(time.Duration(m) * time.Minute)})
			}
			if h%7 == 0 {
				r.ObserveTransition(checker.Transition{Target: s.Name, Group: "g", Time: at, Reason: "a transition with a reason of some length"})
			}
		}
		clock.Advance(time.Hour)
		if err := r.Flush(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkQuery30Days is one target's History over 30 days by the hour,
// every hour recorded and flushed to a history file.
func BenchmarkQuery30Days(b *testing.B) {
	now := t0.Add(history.HourSlots * time.Hour)
	db := openDB(b, filepath.Join(b.TempDir(), "history.db"))
	defer db.Close()
	r, err := history.Open(db, history.Options{Clock: fakeclock.New(now)})
	if err != nil {
		b.Fatal(err)
	}
	s := checker.Spec{Name: "a", Group: "g"}
	for h := 0; h < history.HourSlots; h++ {
		at := t0.Add(time.Duration(h) * time.Hour)
		for m := 0; m < 60; m += 10 {
			r.ObserveProbe(s, checker.Result{Pass: h%5 != 0, Latency: time.Duration(h) * time.Millisecond, Time: at.Add(time.Duration(m) * time.Minute)})
		}
		if h%24 == 0 {
			if err := r.Flush(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := r.Flush(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sum, err := r.Query("a", now, 30*24*time.Hour, time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		if sum.Probes != 6*history.HourSlots-6 {
			b.Fatalf("probes = %d", sum.Probes)
		}
	}
}
