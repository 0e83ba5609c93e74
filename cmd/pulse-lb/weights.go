package main

import (
	"slices"
	"sync"
	"time"
)

// Slow start. A backend that has just become routable may carry a weight
// below 100% (its slow_start: pulsed ramps it linearly from 0 to 100% over
// the window). The balancer gives it that share of its turns: each backend
// earns its weight in credit at each turn the rotor offers it, and takes
// the turn once it has 100; a backend at 100% takes every turn, as without
// weights. A backend at 25% takes one turn in four, the others fill in.
// When no routable backend has the credit for a turn, the first routable
// one takes it: a weight slows a backend down, it never makes pulse-lb
// answer 503. A degraded outlier of its group (GroupPolicy.outlier) is
// weighed the same way, at 10%.

// weightSource is a healthSource that knows each routable backend's
// weight in percent at a time: 100 outside a slow start.
type weightSource interface {
	Weight(name string, now time.Time) uint32
}

// credits is each backend's credit toward its next turn; guarded by the
// rotor's lock, which pick holds while it reads and writes them.
type credits []uint32

// pick chooses the backend for one request among the routable ones
// (healthy, sorted), by the rotor and, when the source has them, the
// weights.
func (b *balancer) pick(healthy []string) (int, bool) {
	up := func(i int) bool {
		_, found := slices.BinarySearch(healthy, b.backends[i].name)
		return found
	}
	ws, ok := b.health.(weightSource)
	if !ok {
		return b.rotor.next(len(b.backends), up)
	}
	now := time.Now()
	b.creditMu.Lock()
	defer b.creditMu.Unlock()
	if len(b.credit) != len(b.backends) {
		b.credit = make(credits, len(b.backends))
	}
	i, ok := b.rotor.next(len(b.backends), func(i int) bool {
		if !up(i) {
			return false
		}
		b.credit[i] += ws.Weight(b.backends[i].name, now)
		if b.credit[i] < 100 {
			return false
		}
		b.credit[i] -= 100
		return true
	})
	if ok {
		return i, true
	}
	return b.rotor.next(len(b.backends), up)
}

// Weight returns a backend's weight at now, from the view of pulsed's
// stream: its slow start's, at most client.OutlierWeight while it is a
// degraded outlier.
func (s *remoteSource) Weight(name string, now time.Time) uint32 {
	st, ok := s.view.Get(name)
	if !ok {
		return 100
	}
	return st.Weight(now)
}

// Weight returns a backend's weight (slow start, degraded outlier), as
// the checker computes it.
func (s *checkerSource) Weight(name string, _ time.Time) uint32 {
	st, err := s.c.Status(name)
	if err != nil {
		return 100
	}
	return st.Weight
}

// creditState is the balancer's part of the weights: its credits and the
// lock that guards them. It is separate from the rotor's lock so that a
// source without weights never takes it.
type creditState struct {
	creditMu sync.Mutex // protects credit
	credit   credits
}
