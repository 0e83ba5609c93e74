package server

import (
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/outlier"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// outlierPolicyFromProto converts GroupPolicy.outlier. Durations are
// checked before they are narrowed to time.Duration; the checker checks
// the bounds (outlier.FIELD).
func outlierPolicyFromProto(o *pb.OutlierPolicy) (outlier.Policy, error) {
	p := outlier.Policy{
		Samples:                        int(o.GetSamples()),
		LatencyFactor:                  o.GetLatencyFactor(),
		Consecutive:                    int(o.GetConsecutive()),
		SuccessRateStdevFactor:         o.GetSuccessRateStdevFactor(),
		SuccessRateRequestVolume:       int(o.GetSuccessRateRequestVolume()),
		FailurePercentage:              int(o.GetFailurePercentage()),
		FailurePercentageRequestVolume: int(o.GetFailurePercentageRequestVolume()),
		MinMembers:                     int(o.GetMinMembers()),
		Enforce:                        o.GetEnforce(),
		MaxEjectionPercent:             int(o.GetMaxEjectionPercent()),
	}
	var err error
	for _, d := range []struct {
		field string
		in    *durationpb.Duration
		out   *time.Duration
	}{
		{"interval", o.GetInterval(), &p.Interval},
		{"latency_min_delta", o.GetLatencyMinDelta(), &p.LatencyMinDelta},
		{"base_ejection_time", o.GetBaseEjectionTime(), &p.BaseEjectionTime},
	} {
		if *d.out, err = outlierDuration(d.field, d.in); err != nil {
			return p, err
		}
	}
	return p, nil
}

// outlierDuration refuses a malformed or negative duration and one past an
// hour (every outlier duration's bound) before narrowing it.
func outlierDuration(field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	field = "outlier." + field
	if err := d.CheckValid(); err != nil {
		return 0, &checker.FieldError{Field: field, Reason: "is not a valid duration: " + err.Error()}
	}
	if s := d.GetSeconds(); s < 0 || s > int64(time.Hour/time.Second) {
		return 0, &checker.FieldError{Field: field, Reason: fmt.Sprintf("must be between 0 and 1h, got %ds", s)}
	}
	return d.AsDuration(), nil
}

func outlierPolicyToProto(p outlier.Policy) *pb.OutlierPolicy {
	if p == (outlier.Policy{}) {
		return nil
	}
	return &pb.OutlierPolicy{
		Interval:                       optDuration(p.Interval),
		Samples:                        clampInt32(p.Samples),
		LatencyFactor:                  p.LatencyFactor,
		LatencyMinDelta:                optDuration(p.LatencyMinDelta),
		Consecutive:                    clampInt32(p.Consecutive),
		SuccessRateStdevFactor:         p.SuccessRateStdevFactor,
		SuccessRateRequestVolume:       clampInt32(p.SuccessRateRequestVolume),
		FailurePercentage:              clampInt32(p.FailurePercentage),
		FailurePercentageRequestVolume: clampInt32(p.FailurePercentageRequestVolume),
		MinMembers:                     clampInt32(p.MinMembers),
		Enforce:                        p.Enforce,
		MaxEjectionPercent:             clampInt32(p.MaxEjectionPercent),
		BaseEjectionTime:               optDuration(p.BaseEjectionTime),
	}
}

func outlierStateToProto(o *outlier.State) *pb.OutlierState {
	if o == nil {
		return nil
	}
	return &pb.OutlierState{
		Ejected:   o.Ejected,
		Reason:    o.Reason,
		Since:     timestamp(o.Since),
		Until:     timestamp(o.Until),
		Ejections: clampInt32(o.Ejections),
	}
}

// clampInt32 narrows n, saturating rather than wrapping.
func clampInt32(n int) int32 {
	switch {
	case n > math.MaxInt32:
		return math.MaxInt32
	case n < math.MinInt32:
		return math.MinInt32
	}
	return int32(n)
}
