package server

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"pulse/checker"
	"pulse/checker/probe"
	pb "pulse/gen/pulse/v1"
)

// SpecFromProto converts a wire Target into a checker.Spec. It rejects what
// only the wire form can express wrongly (an explicit zero, an unknown enum
// value, a malformed duration) with a *checker.FieldError; the checker
// validates the rest.
func SpecFromProto(t *pb.Target) (checker.Spec, error) {
	s := checker.Spec{Name: t.GetName(), Group: t.GetGroup()}
	var err error
	if s.Interval, err = positiveDuration("interval", t.GetInterval()); err != nil {
		return s, err
	}
	if s.Timeout, err = positiveDuration("timeout", t.GetTimeout()); err != nil {
		return s, err
	}
	if s.MaxLatency, err = positiveDuration("max_latency", t.GetMaxLatency()); err != nil {
		return s, err
	}
	if t.Rise != nil {
		if t.GetRise() < 1 {
			return s, &checker.FieldError{Field: "rise", Reason: fmt.Sprintf("must be at least 1, got %d", t.GetRise())}
		}
		s.Rise = int(t.GetRise())
	}
	if t.Fall != nil {
		if t.GetFall() < 1 {
			return s, &checker.FieldError{Field: "fall", Reason: fmt.Sprintf("must be at least 1, got %d", t.GetFall())}
		}
		s.Fall = int(t.GetFall())
	}
	switch t.GetInitialState() {
	case pb.State_STATE_UNSPECIFIED:
	case pb.State_STATE_HEALTHY:
		s.InitialState = checker.StateHealthy
	case pb.State_STATE_UNHEALTHY:
		s.InitialState = checker.StateUnhealthy
	default:
		return s, &checker.FieldError{Field: "initial_state", Reason: fmt.Sprintf("must be STATE_HEALTHY or STATE_UNHEALTHY, got %v", t.GetInitialState())}
	}
	switch t.GetModel() {
	case pb.Model_MODEL_UNSPECIFIED, pb.Model_MODEL_RISE_FALL:
		s.Model = checker.ModelRiseFall
	case pb.Model_MODEL_THREE_STATE:
		s.Model = checker.ModelThreeState
	default:
		return s, &checker.FieldError{Field: "model", Reason: fmt.Sprintf("must be MODEL_RISE_FALL or MODEL_THREE_STATE, got %v", t.GetModel())}
	}
	switch p := t.GetProbe().(type) {
	case *pb.Target_Http:
		h := &probe.HTTPSpec{URL: p.Http.GetUrl(), Method: p.Http.GetMethod(), Headers: p.Http.GetHeaders()}
		for _, code := range p.Http.GetExpectedStatus() {
			h.ExpectedStatus = append(h.ExpectedStatus, int(code))
		}
		s.Probe.HTTP = h
	case *pb.Target_Tcp:
		s.Probe.TCP = &probe.TCPSpec{Address: p.Tcp.GetAddress()}
	case *pb.Target_Grpc:
		s.Probe.GRPC = &probe.GRPCSpec{Address: p.Grpc.GetAddress(), Service: p.Grpc.GetService(), TLS: p.Grpc.GetTls()}
	}
	return s, nil
}

// positiveDuration returns 0 for an unset duration and rejects a set one
// that is malformed or not positive: an explicit 0s never silently means
// "default".
func positiveDuration(field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, &checker.FieldError{Field: field, Reason: "is not a valid duration: " + err.Error()}
	}
	v := d.AsDuration()
	if v <= 0 {
		return 0, &checker.FieldError{Field: field, Reason: fmt.Sprintf("must be positive when set, got %v", v)}
	}
	return v, nil
}

