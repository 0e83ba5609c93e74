package web

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsehealth/pulse/checker"
)

// DefaultRecentResults is how many results per target an Observer keeps
// when ObserverOptions.RecentResults is 0.
const DefaultRecentResults = 20

// ObserverOptions configures NewObserver. Every field is optional.
type ObserverOptions struct {
	// Logger receives one debug line per failed probe ("probe failed"). Only
	// debug: a failing fleet must not flood the log, and transitions are
	// logged by the checker at info. If nil, nothing is logged.
	Logger *slog.Logger
	// RecentResults is how many results per target are kept for the status
	// page's strip. If 0, DefaultRecentResults; KeepRecent changes it, and
	// can turn keeping off.
	RecentResults int
}

// Observer is the checker.Observer of pulsed's HTTP listener. It counts
// probes and transitions for Prometheus (it is a prometheus.Collector of
// pulse_probes_total, pulse_probe_duration_seconds and
// pulse_transitions_total), keeps each target's last results for the status
// page, and logs failed probes at debug.
//
// Its methods are safe for concurrent use and never block on anything but
// its own short critical sections, as checker.Observer requires. Create it
// with NewObserver.
//
// The recent results are kept by target name. A removal drops the name's
// results at once (ObserveRemoval: it is a checker.RemovalObserver), so a
// target added again under that name starts afresh; the sweep of every
// /api/targets request and every scrape of a Collector given this Observer
// drops any a probe in flight at the removal brought back.
type Observer struct {
	logger      *slog.Logger
	keep        atomic.Int64 // results kept per target; 0: none
	probes      *prometheus.CounterVec
	durations   *prometheus.HistogramVec
	transitions *prometheus.CounterVec
	// series holds the probes' series of each kind in seriesKinds, so that
	// a probe finds its own without hashing its labels.
	series [len(seriesKinds)][2]probeSeries // by kind, then pass (0) or fail (1)

	mu     sync.Mutex // protects recent, seq and moved
	recent map[string]*ring
	seq    uint64 // counts results recorded and members changes; each ring remembers its last
	moved  uint64 // seq at the last members change: every row's owner may have moved
}

// ring holds a target's newest results, oldest first once unrolled.
type ring struct {
	buf   []checker.Result
	start int
	n     int
	seq   uint64 // Observer.seq when the newest result was recorded
}

func (r *ring) push(res checker.Result) {
	if r.n < len(r.buf) {
		r.buf[(r.start+r.n)%len(r.buf)] = res
		r.n++
		return
	}
	r.buf[r.start] = res
	r.start = (r.start + 1) % len(r.buf)
}

func (r *ring) results() []checker.Result {
	out := make([]checker.Result, r.n)
	for i := range r.n {
		out[i] = r.buf[(r.start+i)%len(r.buf)]
	}
	return out
}

// seriesKinds are the probe kinds whose series exist from the first
// scrape, so that rate() works from the first failure on; a DNS probe's
// appear with the first.
var seriesKinds = [...]string{"http", "tcp", "grpc"}

// probeSeries are a probe kind's and result's counter and histogram.
type probeSeries struct {
	count    prometheus.Counter
	duration prometheus.Observer
}

// probeBuckets spans a fast loopback answer (1ms) to the longest sensible
// timeout (10s).
var probeBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// NewObserver returns an Observer with zero counts and no results.
func NewObserver(opts ObserverOptions) *Observer {
	o := &Observer{
		logger: opts.Logger,
		recent: make(map[string]*ring),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_probes_total",
			Help: "Probes that ran to completion, by probe kind (http, tcp, grpc, dns) and result (pass, fail).",
		}, []string{"kind", "result"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pulse_probe_duration_seconds",
			Help:    "How long probes took, by probe kind and result.",
			Buckets: probeBuckets,
		}, []string{"kind", "result"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pulse_transitions_total",
			Help: "Target state transitions, by group and the states before and after.",
		}, []string{"group", "from", "to"}),
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	keep := opts.RecentResults
	if keep <= 0 {
		keep = DefaultRecentResults
	}
	o.keep.Store(int64(keep))
	for i, kind := range seriesKinds {
		for j, res := range []string{"pass", "fail"} {
			o.series[i][j] = probeSeries{o.probes.WithLabelValues(kind, res), o.durations.WithLabelValues(kind, res)}
		}
	}
	return o
}

