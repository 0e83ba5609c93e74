package checker

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker/probe"
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

// The scheduler's time arithmetic saturates at the times UnixNano holds:
// no duration, however large, wraps a due time into the past.
func TestSchedulerArithmeticSaturates(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	first, last := time.Unix(0, math.MinInt64), time.Unix(0, math.MaxInt64)
	for _, tt := range []struct {
		name string
		got  time.Time
		want time.Time
	}{
		{"addDur in range", addDur(t0, time.Hour), t0.Add(time.Hour)},
		{"addDur past 2262", addDur(t0, math.MaxInt64), last},
		{"addDur in range, far back", addDur(t0, math.MinInt64), t0.Add(math.MinInt64)},
		{"addDur before 1678", addDur(first, -time.Hour), first},
		{"addDur of a time past 2262", addDur(last.Add(time.Hour), 0), last},
		{"nextSlot, largest interval", nextSlot(t0, math.MaxInt64, t0), last},
		{"nextSlot, largest interval, from the last time", nextSlot(last, math.MaxInt64, t0), last},
		{"nextSlot, 1ms interval, 348 years behind", nextSlot(first, time.Millisecond, t0), t0.Add(time.Millisecond)},
		{"nextSlot, a day behind", nextSlot(t0, time.Second, t0.Add(24*time.Hour)), t0.Add(24*time.Hour + time.Second)},
		{"nextSlot, zero interval", nextSlot(t0, 0, t0), t0.Add(MinInterval)},
		{"nextSlot, negative interval", nextSlot(t0, -time.Hour, t0), t0.Add(MinInterval)},
	} {
		if !tt.got.Equal(tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	if got := mulDur(math.MaxInt64/time.Millisecond.Nanoseconds()+1, time.Millisecond); got != math.MaxInt64 {
		t.Errorf("mulDur past the largest Duration: %v, want it", got)
	}
	if got := mulDur(3, time.Second); got != 3*time.Second {
		t.Errorf("mulDur(3, 1s) = %v", got)
	}
	if d := firstDelay("a", 0); d != 0 {
		t.Errorf("firstDelay over a zero interval: %v, want 0", d)
	}
	if d := firstDelay("a", math.MaxInt64); d < 0 {
		t.Errorf("firstDelay over the largest interval: %v, want not negative", d)
	}
	s := &scheduler{tick: math.MaxInt64}
	if got := s.startBy(last, math.MaxInt64); !got.Equal(last) {
		t.Errorf("startBy with the largest tick: %v, want %v", got, last)
	}
	s.tick = time.Hour
	if got := s.startBy(last, math.MaxInt64); !got.Equal(last) {
		t.Errorf("startBy of the last time, rounded up to an hour: %v, want %v", got, last)
	}
}

type nopProber struct{}

func (nopProber) Probe(context.Context) error { return nil }

// dueLocked takes each due target once per pass, even where no next probe
// can be after now: at the last time UnixNano holds.
func TestDueLockedEndsAtTheEndOfTime(t *testing.T) {
	c, err := New(Config{NewProber: func(probe.Spec) (Prober, error) { return nopProber{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	last := time.Unix(0, math.MaxInt64)
	for _, name := range []string{"a", "b"} {
		s := Spec{Name: name, Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}
		if err := c.AddUnchecked(s, last); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan int)
	go func() {
		c.reg.mu.Lock()
		c.sched.dueLocked(last)
		n := c.sched.pool.queue.len()
		c.sched.pool.queue = jobQueue{} // nothing is to run them: Start was not called
		for _, t := range c.reg.targets {
			t.inFlight = false
		}
		c.reg.mu.Unlock()
		done <- n
	}()
	select {
	case n := <-done:
		if n != 2 {
			t.Errorf("%d probes queued, want one of each target", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("dueLocked at the end of time did not return within 10s")
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

// The due heap keeps its order through pushes, fixes to earlier and later
// starts, and removals from anywhere, with every target's index its place:
// checked against a sort of the same targets after each step.
func TestDueHeapOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h dueHeap
	var in []*target
	check := func(step int) {
		t.Helper()
		for i, e := range h {
			if int(e.t.index) != i || e.startNs != e.t.startNs || e.seq != e.t.seq {
				t.Fatalf("step %d: entry %d is %+v for a target at index %d, start %d", step, i, e, e.t.index, e.t.startNs)
			}
			if p := dueParent(i); i > 0 && h[i].before(&h[p]) {
				t.Fatalf("step %d: entry %d comes before its parent %d", step, i, p)
			}
		}
		if len(h) != len(in) {
			t.Fatalf("step %d: heap holds %d, want %d", step, len(h), len(in))
		}
		if len(in) > 0 {
			first := slices.MinFunc(in, func(a, b *target) int {
				return cmp.Or(cmp.Compare(a.startNs, b.startNs), cmp.Compare(a.seq, b.seq))
			})
			if h[0].t != first {
				t.Fatalf("step %d: head is seq %d, want seq %d", step, h[0].t.seq, first.seq)
			}
		}
	}
	for step := range 5000 {
		switch op := rng.IntN(4); {
		case op == 0 || len(in) == 0:
			tg := &target{seq: uint32(step), startNs: rng.Int64N(100), index: -1}
			h.push(tg)
			in = append(in, tg)
		case op == 1:
			tg := in[rng.IntN(len(in))]
			tg.startNs = rng.Int64N(100)
			h.fix(tg)
		case op == 2:
			i := rng.IntN(len(in))
			h.remove(in[i])
			if in[i].index != -1 {
				t.Fatalf("step %d: a removed target's index is %d", step, in[i].index)
			}
			in = slices.Delete(in, i, i+1)
		default:
			// What dueLocked does: take the head, move it on, fix it.
			tg := h[0].t
			tg.startNs += 1 + rng.Int64N(50)
			h.fix(tg)
		}
		check(step)
	}
}

// BenchmarkDueHeapNext100k is the due heap's work per probe in a fleet of
// 100,000 targets at 10s: take the head, move its start on by the
// interval, fix it (what dueLocked does).
func BenchmarkDueHeapNext100k(b *testing.B) {
	const n, interval = 100_000, int64(10 * time.Second)
	rng := rand.New(rand.NewPCG(1, 2))
	var h dueHeap
	for i := range n {
		h.push(&target{seq: uint32(i), startNs: rng.Int64N(interval), index: -1})
	}
	b.ResetTimer()
	for range b.N {
		t := h[0].t
		t.startNs += interval
		h.fix(t)
	}
}
