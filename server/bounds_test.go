package server_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pulsehealth/pulse/checker"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// An interval of 10^11 seconds (past the year 2262 from now) is refused
// with INVALID_ARGUMENT naming the field and its bound, changes nothing,
// and the server goes on answering: it used to be accepted and wedge the
// scheduler, and with it every call.
func TestAddTargetRefusesAHugeInterval(t *testing.T) {
	e := start(t, checker.Config{})
	e.add(t, tcpTarget("web-1", "edge"))
	e.c.Start()

	tg := tcpTarget("huge", "edge")
	tg.Interval = &durationpb.Duration{Seconds: 100000000000}
	_, err := e.client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tg})
	wantCode(t, err, codes.InvalidArgument, "target.interval: must be at most 24h0m0s, got more than 292 years")

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := e.client.Healthy(ctx, &pb.HealthyRequest{Group: "edge"}); err != nil {
		t.Fatalf("Healthy after the refused AddTarget: %v", err)
	}
	list, err := e.client.ListTargets(ctx, &pb.ListTargetsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.GetTargets()); n != 1 {
		t.Errorf("%d targets after the refused AddTarget, want 1", n)
	}
}

// Every bounded field of a target, through the API: accepted at its bound,
// refused just past it, naming target.<field> and the bound.
func TestAddTargetBounds(t *testing.T) {
	e := start(t, checker.Config{})
	dur := durationpb.New
	ns := time.Nanosecond
	longURL := func(n int) *pb.Target_Http {
		return &pb.Target_Http{Http: &pb.HttpProbe{Url: "http://x/" + strings.Repeat("a", n-len("http://x/"))}}
	}
	tests := []struct {
		name    string
		ok, bad func(*pb.Target)
		want    string
	}{
		{"interval", func(tg *pb.Target) { tg.Interval = dur(checker.MaxInterval) },
			func(tg *pb.Target) { tg.Interval = dur(checker.MaxInterval + ns) }, "target.interval: must be at most 24h0m0s"},
		{"interval minimum", func(tg *pb.Target) { tg.Interval, tg.Timeout = dur(checker.MinInterval), dur(checker.MinTimeout) },
			func(tg *pb.Target) { tg.Interval, tg.Timeout = dur(checker.MinInterval-ns), dur(checker.MinTimeout-ns) }, "target.interval: must be at least 1ms"},
		{"timeout", func(tg *pb.Target) { tg.Interval, tg.Timeout = dur(checker.MaxInterval), dur(checker.MaxTimeout) },
			func(tg *pb.Target) { tg.Interval, tg.Timeout = dur(checker.MaxInterval), dur(checker.MaxTimeout+ns) }, "target.timeout: must be at most 1h0m0s"},
		{"fast_interval", func(tg *pb.Target) { tg.FastInterval = dur(checker.MaxInterval) },
			func(tg *pb.Target) { tg.FastInterval = dur(checker.MaxInterval + ns) }, "target.fast_interval: must be at most 24h0m0s"},
		{"fast_interval under the default timeout", func(tg *pb.Target) { tg.FastInterval = dur(time.Second) },
			func(tg *pb.Target) { tg.FastInterval = dur(time.Millisecond) }, "target.fast_interval: must be at least the timeout (1s), got 1ms: set timeout to at most 1ms, or a longer fast_interval"},
		{"down_interval", func(tg *pb.Target) { tg.DownInterval = dur(checker.MaxInterval) },
			func(tg *pb.Target) { tg.DownInterval = dur(checker.MaxInterval + ns) }, "target.down_interval: must be at most 24h0m0s"},
		{"max_latency", func(tg *pb.Target) { tg.MaxLatency = dur(time.Second) },
			func(tg *pb.Target) { tg.MaxLatency = dur(time.Second + ns) }, "target.max_latency: must be at most the timeout (1s)"},
		{"flap_window", func(tg *pb.Target) { tg.FlapWindow = dur(checker.MaxFlapWindow) },
			func(tg *pb.Target) { tg.FlapWindow = dur(checker.MaxFlapWindow + ns) }, "target.flap_window: must be at most 24h0m0s"},
		{"flap_stable_for", func(tg *pb.Target) { tg.FlapThreshold, tg.FlapStableFor = 2, dur(checker.MaxFlapStableFor) },
			func(tg *pb.Target) { tg.FlapThreshold, tg.FlapStableFor = 2, dur(checker.MaxFlapStableFor+ns) }, "target.flap_stable_for: must be at most 24h0m0s"},
		{"rise", func(tg *pb.Target) { tg.Rise = proto.Int32(checker.MaxRise) },
			func(tg *pb.Target) { tg.Rise = proto.Int32(checker.MaxRise + 1) }, "target.rise: must be between 1 and 1000, got 1001"},
		{"fall", func(tg *pb.Target) { tg.Fall = proto.Int32(checker.MaxFall) },
			func(tg *pb.Target) { tg.Fall = proto.Int32(math.MaxInt32) }, "target.fall: must be between 1 and 1000, got 2147483647"},
		{"flap_threshold", func(tg *pb.Target) { tg.FlapThreshold = checker.MaxFlapThreshold },
			func(tg *pb.Target) { tg.FlapThreshold = checker.MaxFlapThreshold + 1 }, "target.flap_threshold: must be at most 256"},
		{"passive_rate", func(tg *pb.Target) { tg.PassiveOutcomes, tg.PassiveRate = true, checker.MaxPassiveRate },
			func(tg *pb.Target) { tg.PassiveOutcomes, tg.PassiveRate = true, checker.MaxPassiveRate+1 }, "target.passive_rate: must be at most 10000 a second"},
		{"http.url", func(tg *pb.Target) { tg.Probe = longURL(2048) },
			func(tg *pb.Target) { tg.Probe = longURL(2049) }, "target.http.url: must be at most 2048 bytes, got 2049"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := tcpTarget("b-"+strings.ReplaceAll(tt.name, " ", "-"), "")
			tt.bad(bad)
			_, err := e.client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: bad})
			wantCode(t, err, codes.InvalidArgument, tt.want)
			ok := tcpTarget("ok-"+strings.ReplaceAll(tt.name, " ", "-"), "")
			tt.ok(ok)
			if _, err := e.client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: ok}); err != nil {
				t.Errorf("at the bound: %v", err)
			}
		})
	}
}