var (
	_ checker.RemovalObserver = (*Observer)(nil)
	_ checker.MembersObserver = (*Observer)(nil)
)

// ObserveMembers notes that the live replicas changed: the targets' owners
// may have moved, which the feeds' next "results" events bring to every
// row they carry (see changedSince).
func (o *Observer) ObserveMembers() {
	o.mu.Lock()
	o.seq++
	o.moved = o.seq
	o.mu.Unlock()
}

// ObserveRemoval drops the removed target's recent results.
func (o *Observer) ObserveRemoval(spec checker.Spec) {
	o.mu.Lock()
	delete(o.recent, spec.Name)
	o.mu.Unlock()
}

// ObserveProbe counts r, keeps it in the target's recent results and logs it
// at debug if it failed.
func (o *Observer) ObserveProbe(spec checker.Spec, r checker.Result) {
	kind, result, j := spec.Probe.Kind(), "pass", 0
	if !r.Pass {
		result, j = "fail", 1
	}
	var ps probeSeries
	if i := slices.Index(seriesKinds[:], kind); i >= 0 {
		ps = o.series[i][j]
	} else {
		ps = probeSeries{o.probes.WithLabelValues(kind, result), o.durations.WithLabelValues(kind, result)}
	}
	ps.count.Inc()
	ps.duration.Observe(r.Latency.Seconds())

	if o.keep.Load() > 0 {
		o.mu.Lock()
		// Read again under mu: KeepRecent(0) may have cleared meanwhile.
		if keep := int(o.keep.Load()); keep > 0 {
			rg := o.recent[spec.Name]
			if rg == nil || len(rg.buf) != keep {
				rg = &ring{buf: make([]checker.Result, keep)}
				o.recent[spec.Name] = rg
			}
			rg.push(r)
			o.seq++
			rg.seq = o.seq
		}
		o.mu.Unlock()
	}

	if !r.Pass && o.logger.Enabled(context.Background(), slog.LevelDebug) {
		o.logger.Debug("probe failed", "target", spec.Name, "group", spec.Group, "kind", kind,
			"error", r.Err, "latency", r.Latency.String())
	}
}

// KeepRecent sets how many results per target the Observer keeps from now
// on; n <= 0 keeps none and drops those kept, for a process that serves no
// status page (each target's 20 results are about 1.5 KB). Metrics and
// logging are unaffected. It is safe to call at any time.
func (o *Observer) KeepRecent(n int) {
	o.keep.Store(int64(max(n, 0)))
	if n <= 0 {
		o.mu.Lock()
		clear(o.recent)
		o.mu.Unlock()
	}
}

// ObserveTransition counts tr.
func (o *Observer) ObserveTransition(tr checker.Transition) {
	o.transitions.WithLabelValues(tr.Group, tr.From.String(), tr.To.String()).Inc()
}

// Recent returns the target's last results, oldest first; nil if it has
// none.
func (o *Observer) Recent(name string) []checker.Result {
	o.mu.Lock()
	defer o.mu.Unlock()
	if rg := o.recent[name]; rg != nil {
		return rg.results()
	}
	return nil
}

// seqNow returns the count of results recorded so far.
func (o *Observer) seqNow() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.seq
}

// changedSince returns which of names got a result after seq, every one
// of them when the live replicas changed since (their owners may have
// moved), and the current seq to ask from next time.
func (o *Observer) changedSince(seq uint64, names []string) ([]string, uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.moved > seq {
		return slices.Clone(names), o.seq
	}
	var out []string
	for _, n := range names {
		if rg := o.recent[n]; rg != nil && rg.seq > seq {
			out = append(out, n)
		}
	}
	return out, o.seq
}

// sweep drops the results of targets for which live returns false, except
// those recorded after seq: a caller takes seq (seqNow) before it lists the
// live targets, so a target added since keeps its results.
func (o *Observer) sweep(seq uint64, live func(name string) bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for name, rg := range o.recent {
		if rg.seq <= seq && !live(name) {
			delete(o.recent, name)
		}
	}
}

// Describe implements prometheus.Collector.
func (o *Observer) Describe(ch chan<- *prometheus.Desc) {
	o.probes.Describe(ch)
	o.durations.Describe(ch)
	o.transitions.Describe(ch)
}

// Collect implements prometheus.Collector.
func (o *Observer) Collect(ch chan<- prometheus.Metric) {
	o.probes.Collect(ch)
	o.durations.Collect(ch)
	o.transitions.Collect(ch)
}
