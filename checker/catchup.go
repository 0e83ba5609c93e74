package checker

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"
)

// A replica applies the shared registry's changes as its watch brings them,
// a little after they were acknowledged: a read on replica B right after a
// write on replica A could miss it. CatchUp closes that gap the way
// Kubernetes serves consistent reads from its watch cache: read the
// registry's current revision (a linearizable read, so every write
// acknowledged before it is at or below it), then wait until this replica
// has applied that revision, asking the watch for a progress notification
// so that a replica whose keys saw no change since still gets there at
// once.

// SharedProgress is the part of Shared that lets a read on any replica see
// every write acknowledged before it (see Checker.CatchUp).
type SharedProgress interface {
	// CurrentRevision reads the shared registry's current revision
	// linearizably: every write acknowledged before the call is at or
	// below it.
	CurrentRevision(ctx context.Context) (uint64, error)
	// RequestProgress asks the shared registry to bring this replica to
	// its current revision through ApplyShared soon, even when none of its
	// keys changed since the last change applied. It does not wait for
	// that.
	RequestProgress(ctx context.Context) error
}

const (
	// catchUpWait bounds how long CatchUp waits, reading the revision
	// included; past it a read answers from what this replica has.
	catchUpWait = 2 * time.Second
	// catchUpRetry is how often CatchUp asks for progress again while it
	// waits: etcd answers a progress request only while the watch is
	// synced, so one asked while the watch catches up goes unanswered.
	catchUpRetry = 100 * time.Millisecond
	// catchUpPause is how long CatchUp answers at once, without reading
	// the revision, after the shared registry could not be read: while
	// etcd is down every read would otherwise wait catchUpWait until the
	// lease's renewal notices (SetSharedErr).
	catchUpPause = time.Second
)

// CatchUp waits until this replica has applied every change the shared
// registry had committed when CatchUp was called, so that a read after it
// sees every write acknowledged before it on any replica. Reads call it
// first.
//
// It never holds a read for long: when the shared registry cannot be
// reached (SetSharedErr, or its revision cannot be read), it returns at
// once, and after catchUpWait (2s) it gives up waiting; in both cases it
// returns nil and the read answers from what this replica has, as it does
// while etcd is down. It returns ctx's error if ctx ends first, and
// ErrClosed if the checker closes. Without a shared registry it returns
// nil at once. It is safe for concurrent use.
func (c *Checker) CatchUp(ctx context.Context) error {
	if c.repl == nil {
		return nil
	}
	return c.repl.catchUp(ctx)
}

// catchUp is CatchUp.
func (rp *replication) catchUp(ctx context.Context) error {
	if rp.err() != nil || time.Now().UnixNano() < rp.catchUpPaused.Load() {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, catchUpWait)
	defer cancel()
	rev, err := rp.revisions.current(wctx)
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, ErrClosed) {
			return cmp.Or(ctx.Err(), err)
		}
		now := time.Now()
		if old := rp.catchUpPaused.Load(); old < now.UnixNano() && rp.catchUpPaused.CompareAndSwap(old, now.Add(catchUpPause).UnixNano()) {
			rp.logger.Warn("cannot read the shared registry's revision; reads answer from this replica's view", "error", err)
		}
		return nil
	}
	for rp.hub.revision() < rev {
		if err := rp.shared.RequestProgress(wctx); err != nil && wctx.Err() == nil {
			rp.logger.Debug("asking for watch progress failed", "error", err)
		}
		rctx, rcancel := context.WithTimeout(wctx, catchUpRetry)
		err := rp.await(rctx, rev)
		rcancel()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrClosed):
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		case wctx.Err() != nil:
			rp.logger.Debug("this replica did not catch up with the shared registry in time; answering from its view", "revision", rev, "applied", rp.hub.revision())
			return nil
		}
	}
	return nil
}

// revisionReads batches CatchUp's reads of the shared registry's revision.
// A read covers the writes acknowledged before it started, so a CatchUp
// cannot take the answer of a read already in flight when it was called:
// it waits for the next one, which starts as soon as the one in flight
// ends and serves every CatchUp that came meanwhile. Under a flood of reads
// the registry sees one read at a time from each replica, not one a read
// (BENCHMARKS.md, "Reads that follow writes").
type revisionReads struct {
	read    func(context.Context) (uint64, error) // Shared.CurrentRevision
	closing context.Context                       // ends the reads when the checker closes
	wg      sync.WaitGroup                        // the goroutine that reads

	mu      sync.Mutex    // protects the fields below
	reading bool          // a read is in flight
	next    *revisionRead // the read of the CatchUps that came while one was in flight; nil: none came
	closed  bool
}

// revisionRead is one read of the revision, shared by the CatchUps that
// wait for it.
type revisionRead struct {
	done    chan struct{} // closed once rev and err are set
	rev     uint64
	err     error
	waiters int // the CatchUps that wait for it
}

// current returns the shared registry's revision, read by a read that
// started after the call; ctx's error if ctx ends first, ErrClosed once
// the checker closed. It is safe for concurrent use.
func (b *revisionReads) current(ctx context.Context) (uint64, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0, ErrClosed
	}
	if b.next == nil {
		b.next = &revisionRead{done: make(chan struct{})}
	}
	rd := b.next
	rd.waiters++
	if !b.reading {
		b.reading, b.next = true, nil
		b.wg.Add(1)
		go b.run(rd)
	}
	b.mu.Unlock()
	select {
	case <-rd.done:
		return rd.rev, rd.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// run does rd's read, then the next one as long as CatchUps came while
// the last was in flight.
func (b *revisionReads) run(rd *revisionRead) {
	defer b.wg.Done()
	for rd != nil {
		ctx, cancel := context.WithTimeout(b.closing, catchUpWait)
		rd.rev, rd.err = b.read(ctx)
		cancel()
		close(rd.done)
		b.mu.Lock()
		rd, b.next = b.next, nil
		b.reading = rd != nil
		b.mu.Unlock()
	}
}

// close waits for the read in flight, which the end of closing cuts short;
// a CatchUp after it returns ErrClosed.
func (b *revisionReads) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.wg.Wait()
}
