package main

import (
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// outlierFlags are policy set's flags for the group's outlier detection.
type outlierFlags struct {
	latencyFactor, stdevFactor    float64
	minDelta, interval, baseEject zeroSecondsFlag
	consecutive, failurePct       int
	minMembers, maxEjectPct       int
	samples, srVolume, fpVolume   int
	enforce                       bool
}

// outlierFlagNames are the flags' names, without "--outlier-".
var outlierFlagNames = []string{"latency-factor", "min-delta", "interval", "consecutive", "samples", "success-rate-stdev-factor",
	"success-rate-request-volume", "failure-percentage", "failure-percentage-request-volume", "min-members", "enforce",
	"max-ejection-percent", "base-ejection-time"}

func addOutlierFlags(fs *flag.FlagSet) *outlierFlags {
	f := &outlierFlags{}
	fs.Float64Var(&f.latencyFactor, "outlier-latency-factor", 0, "with set: a member slower than F x the group's median latency is an outlier, 1 to 1000 (0: off)")
	fs.Var(atMost(&f.minDelta, time.Hour), "outlier-min-delta", "with set: and slower than the median by at least this `duration`, at most 1h (default 10ms)")
	fs.Var(int32Flag(&f.consecutive).within(0, 100), "outlier-consecutive", "with set: `judgements` in a row the latency rule must hold, 1 to 100 (default 3)")
	fs.Var(int32Flag(&f.samples).within(0, 100), "outlier-samples", "with set: a member's latency is the median of its last `N` passing probes, 3 to 100 (default 10)")
	fs.Float64Var(&f.stdevFactor, "outlier-success-rate-stdev-factor", 0, "with set: Envoy's success-rate rule: below the mean by F standard deviations, e.g. 1.9 (0: off)")
	fs.Var(int32Flag(&f.srVolume).within(0, math.MaxInt32), "outlier-success-rate-request-volume", "with set: passive `outcomes` a member needs between judgements for the success-rate rule (default 100)")
	fs.Var(int32Flag(&f.failurePct).within(0, 100), "outlier-failure-percentage", "with set: Envoy's failure-percentage rule: at least `P`% of passive outcomes failed, 1 to 100 (0: off)")
	fs.Var(int32Flag(&f.fpVolume).within(0, math.MaxInt32), "outlier-failure-percentage-request-volume", "with set: passive `outcomes` a member needs between judgements for the failure-percentage rule (default 50)")
	fs.Var(int32Flag(&f.minMembers).within(0, math.MaxInt32), "outlier-min-members", "with set: `members` needed to judge the group, at least 2 (default 3)")
	fs.Var(atMost(&f.interval, time.Hour), "outlier-interval", "with set: how often the group is judged, a `duration` from 1s to 1h (default 10s)")
	fs.BoolVar(&f.enforce, "outlier-enforce", false, "with set: eject outliers (not routable) rather than lower their weight")
	fs.Var(int32Flag(&f.maxEjectPct).within(0, 100), "outlier-max-ejection-percent", "with set: at most this `percent` of the group ejected at once, 1 to 100 (default 10)")
	fs.Var(atMost(&f.baseEject, time.Hour), "outlier-base-ejection-time", "with set: an ejection lasts this `duration` x its ejections in a row, 1s to 1h (default 30s)")
	return f
}

// any reports whether an outlier flag was given.
func (f *outlierFlags) any(set map[string]bool) bool {
	for _, n := range outlierFlagNames {
		if set["outlier-"+n] {
			return true
		}
	}
	return false
}

// apply sets the given flags on p's outlier policy, keeping the others.
func (f *outlierFlags) apply(set map[string]bool, p *pb.GroupPolicy) {
	if !f.any(set) {
		return
	}
	o := p.GetOutlier()
	if o == nil {
		o = &pb.OutlierPolicy{}
	}
	dur := func(d zeroSecondsFlag) *durationpb.Duration {
		if d == 0 {
			return nil
		}
		return durationpb.New(time.Duration(d))
	}
	for name, apply := range map[string]func(){
		"latency-factor":                    func() { o.LatencyFactor = f.latencyFactor },
		"min-delta":                         func() { o.LatencyMinDelta = dur(f.minDelta) },
		"interval":                          func() { o.Interval = dur(f.interval) },
		"consecutive":                       func() { o.Consecutive = int32(f.consecutive) },
		"samples":                           func() { o.Samples = int32(f.samples) },
		"success-rate-stdev-factor":         func() { o.SuccessRateStdevFactor = f.stdevFactor },
		"success-rate-request-volume":       func() { o.SuccessRateRequestVolume = int32(f.srVolume) },
		"failure-percentage":                func() { o.FailurePercentage = int32(f.failurePct) },
		"failure-percentage-request-volume": func() { o.FailurePercentageRequestVolume = int32(f.fpVolume) },
		"min-members":                       func() { o.MinMembers = int32(f.minMembers) },
		"enforce":                           func() { o.Enforce = f.enforce },
		"max-ejection-percent":              func() { o.MaxEjectionPercent = int32(f.maxEjectPct) },
		"base-ejection-time":                func() { o.BaseEjectionTime = dur(f.baseEject) },
	} {
		if set["outlier-"+name] {
			apply()
		}
	}
	p.Outlier = o
}

// outlierPolicyText is policy get's text of an outlier policy: "outliers:
// latency x3 (median of 10, +10ms, 3 in a row), every 10s, degraded"; ""
// when off.
func outlierPolicyText(o *pb.OutlierPolicy) string {
	var rules []string
	if f := o.GetLatencyFactor(); f > 0 {
		rules = append(rules, fmt.Sprintf("latency x%s (median of %d, +%s, %d in a row)", strconv.FormatFloat(f, 'g', -1, 64),
			intOr(o.GetSamples(), 10), durationOr(o.GetLatencyMinDelta(), 10*time.Millisecond), intOr(o.GetConsecutive(), 3)))
	}
	if f := o.GetSuccessRateStdevFactor(); f > 0 {
		rules = append(rules, fmt.Sprintf("success rate %s stdev (%d outcomes)", strconv.FormatFloat(f, 'g', -1, 64), intOr(o.GetSuccessRateRequestVolume(), 100)))
	}
	if p := o.GetFailurePercentage(); p > 0 {
		rules = append(rules, fmt.Sprintf("failures %d%% (%d outcomes)", p, intOr(o.GetFailurePercentageRequestVolume(), 50)))
	}
	if len(rules) == 0 {
		return ""
	}
	how := "degraded"
	if o.GetEnforce() {
		how = fmt.Sprintf("ejected for %s x ejections in a row, at most %d%%", durationOr(o.GetBaseEjectionTime(), 30*time.Second), intOr(o.GetMaxEjectionPercent(), 10))
	}
	return fmt.Sprintf("outliers: %s, every %s, %s", strings.Join(rules, ", "), durationOr(o.GetInterval(), 10*time.Second), how)
}

func durationOr(d *durationpb.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.AsDuration()
}

func intOr(n, def int32) int32 {
	if n == 0 {
		return def
	}
	return n
}

// outlierText is state's outlier line: "degraded since T, p50 38ms vs
// group 4ms" or "ejected until T (2nd in a row), ...".
func outlierText(o *pb.OutlierState) string {
	if o.GetEjected() {
		return fmt.Sprintf("ejected until %s (%s in a row), %s", timeText(o.GetUntil().AsTime()), ordinal(int(o.GetEjections())), o.GetReason())
	}
	return fmt.Sprintf("degraded since %s, %s", timeText(o.GetSince().AsTime()), o.GetReason())
}

// ordinal returns 1st, 2nd, 3rd, 4th, 11th...
func ordinal(n int) string {
	suffix := "th"
	if n%100 < 11 || n%100 > 13 {
		switch n % 10 {
		case 1:
			suffix = "st"
		case 2:
			suffix = "nd"
		case 3:
			suffix = "rd"
		}
	}
	return strconv.Itoa(n) + suffix
}

// outlierEventText is watch's text of an OUTLIER event: "OUTLIER_STARTED
// web-1: degraded since T, p50 38ms vs group 4ms".
func outlierEventText(pe *pb.PolicyEvent) string {
	kind := strings.TrimPrefix(pe.GetKind().String(), "KIND_")
	o := pe.GetOutlier()
	if o == nil {
		return kind + " " + pe.GetText()
	}
	if pe.GetKind() == pb.PolicyEvent_KIND_OUTLIER_ENDED {
		return kind + " " + pe.GetTarget() + ": no longer an outlier (was " + outlierText(o) + ")"
	}
	return kind + " " + pe.GetTarget() + ": " + outlierText(o)
}
