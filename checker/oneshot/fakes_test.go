package oneshot

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/pulsehealth/pulse/checker/probe"
)

// Fakes for one-shot runs: a fake clock and a scripted fake server.
//
// One worker's fake sleep must not inflate the latency another worker
// measures, so each target's check gets its own timeline
// (Options.TargetClock), all starting at the same instant. The timeline
// travels to the fake prober in the attempt's context (its WithTimeout puts
// itself there), which is how the fake server finds the caller's clock. The
// results are then the same whatever order the scheduler runs the workers
// in.

// start is where every fake timeline begins.
var start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// timeline is a fake Clock that moves only when its owner probes or sleeps.
type timeline struct {
	mu  sync.Mutex // protects now
	now time.Time
}

func newTimeline() *timeline { return &timeline{now: start} }

func (c *timeline) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *timeline) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *timeline) advanceTo(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
}

// Sleep moves the clock by d at once.
func (c *timeline) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.advance(d)
	return nil
}

type timelineKey struct{}

// WithTimeout returns a context whose Deadline is d from now on this
// timeline and which carries the timeline. It is never ended by the fake
// time: a fake prober that "times out" moves the clock to the deadline and
// returns context.DeadlineExceeded itself.
func (c *timeline) WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithValue(ctx, timelineKey{}, c))
	return &fakeDeadlineCtx{Context: ctx, deadline: c.Now().Add(d)}, cancel
}

type fakeDeadlineCtx struct {
	context.Context
	deadline time.Time
}

func (c *fakeDeadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// reply is one scripted answer of the fake server: a status after 10ms, a
// timeout (the clock moves to the attempt's deadline), or 200 after delay.
type reply struct {
	status  int
	timeout bool
	delay   time.Duration
	panics  bool
}

func code(c int) reply               { return reply{status: c} }
func slow(d time.Duration) reply     { return reply{status: 200, delay: d} }
func timeoutReply() reply            { return reply{timeout: true} }
func script(rs ...reply) []reply     { return rs }
func fakeURL(name string) string     { return "https://" + name + ".internal/healthz" }
func httpSpec(url string) probe.Spec { return probe.Spec{HTTP: &probe.HTTPSpec{URL: url}} }

// fakeServer answers with scripted replies per URL, each call taking the
// next one, the last one repeating forever. It is also a ProberFactory whose
// probers ask it. Safe for concurrent use.
type fakeServer struct {
	mu      sync.Mutex // protects scripts, calls and starts
	scripts map[string][]reply
	calls   map[string]int
	starts  map[string][]time.Time // when each call started, on the caller's timeline
}

func newFakeServer(scripts map[string][]reply) *fakeServer {
	s := &fakeServer{scripts: map[string][]reply{}, calls: map[string]int{}, starts: map[string][]time.Time{}}
	for url, sc := range scripts {
		s.scripts[url] = slices.Clone(sc)
	}
	return s
}

// New returns a prober for an HTTP spec; like the real factory it rejects
// an invalid spec.
func (s *fakeServer) New(spec probe.Spec) (probe.Prober, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	return &fakeProber{s: s, url: spec.HTTP.URL, expected: spec.HTTP.ExpectedStatus}, nil
}

func (s *fakeServer) next(url string, now time.Time) reply {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[url]++
	s.starts[url] = append(s.starts[url], now)
	sc := s.scripts[url]
	if len(sc) == 0 {
		panic("no script for " + url)
	}
	r := sc[0]
	if len(sc) > 1 {
		s.scripts[url] = sc[1:]
	}
	return r
}

func (s *fakeServer) callCount(url string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[url]
}

func (s *fakeServer) startTimes(url string) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.starts[url])
}

// fakeProber answers as the real HTTP prober does: nil when the status is
// expected (any 2xx when none is), *probe.StatusError otherwise, and an
// error matching context.DeadlineExceeded on a timeout.
type fakeProber struct {
	s        *fakeServer
	url      string
	expected []int
}

func (p *fakeProber) Probe(ctx context.Context) error {
	clock, ok := ctx.Value(timelineKey{}).(*timeline)
	if !ok {
		panic("fakeProber needs a timeline clock")
	}
	r := p.s.next(p.url, clock.Now())
	switch {
	case r.panics:
		panic("boom")
	case r.timeout:
		deadline, _ := ctx.Deadline()
		clock.advanceTo(deadline)
		return fmt.Errorf("fake get %s: %w", p.url, context.DeadlineExceeded)
	case r.delay > 0:
		clock.advance(r.delay)
	default:
		clock.advance(10 * time.Millisecond) // a normal response costs 10 ms
	}
	pass := r.status >= 200 && r.status <= 299
	if len(p.expected) > 0 {
		pass = slices.Contains(p.expected, r.status)
	}
	if !pass {
		return &probe.StatusError{Code: r.status}
	}
	return nil
}

// fakeOptions returns Options that run on fresh fake timelines, one per
// target, with s as the transport and a seeded jitter.
func fakeOptions(s *fakeServer) Options {
	return Options{
		Factory:     s,
		Clock:       newTimeline(),
		TargetClock: func(int) Clock { return newTimeline() },
		Rand:        seededRand(),
	}
}
