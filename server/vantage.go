package server

import (
	"fmt"

	"github.com/pulsehealth/pulse/checker"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// vantagesFromProto reads a Target's vantages and quorum into s. The wire's
// int32 is checked against the bounds before it is narrowed, so that 256
// is refused rather than read as 0.
func vantagesFromProto(t *pb.Target, s *checker.Spec) error {
	k, q := t.GetVantages(), t.GetQuorum()
	if k < 0 || k > checker.MaxVantages {
		return &checker.FieldError{Field: "vantages", Reason: fmt.Sprintf("must be between 0 (one: the owner's) and %d, got %d", checker.MaxVantages, k)}
	}
	if top := max(k, 1); q < 0 || q > top {
		return &checker.FieldError{Field: "quorum", Reason: fmt.Sprintf("must be between 0 (a majority of vantages) and vantages (%d), got %d", top, q)}
	}
	s.Vantages, s.Quorum = uint8(k), uint8(q)
	return nil
}

// vantagesToProto writes a spec's vantages and quorum into t.
func vantagesToProto(s checker.Spec, t *pb.Target) {
	t.Vantages, t.Quorum = int32(s.Vantages), int32(s.Quorum)
}

// verdictsToProto converts the vantages' verdicts of a status or a
// transition; nil for none.
func verdictsToProto(vs []checker.VantageVerdict) []*pb.VantageVerdict {
	if len(vs) == 0 {
		return nil
	}
	out := make([]*pb.VantageVerdict, len(vs))
	for i, v := range vs {
		out[i] = &pb.VantageVerdict{
			Member: v.Member,
			Label:  v.Label,
			State:  stateToProto(v.State),
			Error:  v.Error,
			Time:   timestamp(v.Time),
		}
	}
	return out
}
