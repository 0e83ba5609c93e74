package liveness

import (
	"context"
	"math"
	"runtime/metrics"
	"testing"
	"time"
)

// The stall is the 99th percentile of the latencies counted between two
// readings, at the lower bound of its bucket: one slow goroutine in a
// hundred is no stall, two are.
func TestStallQuantile(t *testing.T) {
	buckets := []float64{math.Inf(-1), 0, 0.001, 0.01, 0.25, 1, math.Inf(1)}
	reading := func(counts ...uint64) *metrics.Float64Histogram {
		return &metrics.Float64Histogram{Counts: counts, Buckets: buckets}
	}
	prev := reading(0, 500, 40, 3, 1, 0)
	for _, c := range []struct {
		name string
		cur  *metrics.Float64Histogram
		want time.Duration
	}{
		{"nothing new", reading(0, 500, 40, 3, 1, 0), 0},
		{"one slow in a hundred", reading(0, 500, 139, 3, 2, 0), time.Millisecond},
		{"two slow in a hundred", reading(0, 500, 138, 3, 3, 0), 250 * time.Millisecond},
		{"all past the last bound", reading(0, 500, 40, 3, 1, 7), time.Second},
		{"all in the first bucket", reading(0, 510, 40, 3, 1, 0), 0},
		{"another histogram's shape", &metrics.Float64Histogram{Counts: []uint64{9}, Buckets: []float64{0, 1}}, 0},
	} {
		if got := stallQuantile(prev, c.cur, 0.99); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// SampleStalls reads the runtime's own histogram: it reports a reading
// each quarter of a second, and returns when its context ends.
func TestSampleStallsReportsUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	notes := make(chan time.Duration, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		SampleStalls(ctx, func(d time.Duration) {
			select {
			case notes <- d:
			default:
			}
		})
	}()
	for range 2 {
		select {
		case d := <-notes:
			if d < 0 || d > time.Minute {
				t.Errorf("a stall of %v", d)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no reading in 10s")
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("SampleStalls did not return once cancelled")
	}
}
