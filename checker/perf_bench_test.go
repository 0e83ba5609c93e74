package checker_test

// Micro-benchmarks of the paths every probe pays for. They assert nothing about time; compare them between commits with
// benchstat (see BENCHMARKS.md):
//
//	go test -run '^$' -bench 'Perf' -benchmem -count 10 ./checker/ > new.txt
//	go run golang.org/x/perf/cmd/benchstat@latest old.txt new.txt
//
// The fakes here are self-contained: a prober that answers at once from an
// atomic outcome, so the numbers are the checker's own cost.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/boltstore"
	"github.com/pulsehealth/pulse/checker/fakeclock"
	"github.com/pulsehealth/pulse/checker/outlier"
	"github.com/pulsehealth/pulse/checker/probe"
)

// perfProber passes or fails at once, as its shared switch says, and counts
// its calls.
type perfProber struct {
	fail  *atomic.Bool
	calls *atomic.Int64
}

func (p perfProber) Probe(context.Context) error {
	p.calls.Add(1)
	if p.fail.Load() {
		return errPerfFail
	}
	return nil
}

var errPerfFail = errors.New("status 503")

// perfFleet is a checker with n fake targets named t00000, t00001, ...
type perfFleet struct {
	c     *checker.Checker
	fail  atomic.Bool
	calls atomic.Int64
	names []string
}

func newPerfFleet(b *testing.B, n int, cfg checker.Config, s checker.Spec) *perfFleet {
	b.Helper()
	f := &perfFleet{}
	cfg.NewProber = func(probe.Spec) (checker.Prober, error) {
		return perfProber{fail: &f.fail, calls: &f.calls}, nil
	}
	c, err := checker.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	f.c = c
	b.Cleanup(func() { c.Close() })
	for i := range n {
		s.Name = fmt.Sprintf("t%05d", i)
		s.Probe = probe.Spec{TCP: &probe.TCPSpec{Address: fmt.Sprintf("127.0.0.1:%d", 10000+i)}}
		if _, _, err := c.Add(s); err != nil {
			b.Fatal(err)
		}
		f.names = append(f.names, s.Name)
	}
	return f
}

// BenchmarkPerfMachineObserve: one result through the pure state machine.
// "steady" never changes state; "transition" changes state on every result
// (rise = fall = 1, alternating results).
func BenchmarkPerfMachineObserve(b *testing.B) {
	b.Run("rise_fall/steady", func(b *testing.B) {
		m := checker.Machine{Rise: 2, Fall: 3, State: checker.StateHealthy}
		b.ReportAllocs()
		for b.Loop() {
			m.Observe(true)
		}
	})
	b.Run("rise_fall/transition", func(b *testing.B) {
		m := checker.Machine{Rise: 1, Fall: 1, State: checker.StateHealthy}
		b.ReportAllocs()
		pass := false
		for b.Loop() {
			m.Observe(pass)
			pass = !pass
		}
	})
	b.Run("three_state/transition", func(b *testing.B) {
		m := checker.Machine{Model: checker.ModelThreeState, Rise: 1, Fall: 1, State: checker.StateHealthy}
		b.ReportAllocs()
		pass := false
		for b.Loop() {
			m.Observe(pass)
			pass = !pass
		}
	})
}

// BenchmarkPerfRunRound10k: one RunRound over 10,000 fake targets that all
// pass (steady state: no transitions), with the real clock, so each probe
// pays for its real context.WithTimeout. ns/op is the whole round; divide by
// 10,000 for the checker's cost per probe (the "ns/probe" metric).
func BenchmarkPerfRunRound10k(b *testing.B) {
	for _, tc := range []struct {
		name string
		flip bool // every target changes state every round (rise = fall = 1)
	}{
		{name: "steady"},
		{name: "all-transition", flip: true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			const n = 10000
			s := checker.Spec{Interval: time.Second, Timeout: time.Second, Rise: 2, Fall: 3, InitialState: checker.StateHealthy}
			if tc.flip {
				s.Rise, s.Fall = 1, 1
			}
			f := newPerfFleet(b, n, checker.Config{MaxUnhealthyFraction: 1, HistorySize: 4 * n}, s)
			w, err := f.c.Watch(checker.Filter{}, f.c.Revision())
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			f.c.RunRound(b.Context()) // warm: every target has a result
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if tc.flip {
					f.fail.Store(!f.fail.Load())
				}
				f.c.RunRound(b.Context())
				if _, err := w.Next(1 << 30); err != nil { // keep the watcher within the history
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/probe")
		})
	}
}

