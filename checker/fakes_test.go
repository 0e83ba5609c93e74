package checker_test

import (
	"context"
	"errors"
	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/internal/testscale"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pulsehealth/pulse/checker/fakeclock"
	"github.com/pulsehealth/pulse/checker/probe"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// outcome is what a fake prober does on its next probe.
type outcome struct {
	err     error         // returned as is (nil: pass)
	hang    bool          // block until the probe's context is done
	panics  bool          // panic
	advance time.Duration // move the fake clock first (a slow answer)
}

var (
	pass    = outcome{}
	fail    = outcome{err: errors.New("status 503")}
	timeout = outcome{err: context.DeadlineExceeded}
)

// fakeProbers builds probers keyed by their TCP address, whose outcomes the
// test sets per target. Safe for concurrent use.
type fakeProbers struct {
	clock *fakeclock.Clock

	mu       sync.Mutex
	next     map[string]outcome
	calls    map[string]int
	active   map[string]int
	maxPer   map[string]int
	maxTotal int
	total    int
	closed   map[string]int
	running  map[*context.Context]bool // the contexts of the probes running now
}

func newFakeProbers(clock *fakeclock.Clock) *fakeProbers {
	return &fakeProbers{
		clock:   clock,
		next:    map[string]outcome{},
		calls:   map[string]int{},
		active:  map[string]int{},
		maxPer:  map[string]int{},
		closed:  map[string]int{},
		running: map[*context.Context]bool{},
	}
}

func (f *fakeProbers) New(s probe.Spec) (checker.Prober, error) {
	if s.TCP == nil {
		return nil, errors.New("fake probers take tcp specs")
	}
	return &fakeProber{f: f, addr: s.TCP.Address}, nil
}

func (f *fakeProbers) set(name string, o outcome) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next[name+":80"] = o
}

func (f *fakeProbers) setAll(os map[string]outcome) {
	for name, o := range os {
		f.set(name, o)
	}
}

func (f *fakeProbers) callCount(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[name+":80"]
}

func (f *fakeProbers) maxActive(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maxPer[name+":80"]
}

func (f *fakeProbers) inFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.total
}

// ending counts the running probes whose context is done: they are about to
// return.
func (f *fakeProbers) ending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for ctx := range f.running {
		if (*ctx).Err() != nil {
			n++
		}
	}
	return n
}

func (f *fakeProbers) maxInFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maxTotal
}

type fakeProber struct {
	f    *fakeProbers
	addr string
}

func (p *fakeProber) Probe(ctx context.Context) error {
	f := p.f
	f.mu.Lock()
	o := f.next[p.addr]
	f.calls[p.addr]++
	f.active[p.addr]++
	f.maxPer[p.addr] = max(f.maxPer[p.addr], f.active[p.addr])
	f.total++
	f.maxTotal = max(f.maxTotal, f.total)
	f.running[&ctx] = true
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.active[p.addr]--
		f.total--
		delete(f.running, &ctx)
		f.mu.Unlock()
	}()
	if o.advance > 0 {
		f.clock.Advance(o.advance)
	}
	switch {
	case o.panics:
		panic("boom")
	case o.hang:
		<-ctx.Done()
		return ctx.Err()
	}
	return o.err
}

func (p *fakeProber) Close() error {
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	p.f.closed[p.addr]++
	return nil
}

// spec returns a spec whose fake prober is keyed by name.
func spec(name string) checker.Spec {
	return checker.Spec{Name: name, Probe: probe.Spec{TCP: &probe.TCPSpec{Address: name + ":80"}}}
}

type testEnv struct {
	c      *checker.Checker
	clock  *fakeclock.Clock
	probes *fakeProbers
}

func newEnv(t *testing.T, cfg checker.Config) *testEnv {
	t.Helper()
	clock := fakeclock.New(epoch)
	fp := newFakeProbers(clock)
	cfg.Clock = clock
	cfg.NewProber = fp.New
	c, err := checker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &testEnv{c: c, clock: clock, probes: fp}
}

func (e *testEnv) add(t *testing.T, s checker.Spec) {
	t.Helper()
	if _, _, err := e.c.Add(s); err != nil {
		t.Fatalf("Add(%s): %v", s.Name, err)
	}
}

func texts(trs []checker.Transition) []string {
	out := []string{}
	for _, tr := range trs {
		out = append(out, tr.String())
	}
	return out
}

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testscale.D(10 * time.Second))
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// watchNow watches from the current revision, without a snapshot.
func watchNow(t *testing.T, c *checker.Checker, f checker.Filter) *checker.Watcher {
	t.Helper()
	w, err := c.Watch(f, c.Revision())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// next returns every event the watcher has now.
func next(t *testing.T, w *checker.Watcher) []checker.Event {
	t.Helper()
	evs, err := w.Next(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// kinds describes events: a transition by its text, others as "added a".
func kinds(evs []checker.Event) []string {
	out := []string{}
	for _, e := range evs {
		switch e.Kind {
		case checker.EventTransition:
			out = append(out, e.Transition.String())
		case checker.EventAdded:
			out = append(out, "added "+e.Target())
		case checker.EventUpdated:
			out = append(out, "updated "+e.Target())
		case checker.EventRemoved:
			out = append(out, "removed "+e.Target())
		}
	}
	return out
}
