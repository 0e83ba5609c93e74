package web

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/probe"
)

// Collector is a prometheus.Collector of the checker's current state, read
// at scrape time: targets by group and state, subscribers, each group's
// panic flag and its held, flapping and outlier targets, the checker's degraded flag and schedule tick, its reprobes, the vantages as it judges them, and (unless dropped) each
// target's up gauge, last latency, certificate expiry and mode. Its methods
// are safe for concurrent use. Create it with NewCollector.
type Collector struct {
	c         *checker.Checker
	perTarget bool
	recent    *Observer // swept at scrape time; may be nil

	up       *prometheus.Desc
	latency  *prometheus.Desc
	certLeft *prometheus.Desc
	mode     *prometheus.Desc
	targets  *prometheus.Desc
	watchers *prometheus.Desc
	panic    *prometheus.Desc
	held     *prometheus.Desc
	flapping *prometheus.Desc
	outliers *prometheus.Desc
	degraded *prometheus.Desc
	tick     *prometheus.Desc
	registry *prometheus.Desc
	replicas *prometheus.Desc
	reprobes *prometheus.Desc
	skips    *prometheus.Desc

	vSuspect  *prometheus.Desc
	vDisagree *prometheus.Desc
	vJudged   *prometheus.Desc
}

// states lists every state a target can be in, so pulse_targets shows a
// zero rather than no series for an empty state.
var states = []checker.State{checker.StateHealthy, checker.StateSuspect, checker.StateUnhealthy}

// NewCollector returns a Collector of c. perTarget false drops the
// per-target series, pulse_target_up, pulse_target_last_latency_seconds,
// pulse_target_cert_expiry_seconds and pulse_target_mode (two series a
// target, and one more for a TLS target or one not active), for very
// large fleets. recent, if not nil, is the Observer whose
// recent results of removed targets are dropped at each scrape.
func NewCollector(c *checker.Checker, perTarget bool, recent *Observer) *Collector {
	return &Collector{
		c:         c,
		perTarget: perTarget,
		recent:    recent,
		up: prometheus.NewDesc("pulse_target_up",
			"1 if the target is routable (healthy, or suspect in the three_state model), 0 if not.",
			[]string{"target", "group"}, nil),
		latency: prometheus.NewDesc("pulse_target_last_latency_seconds",
			"How long the target's last probe took; absent before its first result.",
			[]string{"target", "group"}, nil),
		certLeft: prometheus.NewDesc("pulse_target_cert_expiry_seconds",
			"Seconds until the first-expiring server certificate the target's last probe saw expires (negative once expired); only for TLS probes with cert_expiry_warn or cert_expiry_fail.",
			[]string{"target", "group"}, nil),
		mode: prometheus.NewDesc("pulse_target_mode",
			"1 for a target an operator took out of traffic, labelled with its mode: draining or maintenance; absent for a target in mode active, routed by its health.",
			[]string{"target", "group", "mode"}, nil),
		targets: prometheus.NewDesc("pulse_targets",
			"Registered targets by group and state.",
			[]string{"group", "state"}, nil),
		watchers: prometheus.NewDesc("pulse_watchers",
			"Live event-stream subscribers: WatchTransitions streams and status-page event feeds.",
			nil, nil),
		panic: prometheus.NewDesc("pulse_group_panic",
			"1 while the group's panic threshold holds at least one of its targets routable, 0 if not.",
			[]string{"group"}, nil),
		held: prometheus.NewDesc("pulse_group_held_targets",
			"Targets of the group its panic threshold holds routable though their results say unhealthy.",
			[]string{"group"}, nil),
		flapping: prometheus.NewDesc("pulse_group_flapping_targets",
			"Targets of the group flap damping holds unhealthy.",
			[]string{"group"}, nil),
		outliers: prometheus.NewDesc("pulse_outlier_targets",
			"Targets of the group its outlier detection caught, by state: degraded (routable at a lowered weight) or ejected (not routable).",
			[]string{"group", "state"}, nil),
		degraded: prometheus.NewDesc("pulse_checker_degraded",
			"1 while the checker is overloaded (degraded), 0 if not.",
			nil, nil),
		tick: prometheus.NewDesc("pulse_schedule_tick_seconds",
			"The schedule tick in force: probes due within one tick start together at its end (adaptive between -schedule-tick and -schedule-tick-max).",
			nil, nil),
		registry: prometheus.NewDesc("pulse_registry_error",
			"1 while pulsed cannot store changes in its registry (the data dir, or etcd with -registry etcd), 0 if it can.",
			nil, nil),
		replicas: prometheus.NewDesc("pulse_replicas",
			"Live pulsed replicas this one sees with -registry etcd (0 with the embedded registry).",
			nil, nil),
		reprobes: prometheus.NewDesc("pulse_reprobes_total",
			"Lost connections to targets acted on (a probe brought forward, or the probe in flight made to follow the fast interval if it fails), by reason: closed (FIN), reset (RST), channel (a gRPC channel left READY).",
			[]string{"reason"}, nil),
		skips: prometheus.NewDesc("pulse_reprobe_skips_total",
			"Lost connections that brought no probe forward, their target having been reprobed less than one interval before.",
			nil, nil),
		vSuspect: prometheus.NewDesc("pulse_vantage_suspect",
			"1 while the vantage is suspect (it says unhealthy of targets the other vantages see healthy) and its verdicts are left out of every quorum, 0 if not; with -registry etcd, for the vantages that probe targets with others.",
			[]string{"replica", "vantage"}, nil),
		vDisagree: prometheus.NewDesc("pulse_vantage_disagree_targets",
			"Targets the vantage says unhealthy (or suspect) while most of their other vantages say healthy.",
			[]string{"replica", "vantage"}, nil),
		vJudged: prometheus.NewDesc("pulse_vantage_judged_targets",
			"Targets on which the vantage and another vantage both have a verdict: those it is judged on.",
			[]string{"replica", "vantage"}, nil),
	}
}

