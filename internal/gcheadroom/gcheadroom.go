// Package gcheadroom sizes the garbage collector's headroom to the live
// heap: a quarter of it, and at least a floor.
//
// Go's default (GOGC=100) lets the heap grow by as much as is live before
// it collects, so a process that keeps a large live heap holds twice it.
// The collector's cost grows with how often it runs, which is the garbage
// made per second over the headroom, not with the size of the heap: a
// large live heap with little garbage can keep a smaller share as
// headroom at little cost, while a small one keeps the floor, so that it
// is not collected over and over for a few megabytes.
package gcheadroom

import (
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

const (
	// Share is the headroom, in percent of the live heap, once the
	// floor is less than it: the GOGC of a large heap.
	Share = 25
	// Floor is the least headroom, in bytes. pulsed makes next to no
	// garbage between its minute's history flushes (none per probe on a
	// kept connection, little per dial), so a small heap needs little.
	Floor = 2 << 20
	// Every is how often Run looks at the live heap.
	Every = time.Second
)

// Percent returns the GOGC that gives a live heap of live bytes its
// headroom: Share percent of it, at least Floor bytes, and at most Go's
// default of 100 percent.
func Percent(live uint64) int {
	if live == 0 {
		return 100
	}
	p := uint64(Share)
	if live*Share/100 < Floor {
		p = (Floor*100 + live - 1) / live
	}
	return int(min(p, 100))
}

// Chosen reports whether the environment chooses the collector's pace
// (GOGC is set), in which case Run is not to be started.
func Chosen() bool { return os.Getenv("GOGC") != "" }

// Live returns the heap the last collection found live, in bytes.
func Live() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// Set sets GOGC and returns the previous value: debug.SetGCPercent.
func Set(percent int) int { return debug.SetGCPercent(percent) }

// Run sets the collector's pace (through set, which returns the previous
// value) from the live heap (read) at each tick until ctx ends: at once,
// and then whenever Percent moves by more than a tenth from the value set
// last. It puts back the value it found when it ends.
func Run(ctx context.Context, ticks <-chan time.Time, read func() uint64, set func(int) int) {
	cur, found := -1, 0
	for {
		if p := Percent(read()); cur < 0 || p*10 < cur*9 || p*10 > cur*11 {
			prev := set(p)
			if cur < 0 {
				found = prev
			}
			cur = p
		}
		select {
		case <-ctx.Done():
			set(found)
			return
		case <-ticks:
		}
	}
}
