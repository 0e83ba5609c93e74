package client

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pulsehealth/pulse/checker/probe"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// fullTLS sets every field of TlsOptions.
func fullTLS() *pb.TlsOptions {
	return &pb.TlsOptions{
		CaFile: "/etc/pulse/ca.pem", CaPem: "-----BEGIN CERTIFICATE-----",
		CertFile: "/etc/pulse/client.pem", KeyFile: "/etc/pulse/client.key",
		CertPem: "-----BEGIN CERTIFICATE-----", KeyPem: "<redacted>",
		ServerName: "api.internal", InsecureSkipVerify: true, MinVersion: "1.3",
		CertExpiryWarn: durationpb.New(30 * 24 * time.Hour), CertExpiryFail: durationpb.New(7 * 24 * time.Hour),
	}
}

// fullTargets are targets that set, between them, every field of Target
// and of its probes (each probe of the oneof in a target of its own).
func fullTargets() []*pb.Target {
	base := func(name string) *pb.Target {
		return &pb.Target{
			Name: name, Group: "edge",
			Interval: durationpb.New(3 * time.Second), Timeout: durationpb.New(time.Second),
			Rise: proto.Int32(2), Fall: proto.Int32(3),
			InitialState: pb.State_STATE_HEALTHY, Model: pb.Model_MODEL_THREE_STATE,
			MaxLatency:   durationpb.New(500 * time.Millisecond),
			FastInterval: durationpb.New(time.Second), DownInterval: durationpb.New(10 * time.Second),
			FlapWindow: durationpb.New(time.Minute), FlapThreshold: 4, FlapStableFor: durationpb.New(2 * time.Minute),
			PassiveOutcomes: true, PassiveRate: 20,
			SlowStart: durationpb.New(30 * time.Second), RemoveAfterUnhealthy: durationpb.New(time.Hour),
			Vantages: 3, Quorum: 2,
		}
	}
	h := base("web-1")
	h.Probe = &pb.Target_Http{Http: &pb.HttpProbe{
		Url: "https://user:<redacted>@127.0.0.1:8443/healthz", Method: "POST",
		ExpectedStatus: []int32{200, 204}, Headers: map[string]string{"Authorization": "<redacted>"},
		ExpectedStatusRanges: []string{"200-299", "301-302"},
		BodyContains:         "ready", BodyNotContains: "degraded", BodyRegex: `"ok":\s*true`, BodyLimit: 4096,
		HeaderMatches: []*pb.HeaderMatch{{Name: "X-Status", Regex: "^ok$"}, {Name: "X-Role", Regex: "primary"}},
		Body:          `{"ping":1}`, FollowRedirects: true, Tls: fullTLS(),
	}}
	tc := base("redis-1")
	tc.Probe = &pb.Target_Tcp{Tcp: &pb.TcpProbe{
		Address: "127.0.0.1:6379", Tls: fullTLS(),
		Steps: []*pb.TcpStep{
			{Send: "PING\r\n"}, {SendHex: "2a310d0a"}, {Expect: "+PONG\r\n", ReadLimit: 64},
			{ExpectHex: "2b4f4b"}, {ExpectContains: "role:master"}, {ExpectRegex: `connected_slaves:\d+`},
		},
	}}
	g := base("api-1")
	g.Probe = &pb.Target_Grpc{Grpc: &pb.GrpcProbe{
		Address: "127.0.0.1:50051", Service: "pulse.v1.HealthChecker", Tls: true, TlsOptions: fullTLS(),
		Authority: "api.internal", Metadata: map[string]string{"x-token": "<redacted>"},
		ExpectedStatuses: []string{"SERVING", "NOT_SERVING"},
	}}
	d := base("dns-1")
	d.Probe = &pb.Target_Dns{Dns: &pb.DnsProbe{
		Name: "api.internal.", Type: "SRV", Server: "127.0.0.1:53", Rcode: "NOERROR",
		AnswerContains: "db-1.internal.", AnswerRegex: `^10 \d+ 5432 `,
	}}
	return []*pb.Target{h, tc, g, d}
}