func specToProto(s checker.Spec) *pb.Target {
	t := &pb.Target{
		Name:         s.Name,
		Group:        s.Group,
		Interval:     durationpb.New(s.Interval),
		Timeout:      durationpb.New(s.Timeout),
		Rise:         ptr(int32(s.Rise)),
		Fall:         ptr(int32(s.Fall)),
		InitialState: stateToProto(s.InitialState),
		Model:        modelToProto(s.Model),
	}
	if s.MaxLatency > 0 {
		t.MaxLatency = durationpb.New(s.MaxLatency)
	}
	switch {
	case s.Probe.HTTP != nil:
		h := &pb.HttpProbe{Url: s.Probe.HTTP.URL, Method: s.Probe.HTTP.Method, Headers: s.Probe.HTTP.Headers}
		for _, code := range s.Probe.HTTP.ExpectedStatus {
			h.ExpectedStatus = append(h.ExpectedStatus, int32(code))
		}
		t.Probe = &pb.Target_Http{Http: h}
	case s.Probe.TCP != nil:
		t.Probe = &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: s.Probe.TCP.Address}}
	case s.Probe.GRPC != nil:
		t.Probe = &pb.Target_Grpc{Grpc: &pb.GrpcProbe{Address: s.Probe.GRPC.Address, Service: s.Probe.GRPC.Service, Tls: s.Probe.GRPC.TLS}}
	}
	return t
}

func ptr[T any](v T) *T { return &v }

func stateToProto(s checker.State) pb.State {
	switch s {
	case checker.StateHealthy:
		return pb.State_STATE_HEALTHY
	case checker.StateUnhealthy:
		return pb.State_STATE_UNHEALTHY
	case checker.StateSuspect:
		return pb.State_STATE_SUSPECT
	default:
		return pb.State_STATE_UNSPECIFIED
	}
}

func modelToProto(m checker.Model) pb.Model {
	if m == checker.ModelThreeState {
		return pb.Model_MODEL_THREE_STATE
	}
	return pb.Model_MODEL_RISE_FALL
}

func resultToProto(r checker.Result) *pb.ProbeResult {
	return &pb.ProbeResult{
		Pass:    r.Pass,
		Latency: durationpb.New(r.Latency),
		Error:   r.Err,
		Time:    timestamp(r.Time),
	}
}

// timestamp returns nil for the zero time, so "never" is unset on the wire.
func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func statusToProto(st checker.Status) *pb.TargetStatus {
	out := &pb.TargetStatus{
		Spec:               specToProto(st.Spec),
		State:              stateToProto(st.State),
		Routable:           st.Routable,
		PassStreak:         int32(st.PassStreak),
		FailStreak:         int32(st.FailStreak),
		LastTransitionTime: timestamp(st.LastTransition),
		CarriedOver:        st.CarriedOver,
		Source:             "api",
	}
	if st.Spec.Source != "" {
		out.Source = st.Spec.Source
	}
	if st.LastResult != nil {
		out.LastResult = resultToProto(*st.LastResult)
	}
	return out
}

func transitionToProto(tr checker.Transition) *pb.WatchTransitionsResponse {
	t := &pb.Transition{
		Target: tr.Target,
		Group:  tr.Group,
		From:   stateToProto(tr.From),
		To:     stateToProto(tr.To),
		Time:   timestamp(tr.Time),
		Text:   tr.String(),
		Reason: tr.Reason,
	}
	if tr.Reason == "" {
		t.Result = resultToProto(tr.Result)
	}
	return &pb.WatchTransitionsResponse{
		Revision: tr.Revision,
		Event:    &pb.WatchTransitionsResponse_Transition{Transition: t},
	}
}

func eventToProto(e checker.Event) *pb.WatchTransitionsResponse {
	switch e.Kind {
	case checker.EventTransition:
		return transitionToProto(e.Transition)
	case checker.EventAdded:
		return &pb.WatchTransitionsResponse{Revision: e.Revision, Event: &pb.WatchTransitionsResponse_Added{Added: statusToProto(e.Status)}}
	case checker.EventUpdated:
		return &pb.WatchTransitionsResponse{Revision: e.Revision, Event: &pb.WatchTransitionsResponse_Updated{Updated: statusToProto(e.Status)}}
	default:
		return &pb.WatchTransitionsResponse{Revision: e.Revision, Event: &pb.WatchTransitionsResponse_Removed{
			Removed: &pb.TargetRemoved{Name: e.Status.Spec.Name, Group: e.Status.Spec.Group},
		}}
	}
}
