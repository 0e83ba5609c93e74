package checker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
	"github.com/pulsehealth/pulse/checker/probe"
)

// asyncProbers are fake checker.AsyncProbers: each started probe waits
// until the test ends it (or CancelAsync does), and a prober set to
// decline falls back to its blocking Probe, which passes.
type asyncProbers struct {
	mu       sync.Mutex
	pending  map[string]func(error) // by name: the callback of the probe in flight
	started  map[string]int
	blocking map[string]int
	decline  map[string]bool
	max      int // most asynchronous probes in flight at once
}

func newAsyncProbers() *asyncProbers {
	return &asyncProbers{pending: map[string]func(error){}, started: map[string]int{}, blocking: map[string]int{}, decline: map[string]bool{}}
}

func (f *asyncProbers) New(s probe.Spec) (checker.Prober, error) {
	return &asyncProber{f: f, name: s.TCP.Address}, nil
}

// end ends name's probe in flight with err and reports whether one was.
func (f *asyncProbers) end(name string, err error) bool {
	f.mu.Lock()
	done := f.pending[name]
	delete(f.pending, name)
	f.mu.Unlock()
	if done != nil {
		done(err)
	}
	return done != nil
}

func (f *asyncProbers) inFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pending)
}

func (f *asyncProbers) counts(name string) (started, blocking int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.started[name], f.blocking[name]
}

type asyncProber struct {
	f    *asyncProbers
	name string
}

func (p *asyncProber) Probe(context.Context) error {
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	p.f.blocking[p.name]++
	return nil
}

func (p *asyncProber) ProbeAsync(_ time.Time, done func(error)) bool {
	f := p.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.decline[p.name] {
		return false
	}
	if f.pending[p.name] != nil {
		panic("two probes of " + p.name + " in flight")
	}
	f.pending[p.name] = done
	f.started[p.name]++
	f.max = max(f.max, len(f.pending))
	return true
}

func (p *asyncProber) CancelAsync() {
	p.f.end(p.name, context.Canceled)
}