// fieldPaths returns the paths ("grpc.tls_options.ca_file") of md's
// fields, recursing into Pulse's own messages.
func fieldPaths(md protoreflect.MessageDescriptor, prefix string) []string {
	var out []string
	for i := range md.Fields().Len() {
		fd := md.Fields().Get(i)
		p := prefix + string(fd.Name())
		out = append(out, p)
		if fd.Message() != nil && !fd.IsMap() && fd.Message().ParentFile().Package() == md.ParentFile().Package() {
			out = append(out, fieldPaths(fd.Message(), p+".")...)
		}
	}
	return out
}

// setPaths adds to seen the paths of the fields m sets, recursing into
// its messages and lists of messages.
func setPaths(m protoreflect.Message, prefix string, seen map[string]bool) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := prefix + string(fd.Name())
		seen[p] = true
		switch {
		case fd.IsMap() || fd.Message() == nil:
		case fd.IsList():
			for i := range v.List().Len() {
				setPaths(v.List().Get(i).Message(), p+".", seen)
			}
		default:
			setPaths(v.Message(), p+".", seen)
		}
		return true
	})
}

// TestTargetRoundTrip converts targets that set every field of Target and
// its probes to the client's Target and back, and wants them unchanged:
// a target read through the client and written back loses nothing. A
// field added to the messages fails the fixture check until the fixture,
// and so the client's types, carry it.
func TestTargetRoundTrip(t *testing.T) {
	seen := map[string]bool{}
	for _, want := range fullTargets() {
		setPaths(want.ProtoReflect(), "", seen)
		got := targetToProto(targetFromProto(want))
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			t.Errorf("%s: proto -> client -> proto (-want +got):\n%s", want.GetName(), diff)
		}
	}
	var unset []string
	for _, p := range fieldPaths((&pb.Target{}).ProtoReflect().Descriptor(), "") {
		if !seen[p] {
			unset = append(unset, p)
		}
	}
	if len(unset) > 0 {
		t.Errorf("the fixture leaves %s unset: set them in fullTargets, with a non-zero value, and give them a place in the client's Target", strings.Join(unset, ", "))
	}
}

