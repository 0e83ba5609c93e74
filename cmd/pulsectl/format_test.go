package main

import (
	"bytes"
	"regexp"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

func TestStreak(t *testing.T) {
	spec := &pb.Target{Rise: proto.Int32(2), Fall: proto.Int32(3)}
	tests := []struct {
		state      pb.State
		pass, fail int32
		want       string
	}{
		{pb.State_STATE_UNHEALTHY, 0, 0, "-"},
		{pb.State_STATE_UNHEALTHY, 1, 0, "pass 1/2"},
		{pb.State_STATE_UNHEALTHY, 0, 4, "fail 4"},
		{pb.State_STATE_HEALTHY, 7, 0, "pass 7"},
		{pb.State_STATE_HEALTHY, 0, 2, "fail 2/3"},
		{pb.State_STATE_SUSPECT, 1, 0, "pass 1/2"},
		{pb.State_STATE_SUSPECT, 0, 1, "fail 1/3"},
		{pb.State_STATE_UNHEALTHY, 3, 0, "pass 3"}, // draining: its streak moves nothing
		{pb.State_STATE_HEALTHY, 0, 4, "fail 4"},   // held by the panic threshold
	}
	for _, tt := range tests {
		st := &pb.TargetStatus{Spec: spec, State: tt.state, PassStreak: tt.pass, FailStreak: tt.fail}
		if got := streak(st); got != tt.want {
			t.Errorf("streak(%v, pass %d, fail %d) = %q, want %q", tt.state, tt.pass, tt.fail, got, tt.want)
		}
	}
	held := &pb.TargetStatus{Spec: spec, State: pb.State_STATE_HEALTHY, FailStreak: 1, PanicHeld: true}
	if got := streak(held); got != "fail 1" {
		t.Errorf("streak of a held target = %q, want fail 1", got)
	}
	q := &pb.TargetStatus{Spec: spec, State: pb.State_STATE_UNHEALTHY, Quarantined: "interval: must be at most 24h0m0s"}
	if got := streak(q); got != "quarantined" {
		t.Errorf("streak of a quarantined target = %q, want quarantined", got)
	}
}

func TestLatency(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                        "0s",
		850123 * time.Nanosecond: "850µs",
		1234567:                  "1.2ms",
		612345678:                "612ms",
		1534567890:               "1.53s",
	} {
		if got := latency(d); got != want {
			t.Errorf("latency(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestTruncate(t *testing.T) {
	if got := truncate("connection refused", 60); got != "connection refused" {
		t.Errorf("short text changed: %q", got)
	}
	if got := truncate("ééééé", 3); got != "éé…" {
		t.Errorf("truncate = %q", got)
	}
}

// Header values never show, whatever pulsed sent; names do.
func TestProbeSummaryHidesHeaderValues(t *testing.T) {
	tg := &pb.Target{Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: "http://10.0.0.5/healthz",
		Headers: map[string]string{"Authorization": "Bearer s3cret", "Host": "web.internal"}}}}
	want := "http GET http://10.0.0.5/healthz, headers Authorization=<redacted> Host=<redacted>"
	if got := probeSummary(tg); got != want {
		t.Errorf("probeSummary = %q, want %q", got, want)
	}
}

// hiddenSent finds every value pulsed answers as <redacted>: header
// values, a URL's password, gRPC metadata values and TLS private keys.
func TestHiddenSent(t *testing.T) {
	for _, tc := range []struct {
		target *pb.Target
		want   []string
	}{
		{&pb.Target{Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: "http://ops@10.0.0.5/", Headers: map[string]string{}}}}, nil},
		{&pb.Target{Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: "http://ops:pw@10.0.0.5/", Headers: map[string]string{"X-Env": "a"},
			Tls: &pb.TlsOptions{KeyPem: "KEY"}}}}, []string{"http.headers", "the password of http.url", "http.tls.key_pem"}},
		{&pb.Target{Probe: &pb.Target_Grpc{Grpc: &pb.GrpcProbe{Metadata: map[string]string{"x-api-key": "k"}, TlsOptions: &pb.TlsOptions{KeyPem: "KEY"}}}},
			[]string{"grpc.metadata", "grpc.tls_options.key_pem"}},
		{&pb.Target{Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Tls: &pb.TlsOptions{KeyPem: "KEY", KeyFile: "k.pem"}}}}, []string{"tcp.tls.key_pem"}},
		{&pb.Target{Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Tls: &pb.TlsOptions{KeyFile: "k.pem"}}}}, nil},
	} {
		if got := hiddenSent(tc.target); !slices.Equal(got, tc.want) {
			t.Errorf("hiddenSent(%v) = %q, want %q", tc.target, got, tc.want)
		}
	}
}