// Asynchronous probes: their results are applied as blocking probes' are,
// they count against MaxConcurrentProbes, a prober that declines is probed
// blocking, and Close cancels those in flight.
func TestAsyncProbes(t *testing.T) {
	fp := newAsyncProbers()
	clock := fakeclock.New(epoch)
	c, err := checker.New(checker.Config{Clock: clock, NewProber: fp.New, MaxConcurrentProbes: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 6 {
		s := spec(fmt.Sprintf("a%d", i))
		s.Interval, s.Timeout, s.Rise, s.Fall = time.Second, time.Second, 1, 1
		if _, _, err := c.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	fp.mu.Lock()
	fp.decline["a5:80"] = true
	fp.mu.Unlock()
	w := watchNow(t, c, checker.Filter{})
	c.Start()
	clock.Advance(time.Second) // every target falls due

	waitFor(t, "three probes in flight", func() bool { return fp.inFlight() == 3 })
	// The bound holds: the others wait until a slot frees.
	for i := range 5 {
		if st, _ := c.Status(fmt.Sprintf("a%d", i)); st.State != checker.StateUnhealthy {
			t.Fatalf("a%d is %v before any result", i, st.State)
		}
	}
	ended := map[string]bool{}
	endOne := func(err error) {
		t.Helper()
		for i := range 5 {
			name := fmt.Sprintf("a%d:80", i)
			if !ended[name] && fp.end(name, err) {
				ended[name] = true
				return
			}
		}
		t.Fatal("no probe to end")
	}
	endOne(nil)
	endOne(nil)
	endOne(errors.New("status 503"))
	waitFor(t, "the other probes", func() bool {
		_, blocking := fp.counts("a5:80")
		return fp.inFlight() == 2 && blocking == 1
	})
	endOne(nil)
	endOne(nil)
	waitFor(t, "every result", func() bool {
		for i := range 6 {
			if st, _ := c.Status(fmt.Sprintf("a%d", i)); st.ActiveResults != 1 {
				return false
			}
		}
		return true
	})
	if fp.max > 3 {
		t.Errorf("%d asynchronous probes in flight at once, bound 3", fp.max)
	}
	healthy, unhealthy := 0, 0
	for i := range 6 {
		st, _ := c.Status(fmt.Sprintf("a%d", i))
		switch {
		case st.State == checker.StateHealthy && st.LastResult.Pass:
			healthy++
		case st.State == checker.StateUnhealthy && st.LastResult.Err == "status 503":
			unhealthy++
		}
	}
	if healthy != 5 || unhealthy != 1 {
		t.Errorf("%d healthy and %d unhealthy with their results, want 5 and 1", healthy, unhealthy)
	}
	if got := len(kinds(next(t, w))); got != 5 {
		t.Errorf("%d transitions, want 5", got)
	}
	if started, blocking := fp.counts("a0:80"); started != 1 || blocking != 0 {
		t.Errorf("a0: %d asynchronous and %d blocking probes, want 1 and 0", started, blocking)
	}

	// Close cancels the probes in flight and returns.
	clock.Advance(time.Second)
	waitFor(t, "the next round", func() bool { return fp.inFlight() == 3 })
	c.Close()
	if n := fp.inFlight(); n != 0 {
		t.Errorf("%d probes still in flight after Close", n)
	}
}

// The Observer sees every asynchronous result, as it sees blocking ones,
// but not one that outlived its target (removed) or its probe spec
// (updated while in flight).
func TestAsyncProbesAreObserved(t *testing.T) {
	fp := newAsyncProbers()
	clock := fakeclock.New(epoch)
	rec := &recorder{}
	c, err := checker.New(checker.Config{Clock: clock, NewProber: fp.New, Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	add := func(name, addr string) {
		t.Helper()
		s := spec(name)
		s.Probe.TCP.Address = addr
		s.Interval, s.Timeout, s.Rise, s.Fall = time.Second, time.Second, 1, 1
		if _, _, err := c.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	add("a", "a:80")
	add("gone", "gone:80")
	add("moved", "old:80")
	c.Start()
	clock.Advance(time.Second) // every target falls due
	waitFor(t, "three probes in flight", func() bool { return fp.inFlight() == 3 })
	if ok, err := c.Remove("gone"); !ok || err != nil {
		t.Fatalf("Remove: %v %v", ok, err)
	}
	add("moved", "new:80") // a new probe spec: the old probe's result is stale
	for _, name := range []string{"gone:80", "old:80", "a:80"} {
		if !fp.end(name, nil) {
			t.Fatalf("no probe of %s in flight", name)
		}
	}
	waitFor(t, "a's result", func() bool { st, _ := c.Status("a"); return st.ActiveResults == 1 })
	c.Close() // no later probe gets in the way
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if diff := cmp.Diff([]string{`a tcp true ""`}, rec.probes); diff != "" {
		t.Errorf("observed probes (-want +got):\n%s", diff)
	}
}

// Each asynchronous result reaches its own target, however the probes in
// flight end: round after round, ended in the reverse of the order they
// started, each with an error naming its target. (The checker reuses what
// it keeps of a probe in flight once its result is applied.)
func TestAsyncResultsReachTheirTargets(t *testing.T) {
	fp := newAsyncProbers()
	clock := fakeclock.New(epoch)
	c, err := checker.New(checker.Config{Clock: clock, NewProber: fp.New})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 8
	for i := range n {
		s := spec(fmt.Sprintf("r%d", i))
		s.Interval, s.Timeout, s.Rise, s.Fall = time.Second, time.Second, 1, 1
		if _, _, err := c.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	c.Start()
	for round := 1; round <= 3; round++ {
		clock.Advance(time.Second)
		waitFor(t, "every probe in flight", func() bool { return fp.inFlight() == n })
		for i := n - 1; i >= 0; i-- {
			if !fp.end(fmt.Sprintf("r%d:80", i), fmt.Errorf("r%d round %d", i, round)) {
				t.Fatalf("round %d: no probe of r%d in flight", round, i)
			}
		}
		waitFor(t, "every result", func() bool {
			for i := range n {
				if st, _ := c.Status(fmt.Sprintf("r%d", i)); st.ActiveResults != uint64(round) {
					return false
				}
			}
			return true
		})
		for i := range n {
			st, _ := c.Status(fmt.Sprintf("r%d", i))
			if want := fmt.Sprintf("r%d round %d", i, round); st.LastResult.Err != want {
				t.Errorf("round %d: r%d's last result %q, want %q", round, i, st.LastResult.Err, want)
			}
		}
	}
}
