package gcheadroom

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 100},            // nothing measured yet: Go's default
		{1 * mib, 100},      // the floor is more than the heap: no more than the default
		{2 * mib, 100},      // the floor is the heap
		{4 * mib, 50},       // the floor is half the heap
		{5 * mib, 40},       // an idle pulsed
		{8 * mib, Share},    // the floor is the share
		{20 * mib, Share},   // 5,000 targets
		{200 * mib, Share},  // 100,000 targets
		{2000 * mib, Share}, // a million
		{15 * mib / 2, 27},  // rounded up: the headroom is never below the floor
	} {
		got := Percent(c.live)
		if got != c.want {
			t.Errorf("Percent(%d MiB) = %d, want %d", c.live/mib, got, c.want)
		}
		if c.live > 0 && uint64(got)*c.live/100 < min(Floor, c.live) {
			t.Errorf("Percent(%d MiB) = %d leaves less than the floor", c.live/mib, got)
		}
	}
}

// TestRunSetsOnlyWhatMoves: Run sets the pace at once, then only when it
// moves by more than a tenth, and ends with its context.
func TestRunSetsOnlyWhatMoves(t *testing.T) {
	const mib = 1 << 20
	lives := make(chan uint64)
	sets := make(chan int, 16)
	ticks := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		prev := 100
		Run(ctx, ticks, func() uint64 { return <-lives }, func(p int) int { sets <- p; old := prev; prev = p; return old })
	}()
	step := func(live uint64) {
		t.Helper()
		lives <- live
	}
	expect := func(want int) {
		t.Helper()
		if got := <-sets; got != want {
			t.Fatalf("set %d, want %d", got, want)
		}
	}
	step(200 * mib)
	expect(Share)
	for _, live := range []uint64{300 * mib, 20 * mib, 15 * mib / 2} { // 25, 25, 27: within a tenth of 25
		ticks <- time.Time{}
		step(live)
	}
	ticks <- time.Time{}
	step(5 * mib) // 40
	expect(40)
	ticks <- time.Time{}
	step(4 * mib) // 50
	expect(50)
	cancel()
	<-done
	expect(100) // what it found, put back
	if len(sets) != 0 {
		t.Fatalf("unexpected set %d", <-sets)
	}
}
