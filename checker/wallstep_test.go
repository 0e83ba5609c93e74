package checker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeprobe"
	"github.com/pulsehealth/pulse/checker/probe"
)

// steppedClock is the real clock with its wall clock moved by step: what
// NTP, a resumed VM or date -s do to pulsed's clock. Its times keep the
// real monotonic reading, as time.Now's do across a step.
type steppedClock struct{ step atomic.Int64 }

func (c *steppedClock) Now() time.Time { return shiftWall(time.Now(), time.Duration(c.step.Load())) }

// TimerAt is RealClock's, on this clock's Now.
func (c *steppedClock) TimerAt(at time.Time) checker.Timer {
	return timer{time.NewTimer(at.Sub(c.Now()))}
}

func (c *steppedClock) WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

type timer struct{ t *time.Timer }

func (r timer) C() <-chan time.Time { return r.t.C }
func (r timer) Stop() bool          { return r.t.Stop() }

// shiftWall returns t, which carries a monotonic reading, with its wall
// clock reading moved by d (whole seconds) and its monotonic reading kept.
// Package time offers no way to make such a time, so this writes the
// wall reading's seconds (time.Time's first word: a flag bit, 33 bits of
// seconds since 1885, 30 bits of nanoseconds) in place. The test checks
// the result reads as intended first, and skips on a Go whose layout
// differs.
func shiftWall(t time.Time, d time.Duration) time.Time {
	type layout struct {
		wall uint64
		ext  int64
		loc  *time.Location
	}
	const hasMonotonic, nsecBits = 1 << 63, 30
	u := t
	p := (*layout)(unsafe.Pointer(&u))
	secs := int64(p.wall<<1>>(nsecBits+1)) + int64(d/time.Second)
	p.wall = hasMonotonic | uint64(secs)<<nsecBits | p.wall&(1<<nsecBits-1)
	return u
}

// A step of the wall clock moves no probe: a step back of an hour does
// not stall every target for an hour, and a step forward does not make
// every probe an hour late (which read as overload).
func TestWallClockStep(t *testing.T) {
	now := time.Now()
	if back := shiftWall(now, -time.Hour); back.Sub(now) != 0 || now.Round(0).Sub(back.Round(0)) != time.Hour {
		t.Skipf("cannot make a time with its wall clock moved on this Go (monotonic difference %v, wall %v)", back.Sub(now), now.Round(0).Sub(back.Round(0)))
	}
	clock := &steppedClock{}
	var probes atomic.Int64
	c, err := checker.New(checker.Config{
		Clock: clock,
		NewProber: func(probe.Spec) (checker.Prober, error) {
			return fakeprobe.Func(func(context.Context) error { probes.Add(1); return nil }), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Start()
	spec := checker.Spec{Name: "web-1", Probe: probe.Spec{TCP: &probe.TCPSpec{Address: "127.0.0.1:1"}},
		Interval: 50 * time.Millisecond, Timeout: 40 * time.Millisecond, Rise: 1, Fall: 1}
	if _, _, err := c.Add(spec); err != nil {
		t.Fatal(err)
	}
	probed := func(what string, n int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for probes.Load() < n {
			if time.Now().After(deadline) {
				st, _ := c.Status("web-1")
				t.Fatalf("%s: %d probes, want %d; next probe at %v (now %v)", what, probes.Load(), n, st.NextProbe, clock.Now())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	probed("before the step", 3)
	clock.step.Store(int64(-time.Hour))
	probed("after the wall clock stepped back an hour", probes.Load()+5)
	if st, _ := c.Status("web-1"); st.NextProbe.Sub(clock.Now()) > time.Second {
		t.Errorf("after a step back, the next probe shows as %v away, want within the interval", st.NextProbe.Sub(clock.Now()))
	}
	clock.step.Store(int64(time.Hour))
	probed("after the wall clock stepped forward an hour", probes.Load()+5)
	if ov := c.Overload(); ov.Degraded {
		t.Errorf("after a step forward the checker is degraded: %s", ov.Reason)
	}
}
