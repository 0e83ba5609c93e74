package dns

import (
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// sourceLimiter is a token bucket per source address, in a map of at most
// max entries. A new source past max evicts an arbitrary one, which then
// starts again with a full bucket: a source can gain at most one burst that
// way, and the map never grows, whatever the number of (spoofed) sources.
type sourceLimiter struct {
	rate  rate.Limit
	burst int
	max   int
	now   func() time.Time

	mu      sync.Mutex // protects buckets
	buckets map[netip.Addr]*rate.Limiter
}

func newSourceLimiter(perSecond float64, burst, max int, now func() time.Time) *sourceLimiter {
	return &sourceLimiter{
		rate:    rate.Limit(perSecond),
		burst:   burst,
		max:     max,
		now:     now,
		buckets: make(map[netip.Addr]*rate.Limiter),
	}
}

// allow takes a token from src's bucket and reports whether there was one.
func (l *sourceLimiter) allow(src netip.Addr) bool {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[src]
	if b == nil {
		if len(l.buckets) >= l.max {
			for a := range l.buckets { // map order: an arbitrary entry
				delete(l.buckets, a)
				break
			}
		}
		b = rate.NewLimiter(l.rate, l.burst)
		l.buckets[src] = b
	}
	return b.AllowN(now, 1)
}

// sources returns how many sources have a bucket.
func (l *sourceLimiter) sources() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}
