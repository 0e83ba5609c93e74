package checker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// CatchUps that come while a read of the revision is in flight share the
// next read, which starts once that one ends: one read for all of them,
// and never the answer of a read that started before they were called.
func TestRevisionReadsAreShared(t *testing.T) {
	started := make(chan uint64)
	release := make(chan struct{})
	var reads atomic.Uint64
	b := &revisionReads{closing: t.Context(), read: func(ctx context.Context) (uint64, error) {
		n := reads.Add(1)
		started <- n
		select {
		case <-release:
			return n, nil // each read sees a later revision
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}}
	defer b.close()

	first := make(chan uint64, 1)
	go func() { rev, _ := b.current(context.Background()); first <- rev }()
	if n := <-started; n != 1 {
		t.Fatalf("read %d started, want 1", n)
	}
	const late = 10
	revs := make(chan uint64, late)
	for range late {
		go func() { rev, _ := b.current(context.Background()); revs <- rev }()
	}
	// A CatchUp whose context ends leaves, and is not counted below.
	gone, cancel := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() { _, err := b.current(gone); left <- err }()
	waitUntil(t, "the late CatchUps wait for the next read", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.next != nil && b.next.waiters == late+1
	})
	cancel()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Errorf("a CatchUp whose context ended: %v, want context.Canceled", err)
	}

	release <- struct{}{}
	if rev := <-first; rev != 1 {
		t.Errorf("the first CatchUp got revision %d, want read 1's", rev)
	}
	if n := <-started; n != 2 {
		t.Fatalf("read %d started, want 2", n)
	}
	release <- struct{}{}
	for range late {
		if rev := <-revs; rev != 2 {
			t.Errorf("a late CatchUp got revision %d, want read 2's: read 1 started before it", rev)
		}
	}
	if n := reads.Load(); n != 2 {
		t.Errorf("%d reads for %d CatchUps, want 2", n, late+2)
	}

	// Alone, a CatchUp reads at once; after close, none does.
	go func() { <-started; release <- struct{}{} }()
	if rev, err := b.current(context.Background()); rev != 3 || err != nil {
		t.Errorf("a CatchUp alone: %d, %v; want read 3's", rev, err)
	}
	b.close()
	if _, err := b.current(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("after close: %v, want ErrClosed", err)
	}
}

// waitUntil polls cond until it holds, failing the test after 10s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
