package main

import (
	"context"
	"strings"
	"time"
)

// healAndWait heals the targets heal and waits until every subscriber has
// received their recoveries, or a bound on the time that takes. With
// o.DeliverySerial it heals them one at a time, each once every subscriber
// has received the one before, so that each transition is delivered alone;
// otherwise all at once. all is false when the bound passed first.
func healAndWait(ctx context.Context, o Options, farm *Farm, subs *subscribers, heal []int, interval time.Duration) (all bool, err error) {
	bound := time.Duration(o.Rise+2)*interval + 10*time.Second // the rise, a probe's phase and a margin
	if !o.DeliverySerial {
		if _, err := farm.SetMode(heal, ModeOK); err != nil {
			return false, err
		}
		return waitUntil(ctx, time.Now().Add(bound), func() bool { return subs.minReceived() >= len(heal) })
	}
	for k := range heal {
		if _, err := farm.SetMode(heal[k:k+1], ModeOK); err != nil {
			return false, err
		}
		all, err := waitUntil(ctx, time.Now().Add(bound), func() bool { return subs.minReceived() > k })
		if err != nil || !all {
			return all, err
		}
	}
	return true, nil
}

// spread returns, for each of the first n recoveries, its first and last
// receipt over every subscriber. Recoveries delivered one at a time arrive
// in the same order on every stream, so a subscriber's k-th sample is the
// k-th recovery.
func (s *subscribers) spread(n int) (first, last []time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	first, last = make([]time.Duration, n), make([]time.Duration, n)
	for _, x := range s.samples {
		for k := range min(n, len(x)) {
			if first[k] == 0 || x[k] < first[k] {
				first[k] = x[k]
			}
			last[k] = max(last[k], x[k])
		}
	}
	return first, last
}

// fmtSpreads formats each recovery's first and last receipt as
// "first-last", comma-separated.
func fmtSpreads(first, last []time.Duration) string {
	parts := make([]string, len(first))
	for i := range first {
		parts[i] = fmtDur(first[i]) + "-" + fmtDur(last[i])
	}
	return strings.Join(parts, ", ")
}
