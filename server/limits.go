package server

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/peer"
)

// RateLimit bounds each client's rate of API calls with a token bucket
// (golang.org/x/time/rate) per client address: a client may burst up to
// Burst calls, then PerSecond calls a second. It implements
// go-grpc-middleware's ratelimit.Limiter and is safe for concurrent use.
// Create it with NewRateLimit.
type RateLimit struct {
	perSecond float64
	burst     int
	now       func() time.Time

	mu      sync.Mutex // protects buckets
	buckets map[string]*rate.Limiter
}

// maxBuckets bounds the clients tracked at once; past it, buckets that have
// refilled (idle clients) are dropped.
const maxBuckets = 10000

// NewRateLimit returns a limit of perSecond calls a second per client, with
// bursts of up to burst calls. now is the clock; nil means time.Now.
func NewRateLimit(perSecond float64, burst int, now func() time.Time) *RateLimit {
	if now == nil {
		now = time.Now
	}
	return &RateLimit{perSecond: perSecond, burst: burst, now: now, buckets: make(map[string]*rate.Limiter)}
}

// Limit takes one token from the calling client's bucket, or says which
// limit the client ran into.
func (r *RateLimit) Limit(ctx context.Context) error {
	key := peerHost(ctx)
	if key == "" {
		key = "unknown"
	}
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.buckets[key]
	if !ok {
		if len(r.buckets) >= maxBuckets {
			r.dropIdleLocked(now)
		}
		b = rate.NewLimiter(rate.Limit(r.perSecond), r.burst) // full at first
		r.buckets[key] = b
	}
	if !b.AllowN(now, 1) {
		return fmt.Errorf("rate limit of %g calls/s per client (burst %d) exceeded; slow down, or raise pulsed's -rate-limit", r.perSecond, r.burst)
	}
	return nil
}

// peerHost returns the host of the calling client's address: its IP for
// TCP; "" when the call has no peer.
func peerHost(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	a := p.Addr.String()
	if host, _, err := net.SplitHostPort(a); err == nil {
		return host
	}
	return a
}

// clientID names the caller for the limits kept per client (ProbeNow's
// rate): the name of the token it was authorized with, else its address's
// host.
func clientID(ctx context.Context) string {
	if name := tokenName(ctx); name != "" {
		return "token " + name
	}
	return "address " + peerHost(ctx)
}

// dropIdleLocked forgets the clients whose buckets have refilled: a new
// bucket for them would be the same.
func (r *RateLimit) dropIdleLocked(now time.Time) {
	for k, b := range r.buckets {
		if b.TokensAt(now) >= float64(r.burst) {
			delete(r.buckets, k)
		}
	}
}
