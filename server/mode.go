package server

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pulsehealth/pulse/checker"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// Conversions of the administrative modes, slow start and automatic
// removal (checker/mode.go) to and from the wire.

// ModeToProto returns the wire form of a mode. Every answer (statuses,
// transitions, mode changes) carries it, so an active target reads
// MODE_ACTIVE, never MODE_UNSPECIFIED.
func ModeToProto(m checker.Mode) pb.Mode {
	switch m {
	case checker.ModeDraining:
		return pb.Mode_MODE_DRAINING
	case checker.ModeMaintenance:
		return pb.Mode_MODE_MAINTENANCE
	}
	return pb.Mode_MODE_ACTIVE
}

// modeFromProto converts a SetMode mode; unset or unknown is a
// *checker.FieldError.
func modeFromProto(m pb.Mode) (checker.Mode, error) {
	switch m {
	case pb.Mode_MODE_ACTIVE:
		return checker.ModeActive, nil
	case pb.Mode_MODE_DRAINING:
		return checker.ModeDraining, nil
	case pb.Mode_MODE_MAINTENANCE:
		return checker.ModeMaintenance, nil
	}
	return 0, &checker.FieldError{Field: "mode", Reason: fmt.Sprintf("must be MODE_ACTIVE, MODE_DRAINING or MODE_MAINTENANCE, got %v", m)}
}

// modeRequestFromProto converts a SetMode request; the checker validates
// the rest.
func modeRequestFromProto(r *pb.SetModeRequest) (checker.ModeRequest, error) {
	m, err := modeFromProto(r.GetMode())
	if err != nil {
		return checker.ModeRequest{}, err
	}
	req := checker.ModeRequest{Target: r.GetTarget(), Group: r.GetGroup(), Mode: m, Reason: r.GetReason()}
	if u := r.GetUntil(); u != nil {
		if err := u.CheckValid(); err != nil {
			return req, &checker.FieldError{Field: "until", Reason: "is not a valid timestamp: " + err.Error()}
		}
		req.Until = u.AsTime()
		if req.Until.IsZero() {
			// The checker reads a zero Until as "no end", but this one was
			// set: 0001-01-01T00:00:00Z is in the past and must be refused
			// as one second later is. One nanosecond later is as far in the
			// past and reads the same in the error.
			req.Until = req.Until.Add(time.Nanosecond)
		}
	}
	return req, nil
}

// lifecycleFromProto reads a Target's slow start and automatic removal
// into s.
func lifecycleFromProto(t *pb.Target, s *checker.Spec) error {
	ss, err := positiveDuration("slow_start", t.GetSlowStart())
	if err != nil {
		return err
	}
	ra, err := positiveDuration("remove_after_unhealthy", t.GetRemoveAfterUnhealthy())
	if err != nil {
		return err
	}
	if ss != 0 || ra != 0 {
		s.Lifecycle = &checker.Lifecycle{SlowStart: ss, RemoveAfterUnhealthy: ra}
	}
	return nil
}

// lifecycleToProto writes a spec's slow start and automatic removal into
// t.
func lifecycleToProto(s checker.Spec, t *pb.Target) {
	if l := s.Lifecycle; l != nil {
		if l.SlowStart > 0 {
			t.SlowStart = durationpb.New(l.SlowStart)
		}
		if l.RemoveAfterUnhealthy > 0 {
			t.RemoveAfterUnhealthy = durationpb.New(l.RemoveAfterUnhealthy)
		}
	}
}

// modeStatusToProto writes a status's mode, weight and unhealthy streak
// into out.
func modeStatusToProto(st checker.Status, out *pb.TargetStatus) {
	a := st.Spec.Admin()
	out.Mode = ModeToProto(a.Mode)
	out.ModeReason = a.Reason
	out.ModeSince = timestamp(a.Since)
	out.ModeUntil = timestamp(a.Until)
	out.RemoveTime = timestamp(a.RemoveAt)
	out.Weight = st.Weight
	out.SlowStartEnd = timestamp(st.SlowStartEnd)
	out.UnhealthySince = timestamp(st.UnhealthySince)
}

// modeEventToProto converts an EventModeChanged.
func modeEventToProto(e checker.Event) *pb.WatchTransitionsResponse {
	a := e.Status.Spec.Admin()
	return &pb.WatchTransitionsResponse{Revision: e.Revision, Event: &pb.WatchTransitionsResponse_Mode{Mode: &pb.ModeChange{
		Target:     e.Status.Spec.Name,
		Group:      e.Status.Spec.Group,
		From:       ModeToProto(e.Mode.From),
		Mode:       ModeToProto(a.Mode),
		Reason:     a.Reason,
		Time:       timestamp(e.Time),
		Until:      timestamp(a.Until),
		RemoveTime: timestamp(a.RemoveAt),
	}}}
}

// groupLifecycleFromProto reads a group policy's slow start and automatic
// removal into p.
func groupLifecycleFromProto(gp *pb.GroupPolicy, p *checker.GroupPolicy) error {
	var err error
	if p.SlowStart, err = positiveDuration("slow_start", gp.GetSlowStart()); err != nil {
		return err
	}
	p.RemoveAfterUnhealthy, err = positiveDuration("remove_after_unhealthy", gp.GetRemoveAfterUnhealthy())
	return err
}
