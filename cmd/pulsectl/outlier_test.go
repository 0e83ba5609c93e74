package main

import (
	"context"
	"encoding/json"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// policy set --outlier-*: the settings given change and the others stay;
// get shows them on its line; pulsed's bounds come back naming the field.
func TestPolicyOutlierFlags(t *testing.T) {
	p := startPulsed(t)
	addr := "--addr=" + p.Addr
	mustRun(t, "add", addr, "--name", "db-1", "--group", "edge", "--tcp", closedAddr(t), "--interval", "24h")
	mustRun(t, "policy", "set", "edge", addr, "--outlier-latency-factor", "3", "--outlier-min-delta", "20ms", "--outlier-interval", "5s")
	mustRun(t, "policy", "set", "edge", addr, "--outlier-enforce", "--outlier-base-ejection-time", "1m", "--outlier-max-ejection-percent", "20")
	out := mustRun(t, "policy", "get", "edge", addr)
	if want := "; outliers: latency x3 (median of 10, +20ms, 3 in a row), every 5s, ejected for 1m0s x ejections in a row, at most 20%\n"; !strings.HasSuffix(out, want) {
		t.Errorf("policy get printed %q, want it to end %q", out, want)
	}
	out = mustRun(t, "policy", "get", "edge", addr, "-o", "json")
	var got struct {
		Policy struct {
			Outlier struct {
				LatencyFactor      float64
				LatencyMinDelta    string
				Enforce            bool
				MaxEjectionPercent int
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if o := got.Policy.Outlier; o.LatencyFactor != 3 || o.LatencyMinDelta != "0.020s" || !o.Enforce || o.MaxEjectionPercent != 20 {
		t.Errorf("policy get -o json: %+v\n%s", o, out)
	}
	// Turned off: the rule at 0.
	mustRun(t, "policy", "set", "edge", addr, "--outlier-latency-factor", "0", "--outlier-failure-percentage", "40")
	if out := mustRun(t, "policy", "get", "edge", addr); !strings.Contains(out, "; outliers: failures 40% (50 outcomes), every 5s, ejected") {
		t.Errorf("policy get printed %q", out)
	}
	// The samples and the request volumes: every field of the policy has
	// a flag, so no setting needs a raw API call.
	mustRun(t, "policy", "set", "edge", addr, "--outlier-latency-factor", "2", "--outlier-samples", "5",
		"--outlier-success-rate-stdev-factor", "1.9", "--outlier-success-rate-request-volume", "20",
		"--outlier-failure-percentage-request-volume", "10")
	if out := mustRun(t, "policy", "get", "edge", addr); !strings.Contains(out, "; outliers: latency x2 (median of 5, +20ms, 3 in a row), success rate 1.9 stdev (20 outcomes), failures 40% (10 outcomes), every 5s, ejected") {
		t.Errorf("policy get printed %q", out)
	}
	out = mustRun(t, "policy", "get", "edge", addr, "-o", "json")
	var vols struct {
		Policy struct {
			Outlier struct {
				Samples                        int
				SuccessRateRequestVolume       int
				FailurePercentageRequestVolume int
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &vols); err != nil {
		t.Fatal(err)
	}
	if o := vols.Policy.Outlier; o.Samples != 5 || o.SuccessRateRequestVolume != 20 || o.FailurePercentageRequestVolume != 10 {
		t.Errorf("policy get -o json: %+v\n%s", o, out)
	}
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--outlier-latency-factor", "0.5"}, exitUsage, "policy.outlier.latency_factor: must be 0 (off) or between 1 and 1000"},
		{[]string{"--outlier-min-members", "1"}, exitUsage, "policy.outlier.min_members:"},
		{[]string{"--outlier-interval", "2h"}, exitUsage, "policy.outlier.interval:"},
		{[]string{"--outlier-consecutive", "-1"}, exitUsage, "policy.outlier.consecutive: must be between 0 (3) and 100, got -1"},
		{[]string{"--outlier-samples", "2"}, exitUsage, "policy.outlier.samples: must be between 3 and 100 (0: 10), got 2"},
		{[]string{"--outlier-failure-percentage-request-volume", "-1"}, exitUsage, "policy.outlier.failure_percentage_request_volume: must not be negative (0: 50), got -1"},
		{[]string{"--outlier-max-ejection-percent", "4294967296"}, exitUsage, `invalid value "4294967296" for flag --outlier-max-ejection-percent: too large: want a whole number up to 100`},
	} {
		r := pulsectl(t, append([]string{"policy", "set", "edge", addr}, tc.args...)...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("policy set %v: exit %d, stderr %q; want exit %d with %q", tc.args, r.code, r.stderr, tc.code, tc.msg)
		}
	}
	if r := pulsectl(t, "policy", "get", "edge", addr, "--outlier-enforce"); r.code != exitUsage {
		t.Errorf("policy get --outlier-enforce: exit %d, want %d", r.code, exitUsage)
	}
}

// outlierPulse answers State for a degraded outlier (web-1) and an
// ejected one (web-2).
type outlierPulse struct {
	pb.UnimplementedHealthCheckerServer
}

var outlierAt = time.Date(2026, 12, 5, 7, 0, 0, 0, time.UTC)

func (outlierPulse) State(_ context.Context, req *pb.StateRequest) (*pb.StateResponse, error) {
	st := &pb.TargetStatus{
		Spec: &pb.Target{
			Name: req.GetName(), Group: "edge", Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "192.0.2.1:80"}},
			Interval: durationpb.New(2 * time.Second), Timeout: durationpb.New(time.Second), Rise: ptr[int32](2), Fall: ptr[int32](3),
		},
		State: pb.State_STATE_HEALTHY, Verdict: pb.State_STATE_HEALTHY, Routable: true, Mode: pb.Mode_MODE_ACTIVE,
		LastTransitionTime: timestamppb.New(outlierAt), Weight: 10,
		Outlier: &pb.OutlierState{Reason: "p50 38ms vs group 4ms", Since: timestamppb.New(outlierAt)},
	}
	if req.GetName() == "web-2" {
		st.State, st.Routable, st.Weight = pb.State_STATE_UNHEALTHY, false, 0
		st.Outlier = &pb.OutlierState{Ejected: true, Reason: "failed 80% of 50 outcomes", Since: timestamppb.New(outlierAt),
			Until: timestamppb.New(outlierAt.Add(time.Minute)), Ejections: 2}
	}
	return &pb.StateResponse{Status: st}, nil
}

// state shows an outlier's line, and a degraded one's lowered weight.
func TestStateShowsOutlier(t *testing.T) {
	t.Setenv("TZ", "UTC")
	addr := serveAPI(t, outlierPulse{})

	for name, wants := range map[string][]string{
		"web-1": {
			"state:       healthy (outlier: degraded; routable)\n",
			"outlier:     degraded since " + timeText(outlierAt) + ", p50 38ms vs group 4ms\n",
			"weight:      10% (degraded outlier)\n",
		},
		"web-2": {
			"state:       unhealthy (outlier: ejected; not routable)\n",
			"outlier:     ejected until " + timeText(outlierAt.Add(time.Minute)) + " (2nd in a row), failed 80% of 50 outcomes\n",
		},
	} {
		out := mustRun(t, "state", name, "--addr", addr)
		for _, want := range wants {
			if !strings.Contains(out, want) {
				t.Errorf("state %s printed\n%s\nwant a line %q", name, out, want)
			}
		}
	}
}

// watch prints OUTLIER events with the target and its outlier state.
func TestWatchOutlierLines(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	p := &watchPrinter{now: func() time.Time { return at }}
	ts := timestamppb.New(at)
	o := &pb.OutlierState{Reason: "p50 38ms vs group 4ms", Since: ts}
	for _, tt := range []struct {
		kind pb.PolicyEvent_Kind
		o    *pb.OutlierState
		want string
	}{
		{pb.PolicyEvent_KIND_OUTLIER_STARTED, o, timeText(at) + " OUTLIER_STARTED web-1: degraded since " + timeText(at) + ", p50 38ms vs group 4ms"},
		{pb.PolicyEvent_KIND_OUTLIER_ENDED, o, timeText(at) + " OUTLIER_ENDED web-1: no longer an outlier (was degraded since " + timeText(at) + ", p50 38ms vs group 4ms)"},
		{pb.PolicyEvent_KIND_OUTLIER_STARTED, &pb.OutlierState{Ejected: true, Reason: "r", Until: ts, Ejections: 1},
			timeText(at) + " OUTLIER_STARTED web-1: ejected until " + timeText(at) + " (1st in a row), r"},
	} {
		ev := &pb.WatchTransitionsResponse{Event: &pb.WatchTransitionsResponse_Policy{Policy: &pb.PolicyEvent{
			Kind: tt.kind, Group: "edge", Target: "web-1", Time: ts, Text: "web-1: outlier", Outlier: tt.o}}}
		if got := p.line(ev); got != tt.want {
			t.Errorf("line = %q\nwant   %q", got, tt.want)
		}
	}
	for n, want := range map[int]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th", 21: "21st", 102: "102nd"} {
		if got := ordinal(n); got != want {
			t.Errorf("ordinal(%d) = %q, want %q", n, got, want)
		}
	}
}

// Every field of the API's OutlierPolicy has a policy set flag, so that
// no setting needs a raw SetGroupPolicy, which replaces the whole policy.
func TestPolicyOutlierFlagPerField(t *testing.T) {
	fs := flag.NewFlagSet("policy set", flag.ContinueOnError)
	addOutlierFlags(fs)
	rename := map[string]string{"latency_min_delta": "min-delta"}
	fields := (&pb.OutlierPolicy{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		name := string(fields.Get(i).Name())
		flagName, ok := rename[name]
		if !ok {
			flagName = strings.ReplaceAll(name, "_", "-")
		}
		if fs.Lookup("outlier-"+flagName) == nil {
			t.Errorf("OutlierPolicy.%s has no --outlier-%s flag", name, flagName)
		}
		if !slices.Contains(outlierFlagNames, flagName) {
			t.Errorf("--outlier-%s is not in outlierFlagNames: policy set would not send it", flagName)
		}
	}
}
