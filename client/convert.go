package client

import (
	"time"

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
		InitialState:    pb.State(t.InitialState),
		Model:           pb.Model(t.Model),
		MaxLatency:      optDuration(t.MaxLatency),
		FastInterval:    optDuration(t.FastInterval),
		DownInterval:    optDuration(t.DownInterval),
		FlapWindow:      optDuration(t.FlapWindow),
		FlapThreshold:   int32(t.FlapThreshold),
		FlapStableFor:   optDuration(t.FlapStableFor),
		PassiveOutcomes: t.PassiveOutcomes,
		PassiveRate:     int32(t.PassiveRate),
	}
	if t.Rise != 0 {
		out.Rise = proto.Int32(int32(t.Rise))
	}
	if t.Fall != 0 {
		out.Fall = proto.Int32(int32(t.Fall))
	}
	switch {
	case t.HTTP != nil:
		h := &pb.HttpProbe{Url: t.HTTP.URL, Method: t.HTTP.Method, Headers: t.HTTP.Headers}
		for _, c := range t.HTTP.ExpectedStatus {
			h.ExpectedStatus = append(h.ExpectedStatus, int32(c))
		}
		out.Probe = &pb.Target_Http{Http: h}
	case t.TCP != nil:
		out.Probe = &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: t.TCP.Address}}
	case t.GRPC != nil:
		out.Probe = &pb.Target_Grpc{Grpc: &pb.GrpcProbe{Address: t.GRPC.Address, Service: t.GRPC.Service, Tls: t.GRPC.TLS}}
	}
	return out
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
	}
	switch p := t.GetProbe().(type) {
	case *pb.Target_Http:
		h := &HTTPProbe{URL: p.Http.GetUrl(), Method: p.Http.GetMethod(), Headers: p.Http.GetHeaders()}
		for _, c := range p.Http.GetExpectedStatus() {
			h.ExpectedStatus = append(h.ExpectedStatus, int(c))
		}
		out.HTTP = h
	case *pb.Target_Tcp:
		out.TCP = &TCPProbe{Address: p.Tcp.GetAddress()}
	case *pb.Target_Grpc:
		out.GRPC = &GRPCProbe{Address: p.Grpc.GetAddress(), Service: p.Grpc.GetService(), TLS: p.Grpc.GetTls()}
	}
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
	}
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

func groupFromProto(g *pb.GroupStatus) GroupStatus {
	return GroupStatus{
		Group:                g.GetGroup(),
		Policy:               GroupPolicy{MaxUnhealthyFraction: g.GetPolicy().GetMaxUnhealthyFraction()},
		MaxUnhealthyFraction: g.GetMaxUnhealthyFraction(),
		Targets:              int(g.GetTargets()),
		Unhealthy:            int(g.GetUnhealthy()),
		MaxUnhealthy:         int(g.GetMaxUnhealthy()),
		Panic:                g.GetPanic(),
		Held:                 g.GetHeld(),
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
	}
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