// BenchmarkPerfScheduleRound10k: one round of the real scheduler (Start)
// over 10,000 fake targets at a 1s interval, driven by the fake clock: each
// op advances the clock one interval, which makes every target due once, and
// waits until all 10,000 probes ran and their results were applied (a
// List of the 10,000 statuses confirms it, and is part of the op: compare
// with BenchmarkPerfList10k from the same run).
//
// "outliers" puts the targets in one group with outlier detection on
// (judged every hour, so never within the run: the cost per probe is the
// sampling; BenchmarkPerfJudgeOutliers10k is a judgement's):
//
//	go test -run '^$' -bench 'PerfScheduleRound10k' -count 6 ./checker/
func BenchmarkPerfScheduleRound10k(b *testing.B) {
	b.Run("plain", func(b *testing.B) { benchScheduleRound(b, "", 1) })
	b.Run("outliers", func(b *testing.B) { benchScheduleRound(b, "edge", 2) })
}

func benchScheduleRound(b *testing.B, group string, waiters int) {
	const n = 10000
	clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := checker.Spec{Group: group, Interval: time.Second, Timeout: time.Second, Rise: 2, Fall: 3, InitialState: checker.StateHealthy}
	f := newPerfFleet(b, n, checker.Config{Clock: clock, MaxUnhealthyFraction: 1}, s)
	if group != "" {
		if _, err := f.c.SetGroupPolicy(group, checker.GroupPolicy{Outlier: outlier.Policy{LatencyFactor: 3, Interval: time.Hour}}); err != nil {
			b.Fatal(err)
		}
	}
	f.c.Start()
	var want int64
	round := func() {
		want += n
		waitPerf(b, "the scheduler's timer", func() bool { return clock.Waiters() == waiters })
		clock.Advance(time.Second)
		waitPerf(b, "the round's probes", func() bool { return f.calls.Load() >= want })
		waitPerf(b, "the round's results", func() bool {
			list, _ := f.c.List("")
			for _, st := range list {
				if st.Probing {
					return false
				}
			}
			return true
		})
		if got := f.calls.Load(); got != want {
			b.Fatalf("%d probes after the round, want %d: a slot was skipped", got, want)
		}
	}
	round() // warm
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		round()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/probe")
}

// BenchmarkPerfList10k is the cost of List over 10,000 targets, which
// BenchmarkPerfScheduleRound10k includes once per op.
func BenchmarkPerfList10k(b *testing.B) {
	s := checker.Spec{Interval: time.Second, Timeout: time.Second, InitialState: checker.StateHealthy}
	f := newPerfFleet(b, 10000, checker.Config{}, s)
	b.ReportAllocs()
	for b.Loop() {
		f.c.List("")
	}
}

// waitPerf polls cond, without a deadline of its own: a benchmark that
// never gets there is stopped by go test's -timeout.
func waitPerf(b *testing.B, what string, cond func() bool) {
	b.Helper()
	for i := 0; !cond(); i++ {
		if i > 0 && i%1_000_000 == 0 {
			b.Logf("still waiting for %s", what)
		}
		if i > 100 {
			time.Sleep(10 * time.Microsecond)
		}
	}
}

