package web

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/history"
)

// sloFresh is how long a group's measure against its objective is reused:
// it reads up to 30 days of the group's history, too much for every page
// refresh or scrape.
const sloFresh = 30 * time.Second

// SLOs measures groups against their availability objectives
// (GroupPolicy.Objective) from the history, for the status page and as
// metrics: it is a prometheus.Collector. Safe for concurrent use.
type SLOs struct {
	c   *checker.Checker
	h   history.GroupQuerier
	now func() time.Time

	mu    sync.Mutex // protects cache
	cache map[string]sloEntry

	budget, burn, objective *prometheus.Desc
}

type sloEntry struct {
	at  time.Time
	pol checker.GroupPolicy
	slo history.SLO
	ok  bool
}

// NewSLOs returns the measures of c's groups from h.
func NewSLOs(c *checker.Checker, h history.GroupQuerier) *SLOs {
	return &SLOs{c: c, h: h, now: time.Now, cache: map[string]sloEntry{},
		budget: prometheus.NewDesc("pulse_group_error_budget_remaining",
			"Share of a group's error budget (1 - its availability objective) its objective window has not spent: 1 none spent, 0 all, below 0 overspent.",
			[]string{"group"}, nil),
		burn: prometheus.NewDesc("pulse_group_error_budget_burn_rate",
			"How fast a group's last hour spent its error budget: its share of failed probes over the budget; 1 spends exactly the budget over the objective window.",
			[]string{"group"}, nil),
		objective: prometheus.NewDesc("pulse_group_availability_objective",
			"A group's availability objective: the share of its probes that should pass over its window.",
			[]string{"group", "window"}, nil),
	}
}

// Group returns where g stands against its objective; false when it has
// none, or no history.
func (s *SLOs) Group(g checker.GroupStatus) (history.SLO, bool) {
	if g.Policy.Objective == 0 {
		return history.SLO{}, false
	}
	now := s.now()
	s.mu.Lock()
	e, hit := s.cache[g.Group]
	s.mu.Unlock()
	if hit && e.pol == g.Policy && now.Sub(e.at) < sloFresh {
		return e.slo, e.ok
	}
	slo, err := history.GroupSLO(s.h, g.Group, g.Policy.Objective, g.Policy.ObjectiveWindow, now)
	e = sloEntry{at: now, pol: g.Policy, slo: slo, ok: err == nil}
	s.mu.Lock()
	s.cache[g.Group] = e
	s.mu.Unlock()
	return slo, e.ok
}

// Describe implements prometheus.Collector.
func (s *SLOs) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.budget
	ch <- s.burn
	ch <- s.objective
}

// Collect implements prometheus.Collector: a series for each group with an
// objective; the budget and the burn rate only once probes were recorded.
func (s *SLOs) Collect(ch chan<- prometheus.Metric) {
	seen := map[string]bool{}
	defer func() { // forget the groups gone, or without an objective now
		s.mu.Lock()
		defer s.mu.Unlock()
		for name := range s.cache {
			if !seen[name] {
				delete(s.cache, name)
			}
		}
	}()
	for _, g := range s.c.Groups("") {
		if g.Policy.Objective == 0 {
			continue
		}
		seen[g.Group] = true
		ch <- prometheus.MustNewConstMetric(s.objective, prometheus.GaugeValue, g.Policy.Objective, g.Group, g.Policy.ObjectiveWindow.String())
		slo, ok := s.Group(g)
		if !ok {
			continue
		}
		if slo.Availability >= 0 {
			ch <- prometheus.MustNewConstMetric(s.budget, prometheus.GaugeValue, slo.BudgetLeft, g.Group)
		}
		if slo.BurnRate >= 0 {
			ch <- prometheus.MustNewConstMetric(s.burn, prometheus.GaugeValue, slo.BurnRate, g.Group)
		}
	}
}
