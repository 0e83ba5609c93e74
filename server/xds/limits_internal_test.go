package xds

import (
	"sync/atomic"
	"testing"
	"time"
)

// Memory goes back to the operating system once, after a mass close has
// settled: at least returnAfter streams, and half of the most open, closed
// since it last did. Never for a few streams coming and going, and never
// after the server closed.
func TestMassCloseReturnsMemory(t *testing.T) {
	l := newStreamLimits(0, 0)
	var calls atomic.Int32
	l.returnMemory = func() { calls.Add(1) }
	l.settle = time.Millisecond
	armed := func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.pending != nil
	}
	waitReturns := func(want uint64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for l.returns.Load() < want {
			if time.Now().After(deadline) {
				t.Fatalf("%d returns, want %d", l.returns.Load(), want)
			}
			time.Sleep(time.Millisecond)
		}
	}

	// Streams coming and going a few at a time arm nothing.
	for range 5000 {
		release, err := l.admit("a")
		if err != nil {
			t.Fatal(err)
		}
		release()
	}
	if armed() || calls.Load() != 0 {
		t.Fatalf("one stream at a time: armed %v, %d returns; want neither", armed(), calls.Load())
	}

	const n = 4 * returnAfter
	open := func(n int) []func() {
		releases := make([]func(), n)
		for i := range releases {
			var err error
			if releases[i], err = l.admit("b"); err != nil {
				t.Fatal(err)
			}
		}
		return releases
	}
	releases := open(n)
	// Fewer than half closed: nothing armed.
	l.settle = time.Hour // so that a wrongly armed return cannot fire unseen
	for i := range n/2 - 1 {
		releases[i]()
	}
	if armed() {
		t.Fatalf("armed with %d of %d closed", n/2-1, n)
	}
	releases[n/2-1]() // half closed: armed, and pushed back by each close after
	if !armed() {
		t.Fatalf("not armed with half of %d closed", n)
	}
	for i := n / 2; i < n; i++ {
		releases[i]()
	}
	if calls.Load() != 0 {
		t.Fatalf("returned while the close was still settling")
	}
	l.mu.Lock()
	l.pending.Reset(time.Millisecond)
	l.mu.Unlock()
	waitReturns(1)
	if calls.Load() != 1 || armed() {
		t.Fatalf("after the close settled: %d returns, armed %v; want 1, not armed", calls.Load(), armed())
	}

	// After stop, a mass close arms nothing.
	releases = open(n)
	l.stop()
	for _, r := range releases {
		r()
	}
	if armed() || calls.Load() != 1 {
		t.Fatalf("after stop: armed %v, %d returns", armed(), calls.Load())
	}
	if open, sources := l.counts(); open != 0 || sources != 0 {
		t.Fatalf("%d streams from %d sources left open", open, sources)
	}
}