// BenchmarkPerfPublishTo1000Watchers: one transition (a one-target RunRound
// that flips it) published to 1,000 watchers that all match it.
// "signal" only publishes: the watchers are woken, and read in bulk every
// 1,000 ops with the timer stopped, so the op is the producer's cost. "delivered" also has every
// watcher take the event with Next before the op ends: the cost of getting
// one transition to every subscriber, without gRPC. "delivered-reused" is
// "delivered" with each watcher taking it with NextAppend into a buffer it
// reuses, as WatchTransitions streams do.
func BenchmarkPerfPublishTo1000Watchers(b *testing.B) {
	const watchers = 1000
	for _, name := range []string{"signal", "delivered", "delivered-reused"} {
		delivered, reuse := name != "signal", name == "delivered-reused"
		b.Run(name, func(b *testing.B) {
			s := checker.Spec{Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1, InitialState: checker.StateHealthy}
			f := newPerfFleet(b, 1, checker.Config{MaxUnhealthyFraction: 1, HistorySize: 10000}, s)
			ws := make([]*checker.Watcher, watchers)
			for i := range ws {
				w, err := f.c.Watch(checker.Filter{}, f.c.Revision())
				if err != nil {
					b.Fatal(err)
				}
				defer w.Close()
				ws[i] = w
			}
			bufs := make([][]checker.Event, watchers)
			drain := func() {
				for i, w := range ws {
					<-w.Ready()
					var evs []checker.Event
					var err error
					if reuse {
						evs, err = w.NextAppend(bufs[i][:0], 1<<20)
						bufs[i] = evs
					} else {
						evs, err = w.Next(1 << 20)
					}
					if err != nil || len(evs) == 0 {
						b.Fatalf("watcher got %d events, %v", len(evs), err)
					}
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				f.fail.Store(i%2 == 0)
				if trs := f.c.RunRound(b.Context()); len(trs) != 1 {
					b.Fatalf("round %d: %d transitions, want 1", i, len(trs))
				}
				i++
				switch {
				case delivered:
					drain()
				case i%1000 == 0: // keep the watchers within the history, off the clock
					b.StopTimer()
					drain()
					b.StartTimer()
				}
			}
		})
	}
}

// BenchmarkPerfHTTPProbe: one real HTTP probe through probe.Factory against
// Go HTTP servers on 127.0.0.1, each answering GET /healthz with 200. With
// one target the probe reuses its keep-alive connection. With 1,000 targets
// probed in turn, as a 1,000-target fleet is, each prober must still find
// its own connection open (an http:// prober keeps one; a pool smaller than
// the fleet would close it first); "conns/op" is the share of probes that
// had to open a new TCP connection. checker/probe's BenchmarkHTTPProber
// compares the lean prober with net/http's on the same setup.
func BenchmarkPerfHTTPProbe(b *testing.B) {
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprintf("targets=%d", n), func(b *testing.B) {
			var accepted atomic.Int64
			srv := &http.Server{
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.WriteString(w, "ok\n")
				}),
				ConnState: func(_ net.Conn, s http.ConnState) {
					if s == http.StateNew {
						accepted.Add(1)
					}
				},
			}
			var wg sync.WaitGroup
			defer func() {
				_ = srv.Close()
				wg.Wait()
			}()
			fac := probe.NewFactory()
			defer fac.Close()
			probers := make([]probe.Prober, n)
			for i := range n {
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				wg.Go(func() { _ = srv.Serve(l) })
				p, err := fac.New(probe.Spec{HTTP: &probe.HTTPSpec{URL: "http://" + l.Addr().String() + "/healthz"}})
				if err != nil {
					b.Fatal(err)
				}
				probers[i] = p
			}
			ctx := b.Context()
			probeOnce := func(p probe.Prober) {
				pctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				if err := p.Probe(pctx); err != nil {
					b.Fatal(err)
				}
			}
			for _, p := range probers { // warm: one connection each, as far as the pool keeps them
				probeOnce(p)
			}
			before := accepted.Load()
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				probeOnce(probers[i%n])
				i++
			}
			b.StopTimer()
			b.ReportMetric(float64(accepted.Load()-before)/float64(b.N), "conns/op")
			fac.Close()
		})
	}
}