// TestStatusFromProto reads a status that sets every field of
// TargetStatus and wants each in the client's Status.
func TestStatusFromProto(t *testing.T) {
	ts := func(sec int64) *timestamppb.Timestamp { return timestamppb.New(time.Unix(1_800_000_000+sec, 0)) }
	at := func(sec int64) time.Time { return time.Unix(1_800_000_000+sec, 0) }
	spec := fullTargets()[0]
	st := &pb.TargetStatus{
		Spec: spec, State: pb.State_STATE_HEALTHY, Routable: true, PassStreak: 3, FailStreak: 1,
		LastResult:         &pb.ProbeResult{Pass: true, Latency: durationpb.New(time.Millisecond), Error: "slow", Time: ts(1), Passive: true, Ignored: true},
		LastTransitionTime: ts(2), CarriedOver: true, Source: "file", Verdict: pb.State_STATE_UNHEALTHY,
		PanicHeld: true, Flapping: true, TransitionsInWindow: 5, ProbeInterval: durationpb.New(time.Second),
		NextProbeTime: ts(3), ActiveResults: 10, PassiveResults: 11, PassiveRateLimited: 12, IgnoredTimeouts: 13,
		Quarantined: "http.url: refused", Warnings: []string{"http.tls.insecure_skip_verify: not verified"},
		CertExpiryWarning: "certificate expires in 3d12h (2027-01-18)", CertNotAfter: ts(4),
		Mode: pb.Mode_MODE_DRAINING, ModeReason: "deploy 4711", ModeSince: ts(5), ModeUntil: ts(6),
		RemoveTime: ts(7), Weight: 40, SlowStartEnd: ts(8), UnhealthySince: ts(9),
		Vantages: []*pb.VantageVerdict{
			{Member: "r1", Label: "zone-a", State: pb.State_STATE_HEALTHY, Time: ts(10)},
			{Member: "r2", Label: "zone-b", State: pb.State_STATE_UNHEALTHY, Error: "connection refused", Time: ts(11)},
			{Member: "r3", Label: "zone-c"},
		},
		Outlier: &pb.OutlierState{Ejected: true, Reason: "p50 38ms vs group 4ms", Since: ts(12), Until: ts(13), Ejections: 2},
		Owner:   "r1",
	}
	seen := map[string]bool{}
	setPaths(st.ProtoReflect(), "", seen)
	for _, p := range fieldPaths(st.ProtoReflect().Descriptor(), "") {
		if !seen[p] && !strings.HasPrefix(p, "spec.") {
			t.Errorf("the fixture leaves %s unset: set it and give it a place in the client's Status", p)
		}
	}
	want := Status{
		Target: targetFromProto(spec), State: StateHealthy, Routable: true, PassStreak: 3, FailStreak: 1,
		LastResult:     &Result{Pass: true, Latency: time.Millisecond, Error: "slow", Time: at(1), Passive: true, Ignored: true},
		LastTransition: at(2), CarriedOver: true, Source: "file", Verdict: StateUnhealthy,
		PanicHeld: true, Flapping: true, TransitionsInWindow: 5, ProbeInterval: time.Second,
		NextProbe: at(3), ActiveResults: 10, PassiveResults: 11, PassiveRateLimited: 12, IgnoredTimeouts: 13,
		Quarantined: "http.url: refused", Warnings: []string{"http.tls.insecure_skip_verify: not verified"},
		CertExpiryWarning: "certificate expires in 3d12h (2027-01-18)", CertNotAfter: at(4),
		Mode: ModeDraining, ModeReason: "deploy 4711", ModeSince: at(5), ModeUntil: at(6),
		RemoveTime: at(7), SlowStartEnd: at(8), UnhealthySince: at(9),
		Vantages: []VantageVerdict{
			{Member: "r1", Label: "zone-a", State: StateHealthy, Time: at(10)},
			{Member: "r2", Label: "zone-b", State: StateUnhealthy, Error: "connection refused", Time: at(11)},
			{Member: "r3", Label: "zone-c"},
		},
		Outlier: &OutlierState{Ejected: true, Reason: "p50 38ms vs group 4ms", Since: at(12), Until: at(13), Ejections: 2},
		Owner:   "r1",
	}
	// weight is Status.Weight(now), computed from LastTransition and
	// SlowStartEnd at any time rather than as of the read.
	if diff := cmp.Diff(want, statusFromProto(st)); diff != "" {
		t.Errorf("statusFromProto (-want +got):\n%s", diff)
	}
}

// TestPolicyKinds wants a name for every policy kind of the wire.
func TestPolicyKinds(t *testing.T) {
	for n, name := range pb.PolicyEvent_Kind_name {
		got := PolicyKind(n).String()
		if want := strings.ToLower(strings.TrimPrefix(name, "KIND_")); got != want {
			t.Errorf("PolicyKind(%d) is %q, want %q", n, got, want)
		}
	}
	if !slices.Contains([]PolicyKind{PolicyCertExpiring, PolicyTargetExpired}, PolicyKind(pb.PolicyEvent_KIND_CERT_EXPIRING)) {
		t.Error("PolicyCertExpiring is not the wire's number")
	}
}

// TestModels wants every model of the wire named as pulsectl names it,
// the unset one as the rise/fall it stands for.
func TestModels(t *testing.T) {
	for n, name := range pb.Model_name {
		want := strings.ToLower(strings.TrimPrefix(name, "MODEL_"))
		if n == int32(pb.Model_MODEL_UNSPECIFIED) {
			want = "rise_fall"
		}
		if got := Model(n).String(); got != want {
			t.Errorf("Model(%d) is %q, want %q", n, got, want)
		}
	}
	if ModelThreeState != Model(pb.Model_MODEL_THREE_STATE) || ModelRiseFall != Model(pb.Model_MODEL_RISE_FALL) {
		t.Error("the models are not the wire's numbers")
	}
	if got := Model(7).String(); got != "Model(7)" {
		t.Errorf("Model(7) is %q", got)
	}
}

