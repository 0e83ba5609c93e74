package checker

import (
	"time"

	"golang.org/x/time/rate"
)

// demandLimiter is the rate limit of ProbeNow rounds: a token bucket per
// client (Selection.Client), so that one client spending its budget leaves
// the others theirs, and one bucket for every client together, so that
// many clients cannot overwhelm the probes. It remembers at most
// MaxProbeNowClients clients. Its methods expect the registry's lock held
// (it does no I/O).
type demandLimiter struct {
	total   *rate.Limiter
	clients map[string]*rate.Limiter
}

// newDemandLimiter returns the rate limit of ProbeNow rounds.
func newDemandLimiter() *demandLimiter {
	return &demandLimiter{
		total:   rate.NewLimiter(ProbeNowTotalRate, ProbeNowTotalBurst),
		clients: make(map[string]*rate.Limiter),
	}
}

// takeLocked takes one round at now from client's bucket and from the
// total one, or takes nothing and returns the *RateError of the bucket
// that is empty.
func (d *demandLimiter) takeLocked(client string, now time.Time) error {
	b, ok := d.clients[client]
	if !ok {
		d.makeRoomLocked(now)
		b = rate.NewLimiter(ProbeNowRate, ProbeNowBurst) // full at first
		d.clients[client] = b
	}
	r := b.ReserveN(now, 1)
	if wait := r.DelayFrom(now); wait > 0 {
		r.CancelAt(now)
		return &RateError{What: "probe-now rounds", Scope: "per client", PerSecond: ProbeNowRate, Burst: ProbeNowBurst, RetryAfter: wait}
	}
	rt := d.total.ReserveN(now, 1)
	if wait := rt.DelayFrom(now); wait > 0 {
		rt.CancelAt(now)
		r.CancelAt(now)
		return &RateError{What: "probe-now rounds", Scope: "for all clients together", PerSecond: ProbeNowTotalRate, Burst: ProbeNowTotalBurst, RetryAfter: wait}
	}
	return nil
}

// makeRoomLocked makes room for one more client when MaxProbeNowClients
// are remembered, by forgetting those whose buckets have refilled: a new
// bucket for them would be the same. A bucket that has not refilled is a
// client's with a round in the last ProbeNowBurst/ProbeNowRate seconds,
// and ProbeNowTotalRate allows few of those, so this frees nearly all the
// map and the scan comes once per MaxProbeNowClients new clients at most.
func (d *demandLimiter) makeRoomLocked(now time.Time) {
	if len(d.clients) < MaxProbeNowClients {
		return
	}
	for k, b := range d.clients {
		if b.TokensAt(now) >= ProbeNowBurst {
			delete(d.clients, k)
		}
	}
	for k := range d.clients { // not with the rates above; the bound holds whatever they are
		if len(d.clients) < MaxProbeNowClients {
			break
		}
		delete(d.clients, k)
	}
}