// BenchmarkPerfHeapPerTarget reports the live heap one registered HTTP
// target holds in the checker (spec, state, prober, heap and pool entries),
// after 10,000 Adds and a GC: the "B/target" metric, which includes each
// target's EventAdded in the watch history (10,000 events by default, so
// all of them here). It does not probe, so
// it leaves out what probing holds (connections, goroutines) and what
// pulsed keeps beside the checker (the status page's last 20 results).
func BenchmarkPerfHeapPerTarget(b *testing.B) {
	const n = 10000
	for b.Loop() {
		b.StopTimer()
		fac := probe.NewFactory()
		c, err := checker.New(checker.Config{NewProber: func(s probe.Spec) (checker.Prober, error) { return fac.New(s) }})
		if err != nil {
			b.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		for i := range n {
			s := checker.Spec{
				Name:  fmt.Sprintf("t%06d", i),
				Group: "bench",
				Probe: probe.Spec{HTTP: &probe.HTTPSpec{URL: fmt.Sprintf("http://127.1.%d.%d:41000/healthz", i/254, 1+i%254)}},
			}
			if _, _, err := c.Add(s); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/target")
		c.Close()
		fac.Close()
		b.StartTimer()
	}
}

// BenchmarkPerfHeapPerProbedTarget reports the live heap one fake target
// holds in the checker once it has been probed: BenchmarkPerfHeapPerTarget's
// figure without the HTTP prober, plus the last result every probed target
// keeps (here a failure with its error string, as a dead fleet's) and what
// probing leaves behind (the probes run through RunRound on the checker's
// workers). Like BenchmarkPerfHeapPerTarget it includes each target's
// EventAdded in the history, but not the history's own buffer.
func BenchmarkPerfHeapPerProbedTarget(b *testing.B) { heapPerProbedTarget(b, 0) }

// BenchmarkPerfHeapPerTransitionedTarget is BenchmarkPerfHeapPerProbedTarget
// with fall 1: every target's first result moves it, so each holds the
// state record it wrote, flap log and verdict included, as it keeps it to
// answer Status and to store it again across a restart.
func BenchmarkPerfHeapPerTransitionedTarget(b *testing.B) { heapPerProbedTarget(b, 1) }

// heapPerProbedTarget reports the live heap per target of 10,000 healthy
// targets after one round of failed probes; fall 0 is the default.
func heapPerProbedTarget(b *testing.B, fall int) {
	const n = 10000
	for b.Loop() {
		b.StopTimer()
		var fail atomic.Bool
		var calls atomic.Int64
		fail.Store(true)
		c, err := checker.New(checker.Config{MaxUnhealthyFraction: 1, NewProber: func(probe.Spec) (checker.Prober, error) {
			return perfProber{fail: &fail, calls: &calls}, nil
		}})
		if err != nil {
			b.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		for i := range n {
			s := checker.Spec{
				Name:         fmt.Sprintf("t%06d", i),
				Group:        "bench",
				InitialState: checker.StateHealthy,
				Fall:         fall,
				Probe:        probe.Spec{TCP: &probe.TCPSpec{Address: fmt.Sprintf("127.1.%d.%d:41000", i/254, 1+i%254)}},
			}
			if _, _, err := c.Add(s); err != nil {
				b.Fatal(err)
			}
		}
		c.RunRound(b.Context())
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		if got := calls.Load(); got != n {
			b.Fatalf("%d probes, want %d", got, n)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/target")
		c.Close()
		b.StartTimer()
	}
}

// BenchmarkPerfAddTargetStored: AddTarget throughput of a single node on the
// embedded store, each Add durable when it returns, 32 callers at once as
// pulse-bench registers a fleet: the figure a change of the write path must
// keep (ns/op is per target added).
func BenchmarkPerfAddTargetStored(b *testing.B) {
	store, err := boltstore.Open(b.TempDir(), time.Second)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	cfg := checker.Config{Store: store, Clock: fakeclock.New(time.Unix(1_700_000_000, 0))}
	cfg.NewProber = func(probe.Spec) (checker.Prober, error) {
		return perfProber{fail: new(atomic.Bool), calls: new(atomic.Int64)}, nil
	}
	c, err := checker.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	var next atomic.Int64
	b.SetParallelism(16) // 16 x GOMAXPROCS callers; 32 on two cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1)
			s := checker.Spec{Name: fmt.Sprintf("t%07d", i), Interval: time.Second, Timeout: time.Second, Rise: 2, Fall: 3,
				Probe: probe.Spec{TCP: &probe.TCPSpec{Address: "127.0.0.1:9"}}}
			if _, _, err := c.Add(s); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// countingStore is a boltstore that counts its commits.
type countingStore struct {
	*boltstore.Store
	commits atomic.Int64
}

func (s *countingStore) CommitStates(states []checker.StoredState, deleted []string, rev uint64) error {
	s.commits.Add(1)
	return s.Store.CommitStates(states, deleted, rev)
}

// BenchmarkPerfStoredTransition: one target's transition on a single node
// with the embedded store, from its probe result to its event published
// (so stored and flushed to disk), one at a time: what a transition's
// record costs on the way to a subscriber, and how many commits it takes.
func BenchmarkPerfStoredTransition(b *testing.B) {
	bs, err := boltstore.Open(b.TempDir(), time.Second)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bs.Close() })
	store := &countingStore{Store: bs}
	var fail atomic.Bool
	clock := fakeclock.New(time.Unix(1_700_000_000, 0))
	cfg := checker.Config{Store: store, Clock: clock}
	cfg.NewProber = func(probe.Spec) (checker.Prober, error) {
		return perfProber{fail: &fail, calls: new(atomic.Int64)}, nil
	}
	c, err := checker.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	if _, _, err := c.Add(checker.Spec{Name: "t", Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1, InitialState: checker.StateHealthy,
		Probe: probe.Spec{TCP: &probe.TCPSpec{Address: "127.0.0.1:9"}}}); err != nil {
		b.Fatal(err)
	}
	c.List("")
	before := store.commits.Load()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		fail.Store(i%2 == 0)
		clock.Advance(10 * time.Second) // six changes in the default flap window
		if trs := c.RunRound(b.Context()); len(trs) != 1 {
			b.Fatalf("%d transitions", len(trs))
		}
		c.List("")
	}
	b.ReportMetric(float64(store.commits.Load()-before)/float64(b.N), "commits/op")
}

// BenchmarkPerfGroupedTransition: one target of a group changes state (a
// passive outcome tips it, rise and fall 1), in groups of 1,000 and
// 100,000 targets: a group's decision costs what it decides, not the
// group's size.
func BenchmarkPerfGroupedTransition(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("group=%d", n), func(b *testing.B) {
			clock := fakeclock.New(time.Unix(1_700_000_000, 0))
			c, err := checker.New(checker.Config{Clock: clock, NewProber: func(probe.Spec) (checker.Prober, error) {
				return perfProber{fail: new(atomic.Bool), calls: new(atomic.Int64)}, nil
			}})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			specs := make([]checker.Spec, 0, checker.MaxAddMany)
			for i := range n {
				specs = append(specs, checker.Spec{Name: fmt.Sprintf("t%07d", i), Group: "g", Interval: time.Hour, Timeout: time.Second,
					Rise: 1, Fall: 1, InitialState: checker.StateHealthy, PassiveOutcomes: true,
					Probe: probe.Spec{TCP: &probe.TCPSpec{Address: "127.0.0.1:9"}}})
				if len(specs) == cap(specs) || i == n-1 {
					if _, err := c.AddMany(specs); err != nil {
						b.Fatal(err)
					}
					specs = specs[:0]
				}
			}
			pass := false
			for b.Loop() {
				clock.Advance(time.Second) // a token for the outcome
				if _, counted, err := c.ReportOutcome("t0000000", checker.Outcome{Pass: pass}); err != nil || !counted {
					b.Fatalf("outcome: counted %v, %v", counted, err)
				}
				pass = !pass
			}
			if st, _ := c.Status("t0000000"); st.Transitions == 0 {
				b.Fatal("the target never changed state")
			}
		})
	}
}
