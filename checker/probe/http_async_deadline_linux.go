//go:build linux

package probe

import (
	"context"
	"fmt"
	"time"
)

// The deadlines of the async loop's probes: the probes waiting for an
// answer are kept in a heap by deadline, one timer fires at the first, and
// expire ends the probes whose deadline has passed as Probe would.

// armLocked sets the timer to the first deadline of the probes waiting.
func (l *asyncLoop) armLocked() {
	if len(l.waiting) == 0 {
		return
	}
	first := l.waiting[0].deadline
	switch {
	case l.timer == nil:
		l.timer = time.AfterFunc(time.Until(first), l.expire)
	case l.timerAt.IsZero() || first.Before(l.timerAt):
		l.timer.Reset(time.Until(first))
	default:
		return
	}
	l.timerAt = first
}

// expire ends the probes whose deadline has passed: their connections
// are closed, as Probe closes one at its deadline.
func (l *asyncLoop) expire() {
	now := time.Now()
	var ends []asyncEnd
	l.mu.Lock()
	l.timerAt = time.Time{}
	for len(l.waiting) > 0 && !l.waiting[0].deadline.After(now) {
		ap := l.waiting[0]
		l.endLocked(ap)
		err := ap.p.urlError(context.DeadlineExceeded)
		if resp, body, _, ok := ap.head(); ok {
			err = ap.p.bodyTimedOut(resp.code, ap.buf[:ap.n-int(body)])
		}
		if ap.writing {
			ap.endErr = err // ProbeAsync delivers it once written
			continue
		}
		ends = append(ends, asyncEnd{ap: ap, err: err})
	}
	if !l.closed {
		l.armLocked()
	}
	l.mu.Unlock()
	l.finish(ends)
}

// bodyTimedOut is the result of a probe whose head arrived, with code,
// and whose body did not by its deadline: Probe's, once reading the body
// ran into the deadline. A probe that checks the body fails; one that
// checks only the status or the header has its verdict.
func (p *leanProber) bodyTimedOut(code int, head []byte) error {
	var values func(string) []string
	if p.expect != nil && len(p.expect.headers) > 0 {
		values = headValues(head)
	}
	var bodyErr error
	if p.expect.readsBody() {
		bodyErr = fmt.Errorf("reading the body: %w", context.DeadlineExceeded)
	}
	return p.verdict(code, values, nil, bodyErr)
}

// probeHeap orders probes by deadline.
type probeHeap []*asyncProbe

func (h probeHeap) Len() int           { return len(h) }
func (h probeHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h probeHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *probeHeap) Push(x any) {
	ap := x.(*asyncProbe)
	ap.index = len(*h)
	*h = append(*h, ap)
}
func (h *probeHeap) Pop() any {
	old := *h
	ap := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	ap.index = -1
	return ap
}