// TestGroupPolicyRoundTrip converts a policy that sets every field of
// GroupPolicy to the client's and back.
func TestGroupPolicyRoundTrip(t *testing.T) {
	want := &pb.GroupPolicy{
		MaxUnhealthyFraction: proto.Float64(0.25),
		SlowStart:            durationpb.New(time.Minute), RemoveAfterUnhealthy: durationpb.New(time.Hour),
		AvailabilityObjective: proto.Float64(0.999), ObjectiveWindow: durationpb.New(24 * time.Hour),
		Vantages: 3, Quorum: 2, Outlier: fullOutlierPolicy(),
	}
	requireSet(t, want)
	if diff := cmp.Diff(want, groupPolicyToProto(groupPolicyFromProto(want)), protocmp.Transform()); diff != "" {
		t.Errorf("proto -> client -> proto (-want +got):\n%s", diff)
	}
}

// TestReadOnlyConversions reads messages that set every field, and wants
// every field of the client's type set: a field the client has but does
// not read fails, and a field added to the messages fails the fixture
// check until the client reads it.
func TestReadOnlyConversions(t *testing.T) {
	ts := timestamppb.New(time.Unix(1_800_000_000, 0))
	res := &pb.ProbeResult{Pass: true, Latency: durationpb.New(time.Millisecond), Error: "slow", Time: ts, Passive: true, Ignored: true}
	tr := &pb.Transition{
		Target: "web-1", Group: "edge", From: pb.State_STATE_UNHEALTHY, To: pb.State_STATE_HEALTHY, Time: ts,
		Result: res, Text: "web-1: unhealthy -> healthy", Reason: "draining: deploy 4711", Mode: pb.Mode_MODE_DRAINING, SlowStartEnd: ts,
		Vantages: []*pb.VantageVerdict{{Member: "r1", Label: "zone-a", State: pb.State_STATE_HEALTHY, Error: "slow", Time: ts}},
	}
	mc := &pb.ModeChange{Target: "web-1", Group: "edge", From: pb.Mode_MODE_ACTIVE, Mode: pb.Mode_MODE_DRAINING, Reason: "deploy", Time: ts, Until: ts, RemoveTime: ts}
	pe := &pb.PolicyEvent{Kind: pb.PolicyEvent_KIND_PANIC_ENTERED, Group: "edge", Target: "web-1", Time: ts, Text: "panic", Held: []string{"web-3"}, Replica: "r2", Source: "discovery:api", SdConfig: "http_sd 0", Error: "status 500",
		Vantage: "zone-b", Disagree: 4, Judged: 6, Outlier: &pb.OutlierState{Ejected: true, Reason: "p50 38ms vs group 4ms", Since: ts, Until: ts, Ejections: 1}}
	cs := &pb.CheckerStatus{
		Degraded: true, DegradedSince: ts, Reason: "slow", Lag: durationpb.New(time.Second), WaitingProbes: 1, InFlightProbes: 2,
		MaxConcurrentProbes: 3, IgnoredTimeouts: 4, RegistryError: "disk full", Replica: "r1", Replicas: []string{"r1", "r2"}, DegradedReplicas: []string{"r2"},
	}
	gs := &pb.GroupStatus{
		Group: "edge", Policy: &pb.GroupPolicy{MaxUnhealthyFraction: proto.Float64(0.25), SlowStart: durationpb.New(time.Minute), RemoveAfterUnhealthy: durationpb.New(time.Hour),
			AvailabilityObjective: proto.Float64(0.999), ObjectiveWindow: durationpb.New(24 * time.Hour), Vantages: 3, Quorum: 2, Outlier: fullOutlierPolicy()},
		MaxUnhealthyFraction: 0.25, Targets: 4, Unhealthy: 1, MaxUnhealthy: 1, Panic: true, Held: []string{"web-3"},
	}
	pr := &pb.ProbeNowResult{Name: "web-1", Result: res, Skipped: "in flight", State: pb.State_STATE_HEALTHY}
	ds := &pb.DiscoverySource{Name: "http_sd 0", Detail: "url http://127.0.0.1:1/sd", LastRefresh: ts, Targets: 2, LastError: "status 500", ErrorSince: ts}
	dg := &pb.DiscoveryGroup{Name: "api", Source: "discovery:api", Targets: 2, LastApply: ts, LastError: "refused", ErrorSince: ts, Sources: []*pb.DiscoverySource{ds}, Leader: "r2"}
	for _, tc := range []struct {
		msg proto.Message
		got any
	}{
		{res, *resultFromProto(res)},
		{tr, transitionFromProto(tr)},
		{mc, modeChangeFromProto(mc)},
		{pe, policyFromProto(pe)},
		{cs, checkerFromProto(cs)},
		{gs, groupFromProto(gs)},
		{pr, probeNowResultFromProto(pr)},
		{dg, discoveryFromProto(dg)},
		{ds, discoveryFromProto(dg).Sources[0]},
	} {
		requireSet(t, tc.msg)
		v := reflect.ValueOf(tc.got)
		for i := range v.NumField() {
			if v.Field(i).IsZero() {
				t.Errorf("%T.%s is not read from a %T that sets every field", tc.got, v.Type().Field(i).Name, tc.msg)
			}
		}
	}
}

