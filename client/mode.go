package client

import (
	"fmt"
	"time"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// Mode is a target's administrative mode (pulsed's SetMode): ACTIVE,
// DRAINING (probed, not routable: send it no new requests, let those in
// flight finish) or MAINTENANCE (not probed, not routable). The numbers
// are the wire's; ModeUnknown (unset) means ACTIVE in a status.
type Mode int

// The modes.
const (
	ModeUnknown     Mode = 0
	ModeActive      Mode = 1
	ModeDraining    Mode = 2
	ModeMaintenance Mode = 3
)

// String returns the mode's name in lower case, e.g. "draining"; unset is
// "active".
func (m Mode) String() string {
	switch m {
	case ModeUnknown, ModeActive:
		return "active"
	case ModeDraining:
		return "draining"
	case ModeMaintenance:
		return "maintenance"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ModeChange is a change of a target's administrative mode (EventMode). A
// change of its routability follows as a transition of its own.
type ModeChange struct {
	Target   string
	Group    string
	From, To Mode
	// Reason is the operator's reason, or why it changed by itself.
	Reason string
	Time   time.Time
	// Until is when the mode returns to ACTIVE by itself; RemoveTime when a
	// drain removes the target. Zero when not set.
	Until, RemoveTime time.Time
}

func modeChangeFromProto(m *pb.ModeChange) ModeChange {
	return ModeChange{
		Target:     m.GetTarget(),
		Group:      m.GetGroup(),
		From:       Mode(m.GetFrom()),
		To:         Mode(m.GetMode()),
		Reason:     m.GetReason(),
		Time:       optTime(m.GetTime()),
		Until:      optTime(m.GetUntil()),
		RemoveTime: optTime(m.GetRemoveTime()),
	}
}

// Weight returns the target's share of traffic in percent at now, from
// its slow start: 100 outside one, rising linearly from 0 at the
// transition to routable (LastTransition) to 100 at SlowStartEnd; 0 when
// not routable. A degraded outlier's weight is at most OutlierWeight. A
// View keeps all of them up to date from the stream's events.
func (s Status) Weight(now time.Time) uint32 {
	w := s.slowStartWeight(now)
	if s.Outlier != nil && !s.Outlier.Ejected {
		w = min(w, OutlierWeight)
	}
	return w
}

func (s Status) slowStartWeight(now time.Time) uint32 {
	if !s.Routable {
		return 0
	}
	start, end := s.LastTransition, s.SlowStartEnd
	if end.IsZero() || !now.Before(end) || !end.After(start) {
		return 100
	}
	if now.Before(start) {
		return 0
	}
	return uint32(100 * now.Sub(start) / end.Sub(start))
}