// SetGroupPolicy refuses a fraction that is not a number in (0, 1].
func TestSetGroupPolicyRefusesNonFractions(t *testing.T) {
	e := start(t, checker.Config{})
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -0.5, 1.0000001, math.MaxFloat64} {
		_, err := e.client.SetGroupPolicy(t.Context(), &pb.SetGroupPolicyRequest{Group: "edge", Policy: &pb.GroupPolicy{MaxUnhealthyFraction: proto.Float64(f)}})
		wantCode(t, err, codes.InvalidArgument, "policy.max_unhealthy_fraction: must be in (0, 1] (1 disables the threshold), got ")
	}
	if g := e.c.Groups("edge"); len(g) != 0 {
		t.Errorf("refused policies left a group: %+v", g)
	}
	if _, err := e.client.SetGroupPolicy(t.Context(), &pb.SetGroupPolicyRequest{Group: "edge", Policy: &pb.GroupPolicy{MaxUnhealthyFraction: proto.Float64(1)}}); err != nil {
		t.Errorf("fraction 1: %v", err)
	}
}

// ReportOutcome's latency is bounded: at most MaxOutcomeLatency, and a
// latency longer than a Go duration is refused, not saturated and counted.
func TestReportOutcomeLatencyBound(t *testing.T) {
	e := start(t, checker.Config{})
	tg := tcpTarget("web-1", "")
	tg.PassiveOutcomes = true
	e.add(t, tg)
	for _, tt := range []struct {
		latency *durationpb.Duration
		want    string
	}{
		{durationpb.New(checker.MaxOutcomeLatency + time.Second), "latency: must be at most 24h0m0s, got 24h0m1s"},
		{&durationpb.Duration{Seconds: 100000000000}, "latency: must be at most 24h0m0s, got more than 292 years"},
	} {
		_, err := e.client.ReportOutcome(t.Context(), &pb.ReportOutcomeRequest{Target: "web-1", Latency: tt.latency})
		wantCode(t, err, codes.InvalidArgument, tt.want)
	}
	resp, err := e.client.ReportOutcome(t.Context(), &pb.ReportOutcomeRequest{Target: "web-1", Ok: true, Latency: durationpb.New(checker.MaxOutcomeLatency)})
	if err != nil || !resp.GetCounted() || resp.GetStatus().GetPassiveResults() != 1 {
		t.Errorf("at the bound: %v, %v; want counted, the only passive result", resp, err)
	}
}

// SetGroupPolicy bounds vantages and quorum, and a single pulsed refuses
// more than one vantage: each names its field and the bound, and changes
// nothing.
func TestSetGroupPolicyVantagesBounds(t *testing.T) {
	e := start(t, checker.Config{})
	for _, tt := range []struct {
		p    *pb.GroupPolicy
		want string
	}{
		{&pb.GroupPolicy{Vantages: 10}, "policy.vantages: must be between 0 (one: the owner's) and 9, got 10"},
		{&pb.GroupPolicy{Vantages: -1}, "policy.vantages: must be between 0 (one: the owner's) and 9, got -1"},
		{&pb.GroupPolicy{Vantages: 3, Quorum: 4}, "policy.quorum: must be between 0 (a majority) and vantages (3), got 4"},
		{&pb.GroupPolicy{Vantages: 3}, "policy.vantages: must be at most 1 here (a single pulsed is one vantage"},
	} {
		_, err := e.client.SetGroupPolicy(t.Context(), &pb.SetGroupPolicyRequest{Group: "edge", Policy: tt.p})
		wantCode(t, err, codes.InvalidArgument, tt.want)
	}
	if g := e.c.Groups("edge"); len(g) != 0 {
		t.Errorf("refused policies left a group: %+v", g)
	}
}
