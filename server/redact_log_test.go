package server_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/probe"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/server"
)

// logged serves a checker whose probes obey the default egress policy,
// logging at debug level (with accessLog as given), and returns a client
// and the log.
func logged(t *testing.T, accessLog bool) (pb.HealthCheckerClient, *syncBuffer) {
	t.Helper()
	egress, err := probe.ParseEgressPolicy(nil, nil) // the default deny list
	if err != nil {
		t.Fatal(err)
	}
	factory := probe.NewFactoryWith(probe.FactoryOptions{Egress: egress})
	t.Cleanup(func() { factory.Close() })
	c, err := checker.New(checker.Config{
		NewProber: func(s probe.Spec) (checker.Prober, error) { return factory.New(s) },
		Defaults:  checker.Defaults{Interval: time.Minute, Timeout: time.Second, Rise: 1, Fall: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	gs, _ := server.NewGRPCServer(server.New(c), server.Options{
		Logger:    slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		AccessLog: accessLog,
	})
	return pb.NewHealthCheckerClient(serveBufconn(t, gs, c)), logs
}

// A refused AddTarget never shows the URL's password, nor its query's
// tokens, in its error or in the "finished call" line: the password reads
// "xxxxx" as net/url's Redacted writes it. Four ways to be refused with
// the URL quoted: a bad port, a scheme not http, a space in the query,
// and a port out of range.
func TestRefusedCallsMaskURLSecrets(t *testing.T) {
	const pass, tok = "s3cr3t-pass-7f1", "t0ken-9d2e"
	client, logs := logged(t, true)
	for _, c := range []struct{ url, want string }{
		{"http://probe:" + pass + "@127.0.0.1:bad/x?access_token=" + tok, `"http://probe:xxxxx@127.0.0.1:bad/x?access_token=xxxxx"`},
		{"ftp://probe:" + pass + "@127.0.0.1/x", `"ftp://probe:xxxxx@127.0.0.1/x"`},
		{"http://probe:" + pass + "@127.0.0.1/latest?X-Amz-Signature=" + tok + "&a=b c", `"http://probe:xxxxx@127.0.0.1/latest?X-Amz-Signature=xxxxx&a=b c"`},
		{"http://probe:" + pass + "@127.0.0.1:99999/?apikey=" + tok, "probe:xxxxx@"},
	} {
		tg := &pb.Target{Name: "web-1", Timeout: durationpb.New(time.Second), Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: c.url}}}
		_, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tg})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("AddTarget(%q) = %v, want INVALID_ARGUMENT", c.url, err)
			continue
		}
		msg := status.Convert(err).Message()
		if !strings.Contains(msg, c.want) || strings.Contains(msg, pass) || strings.Contains(msg, tok) {
			t.Errorf("AddTarget(%q)'s error %q: want it to hold %s and no secret", c.url, msg, c.want)
		}
	}
	out := logs.String()
	if n := strings.Count(out, `msg="finished call"`); n != 4 {
		t.Errorf("%d finished calls logged, want 4:\n%s", n, out)
	}
	if strings.Contains(out, pass) || strings.Contains(out, tok) || !strings.Contains(out, "xxxxx") {
		t.Errorf("the log shows a secret, or no masked one:\n%s", out)
	}
}

