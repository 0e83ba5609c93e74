package history

import "time"

// SLO is a group's availability against its objective, over the
// objective's window and its last hour.
type SLO struct {
	Objective float64
	Window    time.Duration
	// Availability is the share of the group's probes that passed over
	// Window; -1 when none was recorded.
	Availability float64
	// BudgetLeft is the share of the error budget (1 - Objective) that
	// Window has not spent: 1 when no probe failed, 0 when spent, below 0
	// when overspent. Zero when Availability is -1.
	BudgetLeft float64
	// BurnRate is how fast the last hour spent the budget: its share of
	// failed probes over the budget. 1 spends exactly the budget over
	// Window, 10 spends it ten times as fast; -1 when the last hour had no
	// probe.
	BurnRate float64
}

// GroupQuerier reads a group's history; a *Recorder is one.
type GroupQuerier interface {
	QueryGroup(group string, now time.Time, window, resolution time.Duration) (Summary, error)
}

// GroupSLO measures group against an availability objective over window
// (whole hours up to 30 days), as of now.
func GroupSLO(q GroupQuerier, group string, objective float64, window time.Duration, now time.Time) (SLO, error) {
	out := SLO{Objective: objective, Window: window, Availability: -1, BurnRate: -1}
	whole, err := q.QueryGroup(group, now, window, time.Hour)
	if err != nil {
		return out, err
	}
	hour, err := q.QueryGroup(group, now, time.Hour, time.Minute)
	if err != nil {
		return out, err
	}
	budget := 1 - objective
	if whole.Probes > 0 {
		out.Availability = whole.Availability
		out.BudgetLeft = 1 - (1-whole.Availability)/budget
	}
	if hour.Probes > 0 {
		out.BurnRate = (1 - hour.Availability) / budget
	}
	return out, nil
}