// A step count reads naturally: "1 step", "2 steps".
func TestProbeSummarySteps(t *testing.T) {
	for n, want := range map[int]string{1: "tcp 192.0.2.8:6379, 1 step", 2: "tcp 192.0.2.8:6379, 2 steps"} {
		tg := &pb.Target{Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "192.0.2.8:6379", Steps: make([]*pb.TcpStep, n)}}}
		if got := probeSummary(tg); got != want {
			t.Errorf("probeSummary = %q, want %q", got, want)
		}
	}
}

// -o json is protojson's: 64-bit integers are strings of digits, as
// proto3's JSON mapping has them, whatever their size.
func TestJSON64BitStrings(t *testing.T) {
	m := &pb.ListTargetsResponse{Revision: 1 << 60, Targets: []*pb.TargetStatus{{
		Spec:          &pb.Target{Name: `x "activeResults": "5"`},
		ActiveResults: 42, PassiveResults: 0,
	}}}
	var out bytes.Buffer
	(&env{stdout: &out}).printJSON(m)
	var back pb.ListTargetsResponse
	if err := protojson.Unmarshal(out.Bytes(), &back); err != nil || !proto.Equal(&back, m) {
		t.Errorf("printJSON does not read back as protojson of the message (%v):\n%s", err, out.String())
	}
	for _, want := range []string{`"revision":\s*"1152921504606846976"`, `"activeResults":\s*"42"`, `"passiveResults":\s*"0"`} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("JSON lacks %s:\n%s", want, out.String())
		}
	}
}

// The listing's warnings name every degraded replica but this one, whose
// own overload has a warning of its own.
func TestCheckerWarnings(t *testing.T) {
	tests := []struct {
		name string
		ck   *pb.CheckerStatus
		want []string
	}{
		{"nothing wrong", &pb.CheckerStatus{Replica: "r1"}, nil},
		{"another replica", &pb.CheckerStatus{Replica: "r1", DegradedReplicas: []string{"r3"}}, []string{
			"warning: replica r3 is degraded: its own probe timeouts do not count toward fall until it recovers",
		}},
		{"this one and two others", &pb.CheckerStatus{Replica: "r2", Degraded: true, Reason: "9 probes waiting", DegradedReplicas: []string{"r1", "r2", "r3"}}, []string{
			"warning: pulsed's checker is degraded (9 probes waiting): its own probe timeouts do not count toward fall until it recovers",
			"warning: replicas r1, r3 are degraded: their own probe timeouts do not count toward fall until they recover",
		}},
		{"published before this one noticed", &pb.CheckerStatus{Replica: "r2", DegradedReplicas: []string{"r2"}}, []string{
			"warning: replica r2 is degraded: its own probe timeouts do not count toward fall until it recovers",
		}},
		{"registry", &pb.CheckerStatus{RegistryError: "etcd unavailable"}, []string{
			"warning: pulsed cannot store changes (etcd unavailable): it keeps probing, and refuses the changes it cannot store",
		}},
	}
	for _, tt := range tests {
		if got := checkerWarnings(tt.ck); !slices.Equal(got, tt.want) {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}
