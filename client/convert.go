package client

import (
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// This file converts between the client's plain types and the generated
// ones. Only it and the calls that send or receive messages see gen/.

func targetToProto(t Target) *pb.Target {
	out := &pb.Target{
		Name:            t.Name,
		Group:           t.Group,
		Interval:        optDuration(t.Interval),
		Timeout:         optDuration(t.Timeout),
		InitialState:    pb.State(sat32(int(t.InitialState))),
		Model:           pb.Model(sat32(int(t.Model))),
		MaxLatency:      optDuration(t.MaxLatency),
		FastInterval:    optDuration(t.FastInterval),
		DownInterval:    optDuration(t.DownInterval),
		FlapWindow:      optDuration(t.FlapWindow),
		FlapThreshold:   sat32(t.FlapThreshold),
		FlapStableFor:   optDuration(t.FlapStableFor),
		PassiveOutcomes: t.PassiveOutcomes,
		PassiveRate:     sat32(t.PassiveRate),
		SlowStart:       optDuration(t.SlowStart),

		RemoveAfterUnhealthy: optDuration(t.RemoveAfterUnhealthy),
		Vantages:             sat32(t.Vantages),
		Quorum:               sat32(t.Quorum),
	}
	if t.Rise != 0 {
		out.Rise = proto.Int32(sat32(t.Rise))
	}
	if t.Fall != 0 {
		out.Fall = proto.Int32(sat32(t.Fall))
	}
	probeToProto(t, out)
	return out
}

// errInvalid is a request the client refuses itself, before sending it:
// an *Error of method with code InvalidArgument, worded as pulsed words its
// own (the field path first), so that a caller handles both alike.
func errInvalid(method, format string, args ...any) error {
	return &Error{Code: codes.InvalidArgument, Message: fmt.Sprintf(format, args...), Method: method}
}

func targetFromProto(t *pb.Target) Target {
	out := Target{
		Name:            t.GetName(),
		Group:           t.GetGroup(),
		Interval:        t.GetInterval().AsDuration(),
		Timeout:         t.GetTimeout().AsDuration(),
		Rise:            int(t.GetRise()),
		Fall:            int(t.GetFall()),
		InitialState:    State(t.GetInitialState()),
		Model:           Model(t.GetModel()),
		MaxLatency:      t.GetMaxLatency().AsDuration(),
		FastInterval:    t.GetFastInterval().AsDuration(),
		DownInterval:    t.GetDownInterval().AsDuration(),
		FlapWindow:      t.GetFlapWindow().AsDuration(),
		FlapThreshold:   int(t.GetFlapThreshold()),
		FlapStableFor:   t.GetFlapStableFor().AsDuration(),
		PassiveOutcomes: t.GetPassiveOutcomes(),
		PassiveRate:     int(t.GetPassiveRate()),

		SlowStart:            t.GetSlowStart().AsDuration(),
		RemoveAfterUnhealthy: t.GetRemoveAfterUnhealthy().AsDuration(),
		Vantages:             int(t.GetVantages()),
		Quorum:               int(t.GetQuorum()),
	}
	probeFromProto(t, &out)
	return out
}

func statusFromProto(st *pb.TargetStatus) Status {
	return Status{
		Target:              targetFromProto(st.GetSpec()),
		State:               State(st.GetState()),
		Routable:            st.GetRoutable(),
		PassStreak:          int(st.GetPassStreak()),
		FailStreak:          int(st.GetFailStreak()),
		LastResult:          resultFromProto(st.GetLastResult()),
		LastTransition:      optTime(st.GetLastTransitionTime()),
		CarriedOver:         st.GetCarriedOver(),
		Source:              st.GetSource(),
		Verdict:             State(st.GetVerdict()),
		PanicHeld:           st.GetPanicHeld(),
		Flapping:            st.GetFlapping(),
		TransitionsInWindow: int(st.GetTransitionsInWindow()),
		ProbeInterval:       st.GetProbeInterval().AsDuration(),
		NextProbe:           optTime(st.GetNextProbeTime()),
		ActiveResults:       st.GetActiveResults(),
		PassiveResults:      st.GetPassiveResults(),
		PassiveRateLimited:  st.GetPassiveRateLimited(),
		IgnoredTimeouts:     st.GetIgnoredTimeouts(),
		Quarantined:         st.GetQuarantined(),
		Mode:                Mode(st.GetMode()),
		ModeReason:          st.GetModeReason(),
		ModeSince:           optTime(st.GetModeSince()),
		ModeUntil:           optTime(st.GetModeUntil()),
		RemoveTime:          optTime(st.GetRemoveTime()),
		SlowStartEnd:        optTime(st.GetSlowStartEnd()),
		UnhealthySince:      optTime(st.GetUnhealthySince()),
		Warnings:            st.GetWarnings(),
		CertExpiryWarning:   st.GetCertExpiryWarning(),
		CertNotAfter:        optTime(st.GetCertNotAfter()),
		Vantages:            verdictsFromProto(st.GetVantages()),
		Outlier:             outlierStateFromProto(st.GetOutlier()),
		Owner:               st.GetOwner(),
	}
}

func outlierStateFromProto(o *pb.OutlierState) *OutlierState {
	if o == nil {
		return nil
	}
	return &OutlierState{Ejected: o.GetEjected(), Reason: o.GetReason(), Since: optTime(o.GetSince()),
		Until: optTime(o.GetUntil()), Ejections: int(o.GetEjections())}
}

func outlierPolicyToProto(p OutlierPolicy) *pb.OutlierPolicy {
	if p == (OutlierPolicy{}) {
		return nil
	}
	return &pb.OutlierPolicy{
		Interval: optDuration(p.Interval), Samples: sat32(p.Samples),
		LatencyFactor: p.LatencyFactor, LatencyMinDelta: optDuration(p.LatencyMinDelta), Consecutive: sat32(p.Consecutive),
		SuccessRateStdevFactor: p.SuccessRateStdevFactor, SuccessRateRequestVolume: sat32(p.SuccessRateRequestVolume),
		FailurePercentage: sat32(p.FailurePercentage), FailurePercentageRequestVolume: sat32(p.FailurePercentageRequestVolume),
		MinMembers: sat32(p.MinMembers), Enforce: p.Enforce, MaxEjectionPercent: sat32(p.MaxEjectionPercent),
		BaseEjectionTime: optDuration(p.BaseEjectionTime),
	}
}

// sat32 narrows a caller's n for the wire, saturating: every int32 field
// pulsed reads is bounded well inside int32, so a value past int32 reaches
// it past the field's bound and is refused with ErrInvalidArgument, naming
// the field and the bound, rather than wrapped into range (1<<32+3 read as
// 3). The conversions send every int of a caller's through it.
func sat32(n int) int32 {
	return int32(max(min(n, math.MaxInt32), math.MinInt32))
}

func outlierPolicyFromProto(p *pb.OutlierPolicy) OutlierPolicy {
	return OutlierPolicy{
		Interval: p.GetInterval().AsDuration(), Samples: int(p.GetSamples()),
		LatencyFactor: p.GetLatencyFactor(), LatencyMinDelta: p.GetLatencyMinDelta().AsDuration(), Consecutive: int(p.GetConsecutive()),
		SuccessRateStdevFactor: p.GetSuccessRateStdevFactor(), SuccessRateRequestVolume: int(p.GetSuccessRateRequestVolume()),
		FailurePercentage: int(p.GetFailurePercentage()), FailurePercentageRequestVolume: int(p.GetFailurePercentageRequestVolume()),
		MinMembers: int(p.GetMinMembers()), Enforce: p.GetEnforce(), MaxEjectionPercent: int(p.GetMaxEjectionPercent()),
		BaseEjectionTime: p.GetBaseEjectionTime().AsDuration(),
	}
}

func verdictsFromProto(vs []*pb.VantageVerdict) []VantageVerdict {
	if len(vs) == 0 {
		return nil
	}
	out := make([]VantageVerdict, len(vs))
	for i, v := range vs {
		out[i] = VantageVerdict{Member: v.GetMember(), Label: v.GetLabel(), State: State(v.GetState()), Error: v.GetError(), Time: optTime(v.GetTime())}
	}
	return out
}

func resultFromProto(r *pb.ProbeResult) *Result {
	if r == nil {
		return nil
	}
	return &Result{
		Pass:    r.GetPass(),
		Latency: r.GetLatency().AsDuration(),
		Error:   r.GetError(),
		Time:    optTime(r.GetTime()),
		Passive: r.GetPassive(),
		Ignored: r.GetIgnored(),
	}
}

func probeNowResultFromProto(r *pb.ProbeNowResult) ProbeNowResult {
	return ProbeNowResult{Name: r.GetName(), Result: resultFromProto(r.GetResult()), Skipped: r.GetSkipped(), State: State(r.GetState())}
}

func groupFromProto(g *pb.GroupStatus) GroupStatus {
	return GroupStatus{
		Group:                g.GetGroup(),
		Policy:               groupPolicyFromProto(g.GetPolicy()),
		MaxUnhealthyFraction: g.GetMaxUnhealthyFraction(),
		Targets:              int(g.GetTargets()),
		Unhealthy:            int(g.GetUnhealthy()),
		MaxUnhealthy:         int(g.GetMaxUnhealthy()),
		Panic:                g.GetPanic(),
		Held:                 g.GetHeld(),
	}
}

func groupPolicyToProto(p GroupPolicy) *pb.GroupPolicy {
	out := &pb.GroupPolicy{SlowStart: optDuration(p.SlowStart), RemoveAfterUnhealthy: optDuration(p.RemoveAfterUnhealthy)}
	if p.MaxUnhealthyFraction != 0 {
		out.MaxUnhealthyFraction = proto.Float64(p.MaxUnhealthyFraction)
	}
	if p.Objective != 0 {
		out.AvailabilityObjective = proto.Float64(p.Objective)
	}
	out.ObjectiveWindow = optDuration(p.ObjectiveWindow)
	out.Vantages, out.Quorum = sat32(p.Vantages), sat32(p.Quorum)
	out.Outlier = outlierPolicyToProto(p.Outlier)
	return out
}

func groupPolicyFromProto(p *pb.GroupPolicy) GroupPolicy {
	return GroupPolicy{
		MaxUnhealthyFraction: p.GetMaxUnhealthyFraction(),
		SlowStart:            p.GetSlowStart().AsDuration(),
		RemoveAfterUnhealthy: p.GetRemoveAfterUnhealthy().AsDuration(),
		Objective:            p.GetAvailabilityObjective(),
		ObjectiveWindow:      p.GetObjectiveWindow().AsDuration(),
		Vantages:             int(p.GetVantages()),
		Quorum:               int(p.GetQuorum()),
		Outlier:              outlierPolicyFromProto(p.GetOutlier()),
	}
}

func checkerFromProto(c *pb.CheckerStatus) CheckerStatus {
	return CheckerStatus{
		Degraded:        c.GetDegraded(),
		DegradedSince:   optTime(c.GetDegradedSince()),
		Reason:          c.GetReason(),
		Lag:             c.GetLag().AsDuration(),
		Waiting:         int(c.GetWaitingProbes()),
		InFlight:        int(c.GetInFlightProbes()),
		MaxConcurrent:   int(c.GetMaxConcurrentProbes()),
		IgnoredTimeouts: c.GetIgnoredTimeouts(),
		RegistryError:   c.GetRegistryError(),
		Replica:         c.GetReplica(),
		Replicas:        c.GetReplicas(),

		DegradedReplicas: c.GetDegradedReplicas(),
	}
}

func transitionFromProto(tr *pb.Transition) Transition {
	return Transition{
		Target: tr.GetTarget(),
		Group:  tr.GetGroup(),
		From:   State(tr.GetFrom()),
		To:     State(tr.GetTo()),
		Time:   optTime(tr.GetTime()),
		Result: resultFromProto(tr.GetResult()),
		Text:   tr.GetText(),
		Reason: tr.GetReason(),
		Mode:   Mode(tr.GetMode()),

		SlowStartEnd: optTime(tr.GetSlowStartEnd()),
		Vantages:     verdictsFromProto(tr.GetVantages()),
	}
}

func policyFromProto(p *pb.PolicyEvent) PolicyEvent {
	return PolicyEvent{
		Kind:   PolicyKind(p.GetKind()),
		Group:  p.GetGroup(),
		Target: p.GetTarget(),
		Time:   optTime(p.GetTime()),
		Text:   p.GetText(),
		Held:   p.GetHeld(),

		Replica:  p.GetReplica(),
		Source:   p.GetSource(),
		SDConfig: p.GetSdConfig(),
		Error:    p.GetError(),
		Vantage:  p.GetVantage(),
		Disagree: int(p.GetDisagree()),
		Judged:   int(p.GetJudged()),
		Outlier:  outlierStateFromProto(p.GetOutlier()),
	}
}

func discoveryFromProto(g *pb.DiscoveryGroup) DiscoveryGroup {
	out := DiscoveryGroup{
		Name:       g.GetName(),
		Source:     g.GetSource(),
		Targets:    int(g.GetTargets()),
		LastApply:  optTime(g.GetLastApply()),
		LastError:  g.GetLastError(),
		ErrorSince: optTime(g.GetErrorSince()),
		Leader:     g.GetLeader(),
	}
	for _, s := range g.GetSources() {
		out.Sources = append(out.Sources, DiscoverySource{
			Name:        s.GetName(),
			Detail:      s.GetDetail(),
			LastRefresh: optTime(s.GetLastRefresh()),
			Targets:     int(s.GetTargets()),
			LastError:   s.GetLastError(),
			ErrorSince:  optTime(s.GetErrorSince()),
		})
	}
	return out
}

func optDuration(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

func optTime(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}
