package checker

import (
	"fmt"
	"testing"
	"time"
)

// First probes of 10,000 targets added at once spread evenly over the
// interval instead of firing in lockstep.
func TestFirstDelaySpreadsTargets(t *testing.T) {
	const n, buckets = 10000, 10
	interval := 10 * time.Second
	var count [buckets]int
	for i := range n {
		d := firstDelay(fmt.Sprintf("10.0.%d.%d:80", i/256, i%256), interval)
		if d < 0 || d >= interval {
			t.Fatalf("first delay %v outside [0, %v)", d, interval)
		}
		count[d*buckets/interval]++
	}
	for i, c := range count {
		if c < n/buckets*8/10 || c > n/buckets*12/10 {
			t.Errorf("second %d of the interval holds %d first probes, want about %d: %v", i, c, n/buckets, count)
		}
	}
}

func TestNextSlotSkipsMissedSlots(t *testing.T) {
	t0 := time.Unix(0, 0)
	tests := []struct {
		now  time.Duration
		want time.Duration
	}{
		{0, time.Second},                           // on time
		{999 * time.Millisecond, time.Second},      // early
		{time.Second, 2 * time.Second},             // exactly due again: next slot
		{3500 * time.Millisecond, 4 * time.Second}, // late by 3.5 slots: skip, do not burst
	}
	for _, tt := range tests {
		if got := nextSlot(t0, time.Second, t0.Add(tt.now)); !got.Equal(t0.Add(tt.want)) {
			t.Errorf("nextSlot(0, 1s, %v) = %v, want %v", tt.now, got.Sub(t0), tt.want)
		}
	}
}

// The job queue is FIFO; in a steady state (a job or two queued) its
// buffer stays small, and once drained it keeps a small buffer but lets a
// burst's go.
func TestJobQueueBuffer(t *testing.T) {
	var q jobQueue
	next := 0
	for i := range 10000 {
		q.push(job{i: i})
		if i == 0 {
			continue // keep one job queued throughout
		}
		j, ok := q.pop()
		if !ok || j.i != next {
			t.Fatalf("pop %d: %v %v, want job %d", i, j.i, ok, next)
		}
		next++
	}
	if q.len() != 1 || cap(q.buf) > 16 {
		t.Errorf("steady state: %d queued in a buffer of %d, want 1 in at most 16", q.len(), cap(q.buf))
	}
	q.pop()
	if q.len() != 0 || cap(q.buf) == 0 {
		t.Errorf("drained after a steady state: %d queued, buffer %d; want a small buffer kept", q.len(), cap(q.buf))
	}
	for i := range 5000 {
		q.push(job{i: i})
	}
	for i := range 5000 {
		if j, ok := q.pop(); !ok || j.i != i {
			t.Fatalf("burst pop %d: %v %v", i, j.i, ok)
		}
	}
	if _, ok := q.pop(); ok || cap(q.buf) != 0 {
		t.Errorf("after a burst of 5000: buffer %d, want it let go", cap(q.buf))
	}
}