// requireSet fails t unless m sets every one of its fields (and those of
// Pulse's messages in it).
func requireSet(t *testing.T, m proto.Message) {
	t.Helper()
	seen := map[string]bool{}
	setPaths(m.ProtoReflect(), "", seen)
	for _, p := range fieldPaths(m.ProtoReflect().Descriptor(), "") {
		if !seen[p] {
			t.Errorf("the %T fixture leaves %s unset: set it, and read it into the client's type", m, p)
		}
	}
}

// TestAddress wants the host:port of each probe kind.
func TestAddress(t *testing.T) {
	for _, tc := range []struct {
		t    Target
		want string
	}{
		{Target{HTTP: &HTTPProbe{URL: "https://api.internal/healthz"}}, "api.internal:443"},
		{Target{TCP: &TCPProbe{Address: "10.0.0.1:6379"}}, "10.0.0.1:6379"},
		{Target{GRPC: &GRPCProbe{Address: "10.0.0.2:50051"}}, "10.0.0.2:50051"},
		{Target{DNS: &DNSProbe{Name: "api.internal.", Server: "10.0.0.53:53"}}, "10.0.0.53:53"},
	} {
		if got, ok := tc.t.Address(); !ok || got != tc.want {
			t.Errorf("Address of %+v: %q, %v; want %q", tc.t, got, ok, tc.want)
		}
	}
}

// Of a target with several probes, Address reads the one pulsed is sent,
// whichever two are set.
func TestAddressOfTheProbeSent(t *testing.T) {
	probes := []func(*Target){
		func(t *Target) { t.HTTP = &HTTPProbe{URL: "http://10.0.0.1:8080/healthz"} },
		func(t *Target) { t.TCP = &TCPProbe{Address: "10.0.0.2:6379"} },
		func(t *Target) { t.GRPC = &GRPCProbe{Address: "10.0.0.3:50051"} },
		func(t *Target) { t.DNS = &DNSProbe{Name: "api.internal.", Server: "10.0.0.4:53"} },
	}
	for i, a := range probes {
		for _, b := range probes[i+1:] {
			tg := Target{Name: "web-1"}
			a(&tg)
			b(&tg)
			got, _ := tg.Address()
			sent, _ := targetFromProto(targetToProto(tg)).Address()
			if got != sent {
				t.Errorf("Address of a target with two probes: %s, but pulsed is sent the probe of %s", got, sent)
			}
		}
	}
}

