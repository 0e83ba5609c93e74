package xds

import "testing"

// Memory goes back to the operating system once at least returnAfter
// streams, and half of the most open, have closed since it last did; not
// for a few streams coming and going.
func TestMassCloseReturnsMemory(t *testing.T) {
	l := newStreamLimits(0, 0)
	var calls int
	l.returnMemory = func() { calls++ }

	// Streams coming and going a few at a time never return memory.
	for range 5000 {
		release, err := l.admit("a")
		if err != nil {
			t.Fatal(err)
		}
		release()
	}
	if calls != 0 {
		t.Fatalf("%d returns for one stream at a time, want none", calls)
	}

	const n = 4 * returnAfter
	releases := make([]func(), n)
	for i := range releases {
		var err error
		if releases[i], err = l.admit("b"); err != nil {
			t.Fatal(err)
		}
	}
	// Closing fewer than half of them returns nothing.
	for i := range n/2 - 1 {
		releases[i]()
	}
	if calls != 0 {
		t.Fatalf("%d returns with %d of %d closed, want none", calls, n/2-1, n)
	}
	releases[n/2-1]() // half closed
	if calls != 1 {
		t.Fatalf("%d returns with half of %d closed, want 1", calls, n)
	}
	// The rest: the peak is now n/2, so a second return at n/4 open and a
	// third when the last closes (returnAfter more since n/4).
	for i := n / 2; i < n; i++ {
		releases[i]()
	}
	if calls != 3 {
		t.Fatalf("%d returns with all %d closed, want 3", calls, n)
	}
	if got := l.returns.Load(); got != 3 {
		t.Fatalf("returns counted %d, want 3", got)
	}
	if open, sources := l.counts(); open != 0 || sources != 0 {
		t.Fatalf("%d streams from %d sources left open", open, sources)
	}
}
