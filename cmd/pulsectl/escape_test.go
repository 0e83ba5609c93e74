package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/pulsehealth/pulse/checker/oneshot"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"deploy 4711":             "deploy 4711",
		"héllo wörld":             "héllo wörld",
		"a\nb":                    `a\nb`,
		"\x1b[31mred":             `\x1b[31mred`,
		"tab\there":               `tab\there`,
		"bidi\u202eevil":          `bidi\u202eevil`,
		"bad \xff byte":           `bad \xff byte`,
		"cr\r\n2026 x: a -> b":    `cr\r\n2026 x: a -> b`,
		"quote \" and \\ as they": "quote \" and \\ as they",
	} {
		if got := escape(in); got != want {
			t.Errorf("escape(%q) = %q, want %q", in, got, want)
		}
	}
	m := &pb.TargetStatus{Spec: &pb.Target{Name: "a\nb", Probe: &pb.Target_Http{Http: &pb.HttpProbe{
		Headers: map[string]string{"K\x1b": "v\n"}}}}, Warnings: []string{"w\x07"}}
	e := escaped(m)
	if e.GetSpec().GetName() != `a\nb` || e.GetWarnings()[0] != `w\a` || e.GetSpec().GetHttp().GetHeaders()[`K\x1b`] != `v\n` {
		t.Errorf("escaped: %v", e)
	}
	if m.GetSpec().GetName() != "a\nb" {
		t.Errorf("escaped changed its argument: %v", m)
	}
}

// forged is a mode reason that would, printed raw, end the line and start
// one that looks like a transition, in red.
const forged = "deploy\n2026-12-01T00:00:00Z web-1: healthy -> unhealthy \x1b[31mred"

// A reason set with SetMode is printed escaped by watch, state and ls: no
// line of output is forged, no escape sequence reaches the terminal.
func TestServerStringsAreEscaped(t *testing.T) {
	p := startPulsed(t)
	web := okServer(t)
	addr := "--addr=" + p.Addr
	mustRun(t, "add", addr, "--name", "web-1", "--http", web.URL+"/healthz", "--rise", "1")
	waitState(t, p.Addr, "web-1", pb.State_STATE_HEALTHY)
	w := startBackground(t, "watch", addr)
	eventually(t, "the watch", func() bool { return strings.Contains(w.stderr.String(), "watching") })
	mustRun(t, "drain", "web-1", addr, "--reason", forged)
	wantReason := `deploy\n2026-12-01T00:00:00Z web-1: healthy -> unhealthy \x1b[31mred`
	eventually(t, "the mode change", func() bool { return strings.Contains(w.stdout.String(), "mode active -> draining") })
	w.stop(t)

	outputs := map[string]string{"watch": w.stdout.String()}
	outputs["state"] = mustRun(t, "state", "web-1", addr)
	outputs["ls"] = mustRun(t, "ls", addr, "-o", "wide")
	for cmd, out := range outputs {
		if strings.ContainsAny(out, "\x1b\r") {
			t.Errorf("%s printed an escape character:\n%q", cmd, out)
		}
		if regexp.MustCompile(`(?m)^2026-12-01T00:00:00Z`).MatchString(out) {
			t.Errorf("%s printed a forged line:\n%s", cmd, out)
		}
	}
	if !strings.Contains(outputs["watch"], " web-1: mode active -> draining ("+wantReason+")\n") {
		t.Errorf("watch does not show the reason escaped:\n%s", outputs["watch"])
	}
	if !strings.Contains(outputs["state"], "draining ("+wantReason+")") {
		t.Errorf("state does not show the reason escaped:\n%s", outputs["state"])
	}
}

// check's report escapes the reasons, which can quote a target's answer.
func TestCheckReportIsEscaped(t *testing.T) {
	var b strings.Builder
	results := []oneshot.Result{{Target: oneshot.Target{Name: "web\x1b[2J", Critical: true}, Outcome: oneshot.Down, Reason: "body: \"x\n2026 y\" not found"}}
	writeCheckText(&b, results, oneshot.Summarize(results))
	if out := b.String(); strings.ContainsRune(out, '\x1b') || !strings.Contains(out, `body: "x\n2026 y" not found`) || !strings.Contains(out, `critical down: web\x1b[2J`) {
		t.Errorf("check's report:\n%s", out)
	}
}
