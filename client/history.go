package client

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// HistoryQuery selects a history: exactly one of Target and Group, and a
// Window ending now (whole minutes up to 24h, whole hours up to 30 days).
type HistoryQuery struct {
	Target string
	Group  string
	Window time.Duration
	// Resolution is the step, time.Minute or time.Hour; zero means a
	// minute for windows up to 24 hours, an hour beyond.
	Resolution time.Duration
}

// History is what pulsed recorded of a target or a group over a window.
type History struct {
	// Target is empty for a group's history.
	Target     string
	Group      string
	Resolution time.Duration
	// Points are the window's steps, oldest first; the last holds now.
	Points           []HistoryPoint
	Probes, Failures uint64
	// Availability is the share of probes that passed, in [0, 1]; -1 when
	// none was recorded in the window.
	Availability float64
	// P50, P95 and P99 are latency percentiles over the window, as the
	// upper bound of a bucket; zero when no probe was recorded.
	P50, P95, P99 time.Duration
	// Mean is the mean latency over the window; zero when no probe was
	// recorded.
	Mean time.Duration
	// Events are the transitions within the window, oldest first.
	Events []Transition
	// Policies are the policy events within the window, oldest first: the
	// group's panics, the target's flapping and certificate warnings.
	Policies []HistoryPolicy
	// SLO is where a group stands against its availability objective; nil
	// for a target and a group without one.
	SLO *SLO
	// TimeAvailability is, for a group, the share of the window's time it
	// had at least its routable minimum of healthy targets (it was out of
	// panic); -1 for a target, or when no probe was recorded.
	TimeAvailability float64
}

// HistoryPolicy is a recorded policy event.
type HistoryPolicy struct {
	Time time.Time
	// Target is the target it is about; empty for a group's panic in the
	// group's history.
	Target string
	// Kind is the policy event's kind; 0 for a change of the target's
	// mode (Mode is the mode after it, Text says from what and why).
	Kind PolicyKind
	Mode Mode
	Text string
}

// SLO is a group's availability objective and where it stands.
type SLO struct {
	Objective float64
	Window    time.Duration
	// Availability is the share of the group's probes that passed over
	// Window; -1 when none was recorded.
	Availability float64
	// BudgetLeft is the share of the error budget (1 - Objective) Window
	// has not spent: 1 none spent, 0 all, below 0 overspent; meaningful
	// when Availability is not -1.
	BudgetLeft float64
	// BurnRate is the last hour's share of failed probes over the budget:
	// 1 spends exactly the budget over Window; -1 when the last hour had
	// no probe.
	BurnRate float64
}

// HistoryPoint is one step of a History; its percentiles are set at a
// resolution of an hour only.
type HistoryPoint struct {
	Start            time.Time
	Probes, Failures uint64
	P50, P95, P99    time.Duration
}

// History returns what pulsed recorded of q's target or group. An unknown
// target, a group with no history, or (with replicas) a target another
// replica probes is ErrNotFound, the last with a message naming it.
func (c *Client) History(ctx context.Context, q HistoryQuery) (History, error) {
	req := &pb.HistoryRequest{Target: q.Target, Group: q.Group, Window: durationpb.New(q.Window),
		Resolution: optDuration(q.Resolution)}
	resp, err := c.api.History(ctx, req)
	if err != nil {
		return History{}, c.wrap("History", err)
	}
	return historyFromProto(resp), nil
}

func historyFromProto(r *pb.HistoryResponse) History {
	h := History{
		Target: r.GetTarget(), Group: r.GetGroup(), Resolution: r.GetResolution().AsDuration(),
		Probes: r.GetProbes(), Failures: r.GetFailures(), Availability: -1,
		P50: r.GetLatencyP50().AsDuration(), P95: r.GetLatencyP95().AsDuration(), P99: r.GetLatencyP99().AsDuration(),
		Mean: r.GetLatencyMean().AsDuration(), TimeAvailability: -1,
	}
	if r.TimeAvailability != nil {
		h.TimeAvailability = r.GetTimeAvailability()
	}
	if r.Availability != nil {
		h.Availability = r.GetAvailability()
	}
	for _, p := range r.GetPoints() {
		h.Points = append(h.Points, HistoryPoint{Start: optTime(p.GetStart()), Probes: p.GetProbes(), Failures: p.GetFailures(),
			P50: p.GetLatencyP50().AsDuration(), P95: p.GetLatencyP95().AsDuration(), P99: p.GetLatencyP99().AsDuration()})
	}
	if s := r.GetSlo(); s != nil {
		h.SLO = &SLO{Objective: s.GetObjective(), Window: s.GetWindow().AsDuration(), Availability: -1, BurnRate: -1}
		if s.Availability != nil {
			h.SLO.Availability, h.SLO.BudgetLeft = s.GetAvailability(), s.GetErrorBudgetRemaining()
		}
		if s.BurnRate != nil {
			h.SLO.BurnRate = s.GetBurnRate()
		}
	}
	for _, e := range r.GetEvents() {
		if e.GetKind() != "" {
			h.Policies = append(h.Policies, HistoryPolicy{Time: optTime(e.GetTime()), Target: e.GetTarget(),
				Kind: PolicyKind(pb.PolicyEvent_Kind_value["KIND_"+e.GetKind()]), Mode: Mode(e.GetMode()), Text: e.GetText()})
			continue
		}
		h.Events = append(h.Events, Transition{Target: e.GetTarget(), Group: h.Group, From: State(e.GetFrom()), To: State(e.GetTo()),
			Time: optTime(e.GetTime()), Reason: e.GetReason(), Mode: Mode(e.GetMode()), Text: e.GetTarget() + ": " + State(e.GetFrom()).String() + " -> " + State(e.GetTo()).String(),
			Result: eventResult(e)})
	}
	return h
}

// eventResult is the failing result a recorded event keeps: its error.
func eventResult(e *pb.HistoryEvent) *Result {
	if e.GetError() == "" {
		return nil
	}
	return &Result{Error: e.GetError(), Time: optTime(e.GetTime())}
}