// reprobeReasons are the reasons pulse_reprobes_total always shows, at 0
// before the first, so that rate() works from the first reprobe on.
var reprobeReasons = []string{probe.LostClosed, probe.LostReset, probe.LostChannel}

// Describe implements prometheus.Collector.
func (m *Collector) Describe(ch chan<- *prometheus.Desc) {
	if m.perTarget {
		ch <- m.up
		ch <- m.latency
		ch <- m.certLeft
		ch <- m.mode
	}
	ch <- m.targets
	ch <- m.watchers
	ch <- m.panic
	ch <- m.held
	ch <- m.flapping
	ch <- m.outliers
	ch <- m.degraded
	ch <- m.tick
	ch <- m.registry
	ch <- m.replicas
	ch <- m.reprobes
	ch <- m.skips
	ch <- m.vSuspect
	ch <- m.vDisagree
	ch <- m.vJudged
}

// Collect implements prometheus.Collector.
func (m *Collector) Collect(ch chan<- prometheus.Metric) {
	var seq uint64
	if m.recent != nil {
		seq = m.recent.seqNow()
	}
	list, _ := m.c.ListNow("") // a scrape must answer, pulse_registry_error included, while the store fails
	byGroup := map[string]map[checker.State]int{}
	flapping := map[string]int{}
	degraded, ejected := map[string]int{}, map[string]int{}
	for _, st := range list {
		if st.Flapping {
			flapping[st.Spec.Group]++
		}
		if o := st.Outlier; o != nil && o.Ejected {
			ejected[st.Spec.Group]++
		} else if o != nil {
			degraded[st.Spec.Group]++
		}
		g := byGroup[st.Spec.Group]
		if g == nil {
			g = map[checker.State]int{}
			byGroup[st.Spec.Group] = g
		}
		g[st.State]++
		if !m.perTarget {
			continue
		}
		ch <- prometheus.MustNewConstMetric(m.up, prometheus.GaugeValue, flag(st.Routable), st.Spec.Name, st.Spec.Group)
		if st.LastResult != nil {
			ch <- prometheus.MustNewConstMetric(m.latency, prometheus.GaugeValue, st.LastResult.Latency.Seconds(), st.Spec.Name, st.Spec.Group)
		}
		if !st.CertNotAfter.IsZero() {
			ch <- prometheus.MustNewConstMetric(m.certLeft, prometheus.GaugeValue, time.Until(st.CertNotAfter).Seconds(), st.Spec.Name, st.Spec.Group)
		}
		// Only the targets out of traffic have a series: one per mode for
		// each target would add three series a target, at 100,000 targets
		// 300,000, to tell apart the few that are.
		if mode := st.Spec.Admin().Mode; mode != checker.ModeActive {
			ch <- prometheus.MustNewConstMetric(m.mode, prometheus.GaugeValue, 1, st.Spec.Name, st.Spec.Group, mode.String())
		}
	}
	for group, counts := range byGroup {
		for _, s := range states {
			ch <- prometheus.MustNewConstMetric(m.targets, prometheus.GaugeValue, float64(counts[s]), group, s.String())
		}
	}
	ch <- prometheus.MustNewConstMetric(m.watchers, prometheus.GaugeValue, float64(m.c.Watchers()))
	for _, g := range m.c.Groups("") {
		ch <- prometheus.MustNewConstMetric(m.panic, prometheus.GaugeValue, flag(g.Panic), g.Group)
		ch <- prometheus.MustNewConstMetric(m.held, prometheus.GaugeValue, float64(len(g.Held)), g.Group)
		ch <- prometheus.MustNewConstMetric(m.flapping, prometheus.GaugeValue, float64(flapping[g.Group]), g.Group)
		ch <- prometheus.MustNewConstMetric(m.outliers, prometheus.GaugeValue, float64(degraded[g.Group]), g.Group, "degraded")
		ch <- prometheus.MustNewConstMetric(m.outliers, prometheus.GaugeValue, float64(ejected[g.Group]), g.Group, "ejected")
	}
	ov := m.c.Overload()
	ch <- prometheus.MustNewConstMetric(m.degraded, prometheus.GaugeValue, flag(ov.Degraded))
	ch <- prometheus.MustNewConstMetric(m.tick, prometheus.GaugeValue, ov.ScheduleTick.Seconds())
	ch <- prometheus.MustNewConstMetric(m.registry, prometheus.GaugeValue, flag(m.c.StoreErr() != nil))
	_, members := m.c.Replica()
	ch <- prometheus.MustNewConstMetric(m.replicas, prometheus.GaugeValue, float64(len(members)))
	rp := m.c.Reprobes()
	for _, reason := range reprobeReasons {
		if _, ok := rp.Reprobes[reason]; !ok {
			ch <- prometheus.MustNewConstMetric(m.reprobes, prometheus.CounterValue, 0, reason)
		}
	}
	for reason, n := range rp.Reprobes {
		ch <- prometheus.MustNewConstMetric(m.reprobes, prometheus.CounterValue, float64(n), reason)
	}
	ch <- prometheus.MustNewConstMetric(m.skips, prometheus.CounterValue, float64(rp.Skipped))
	for _, v := range m.c.Vantages() {
		ch <- prometheus.MustNewConstMetric(m.vSuspect, prometheus.GaugeValue, flag(v.Suspect), v.Member, v.Label)
		ch <- prometheus.MustNewConstMetric(m.vDisagree, prometheus.GaugeValue, float64(v.Disagree), v.Member, v.Label)
		ch <- prometheus.MustNewConstMetric(m.vJudged, prometheus.GaugeValue, float64(v.Judged), v.Member, v.Label)
	}
	if m.recent != nil {
		m.recent.sweep(seq, liveSet(list))
	}
}

func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// liveSet returns a membership test for the names in list.
func liveSet(list []checker.Status) func(string) bool {
	names := make(map[string]struct{}, len(list))
	for _, st := range list {
		names[st.Spec.Name] = struct{}{}
	}
	return func(n string) bool { _, ok := names[n]; return ok }
}