// The masking itself: whatever message a refusal builds, the secrets of
// the request in it are masked, in the forms %q writes them too.
func TestScrubMessage(t *testing.T) {
	for _, c := range []struct {
		msg     string
		secrets []string
		want    string
	}{
		{`got "http://u:pw@h/"`, []string{"pw"}, `got "http://u:xxxxx@h/"`},
		{`a pw outside quotes is too short to mask`, []string{"pw"}, `a pw outside quotes is too short to mask`},
		{`value s3cr3t, "s3cr3t\n"`, []string{"s3cr3t\n", "s3cr3t"}, `value xxxxx, "xxxxx"`},
		{`a lone " quote`, nil, `a lone " quote`},
		{`"` + strings.Repeat("é", 100) + `"`, nil, `"` + strings.Repeat("é", 64) + `"... (200 bytes)`},
	} {
		if got := server.ScrubMessage(c.msg, c.secrets); got != c.want {
			t.Errorf("ScrubMessage(%q, %q) = %q, want %q", c.msg, c.secrets, got, c.want)
		}
	}
	if got := server.SecretsOf(&pb.AddTargetRequest{Target: &pb.Target{Probe: &pb.Target_Http{Http: &pb.HttpProbe{
		Url: "http://u:p%40ss@h/?q=1&Token=t%2Fk&sig=s&user=bob",
	}}}}); strings.Join(got, " ") != "p%2540ss t%252Fk p%40ss t%2Fk p@ss t/k s" {
		t.Errorf("SecretsOf = %q", got)
	}
}

// An error never quotes a client's input whole: a 900 KB mask path comes
// back in an error under 1 KB that still names the field and the bound.
func TestErrorsQuoteBoundedInput(t *testing.T) {
	client, logs := logged(t, true)
	huge := strings.Repeat("x", 900<<10)
	check := func(what string, err error, wants ...string) {
		t.Helper()
		msg := status.Convert(err).Message()
		if status.Code(err) != codes.InvalidArgument || len(msg) > 1<<10 {
			t.Errorf("%s: %v, %d bytes; want INVALID_ARGUMENT under 1 KB", what, status.Code(err), len(msg))
		}
		for _, w := range wants {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: %.300q lacks %q", what, msg, w)
			}
		}
	}
	_, err := client.UpdateTarget(t.Context(), &pb.UpdateTargetRequest{
		Target:     &pb.Target{Name: "web-1"},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{huge}},
	})
	check("a 900 KB mask path", err, "update_mask.paths[0]", `"`+strings.Repeat("x", server.MaxQuoted)+`"... (921600 bytes)`)
	_, err = client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: &pb.Target{Name: "web-1",
		Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: "ftp://" + huge}}}})
	check("a 900 KB URL", err, "target.http.url", "2048")
	_, err = client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: &pb.Target{Name: "web-1", Group: huge,
		Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "127.0.0.1:9"}}}})
	check("a 900 KB group", err, "target.group")
	if n := len(logs.String()); n > 8<<10 {
		t.Errorf("the log holds %d bytes for three refused calls", n)
	}
}

// Without the access log, calls that end well or with the client's own
// mistake are logged at DEBUG; with it, at INFO. Calls the server could
// not serve are logged at WARN or above either way.
func TestFinishedCallsAreDebugUnlessAccessLog(t *testing.T) {
	for _, accessLog := range []bool{false, true} {
		client, logs := logged(t, accessLog)
		if _, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: &pb.Target{Name: "web-1",
			Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "127.0.0.1:9"}}}}); err != nil {
			t.Fatal(err)
		}
		_, err := client.State(t.Context(), &pb.StateRequest{Name: "nope"})
		if status.Code(err) != codes.NotFound {
			t.Fatal(err)
		}
		_, err = client.ReportOutcome(t.Context(), &pb.ReportOutcomeRequest{Target: "web-1", Ok: true})
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("ReportOutcome without passive outcomes: %v", err)
		}
		if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "grpc.method=ReportOutcome") {
			t.Errorf("access log %v: the refused ReportOutcome is not at WARN:\n%s", accessLog, out)
		}
		want := "level=DEBUG"
		if accessLog {
			want = "level=INFO"
		}
		for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			if strings.Contains(line, "grpc.method=AddTarget") || strings.Contains(line, "grpc.method=State") {
				if !strings.Contains(line, want) {
					t.Errorf("access log %v: %s, want %s", accessLog, line, want)
				}
			}
		}
		if !strings.Contains(logs.String(), "grpc.method=State") {
			t.Errorf("access log %v: State not logged:\n%s", accessLog, logs.String())
		}
	}
}