// A target with several probes is refused, naming them in pulsed's words
// for a spec with several; one with one or none is pulsed's to judge.
func TestCheckProbes(t *testing.T) {
	h, tc := &HTTPProbe{URL: "http://10.0.0.1:8080/healthz"}, &TCPProbe{Address: "10.0.0.1:6379"}
	g, d := &GRPCProbe{Address: "10.0.0.1:50051"}, &DNSProbe{Name: "api.internal.", Server: "10.0.0.53:53"}
	for _, c := range []struct {
		t    Target
		spec probe.Spec
	}{
		{Target{HTTP: h, TCP: tc}, probe.Spec{HTTP: &probe.HTTPSpec{}, TCP: &probe.TCPSpec{}}},
		{Target{HTTP: h, GRPC: g, DNS: d}, probe.Spec{HTTP: &probe.HTTPSpec{}, GRPC: &probe.GRPCSpec{}, DNS: &probe.DNSSpec{}}},
	} {
		err := checkProbes("AddTargets", "targets[3]", c.t)
		var ce *Error
		if !errors.Is(err, ErrInvalidArgument) || !errors.As(err, &ce) || ce.Method != "AddTargets" || status.Code(err) != codes.InvalidArgument {
			t.Fatalf("checkProbes: %v; want an INVALID_ARGUMENT *Error of AddTargets", err)
		}
		if want := "targets[3]." + c.spec.Validate().Error(); ce.Message != want {
			t.Errorf("checkProbes: %q; want pulsed's %q", ce.Message, want)
		}
	}
	for _, tg := range []Target{{}, {HTTP: h}, {TCP: tc}, {GRPC: g}, {DNS: d}} {
		if err := checkProbes("AddTarget", "target", tg); err != nil {
			t.Errorf("checkProbes of %+v: %v", tg, err)
		}
	}
}

// fullOutlierPolicy sets every field of OutlierPolicy.
func fullOutlierPolicy() *pb.OutlierPolicy {
	return &pb.OutlierPolicy{
		Interval: durationpb.New(5 * time.Second), Samples: 7, LatencyFactor: 3, LatencyMinDelta: durationpb.New(20 * time.Millisecond),
		Consecutive: 2, SuccessRateStdevFactor: 1.9, SuccessRateRequestVolume: 40, FailurePercentage: 50,
		FailurePercentageRequestVolume: 20, MinMembers: 4, Enforce: true, MaxEjectionPercent: 25,
		BaseEjectionTime: durationpb.New(time.Minute),
	}
}

// An outlier policy off is unset on the wire, and a count past int32
// saturates rather than wrapping into range.
func TestOutlierPolicyToProto(t *testing.T) {
	if p := groupPolicyToProto(GroupPolicy{}); p.Outlier != nil {
		t.Errorf("off: %v", p.Outlier)
	}
	if got := outlierPolicyToProto(OutlierPolicy{LatencyFactor: 2, Samples: 1<<32 + 5}).GetSamples(); got != math.MaxInt32 {
		t.Errorf("samples 1<<32+5 sent as %d", got)
	}
}

// A degraded outlier's weight is at most OutlierWeight; an ejected one,
// not routable, has none.
func TestOutlierWeight(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	st := Status{Routable: true, Outlier: &OutlierState{Reason: "p50 38ms vs group 4ms"}}
	if w := st.Weight(now); w != OutlierWeight {
		t.Errorf("degraded: weight %d, want %d", w, OutlierWeight)
	}
	// In a slow start below it, the slow start's.
	st.LastTransition, st.SlowStartEnd = now.Add(-time.Second), now.Add(99*time.Second)
	if w := st.Weight(now); w != 1 {
		t.Errorf("degraded in slow start: weight %d, want 1", w)
	}
	if w := (Status{Routable: false, Outlier: &OutlierState{Ejected: true}}).Weight(now); w != 0 {
		t.Errorf("ejected: weight %d", w)
	}
}
