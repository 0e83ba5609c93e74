package server_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/pulsehealth/pulse/checker"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/server"
)

const secret = "Bearer s3cret-probe-credential"

func httpTarget(name string, headers map[string]string) *pb.Target {
	return &pb.Target{Name: name, Group: "edge", Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: "http://127.0.0.1:9/healthz", Headers: headers}}}
}

// noSecret fails if m, in any form a client could print, holds the secret,
// and returns its headers.
func noSecret(t *testing.T, what string, m proto.Message) {
	t.Helper()
	if text := prototext.Format(m); strings.Contains(text, "s3cret") {
		t.Errorf("%s shows the header's value:\n%s", what, text)
	}
}

// Header values are redacted in every answer of the API (names stay), the
// store keeps them, and a spec read back and written again keeps them.
func TestHeaderValuesAreRedacted(t *testing.T) {
	e := start(t, checker.Config{})
	w := watch(t, t.Context(), e, &pb.WatchTransitionsRequest{})
	readSnapshot(t, w)

	resp := e.add(t, httpTarget("web-1", map[string]string{"Authorization": secret, "Host": "web.internal"}))
	noSecret(t, "AddTarget's answer", resp)
	wantHeaders := map[string]string{"Authorization": server.Redacted, "Host": server.Redacted}
	if diff := cmp.Diff(wantHeaders, resp.GetStatus().GetSpec().GetHttp().GetHeaders()); diff != "" {
		t.Errorf("AddTarget's headers (-want +got):\n%s", diff)
	}
	ev, err := w.Recv()
	if err != nil {
		t.Fatal(err)
	}
	noSecret(t, "the added event", ev)
	if got := ev.GetAdded().GetSpec().GetHttp().GetHeaders(); !cmp.Equal(got, wantHeaders) {
		t.Errorf("the added event's headers: %v", got)
	}
	st, err := e.client.State(t.Context(), &pb.StateRequest{Name: "web-1"})
	if err != nil {
		t.Fatal(err)
	}
	noSecret(t, "State", st)
	list, err := e.client.ListTargets(t.Context(), &pb.ListTargetsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	noSecret(t, "ListTargets", list)
	if got := list.GetTargets()[0].GetSpec().GetHttp().GetHeaders(); !cmp.Equal(got, wantHeaders) {
		t.Errorf("ListTargets' headers: %v", got)
	}
	stored := func() map[string]string {
		st, err := e.c.Status("web-1")
		if err != nil {
			t.Fatal(err)
		}
		return st.Spec.Probe.HTTP.Headers
	}
	if got := stored()["Authorization"]; got != secret {
		t.Fatalf("the checker holds %q, want the value itself", got)
	}

	// Read, modify, write: the redacted values keep the stored ones.
	back := st.GetStatus().GetSpec()
	back.Rise = proto.Int32(5)
	back.GetHttp().Headers["host"] = server.Redacted // names match as HTTP's do
	delete(back.GetHttp().Headers, "Host")
	resp = e.add(t, back)
	noSecret(t, "AddTarget's answer", resp)
	if resp.GetCreated() || resp.GetStatus().GetSpec().GetRise() != 5 {
		t.Errorf("the write back: created %v rise %d, want an update to rise 5", resp.GetCreated(), resp.GetStatus().GetSpec().GetRise())
	}
	if diff := cmp.Diff(map[string]string{"Authorization": secret, "host": "web.internal"}, stored()); diff != "" {
		t.Errorf("stored headers after the write back (-want +got):\n%s", diff)
	}
	ev, err = w.Recv()
	if err != nil {
		t.Fatal(err)
	}
	noSecret(t, "the updated event", ev)

	// The placeholder never becomes a value: not for a new target, nor for
	// a header the target does not have; and the rejected call changes
	// nothing.
	_, err = e.client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: httpTarget("web-2", map[string]string{"Authorization": server.Redacted})})
	wantCode(t, err, codes.InvalidArgument, `target.http.headers["Authorization"]: is "<redacted>", which keeps the stored value, but target "web-2" has no stored header Authorization`)
	_, err = e.client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: httpTarget("web-1", map[string]string{"Authorization": server.Redacted, "X-Api-Key": server.Redacted})})
	wantCode(t, err, codes.InvalidArgument, `target.http.headers["X-Api-Key"]: is "<redacted>"`)
	if _, err := e.c.Status("web-2"); err == nil {
		t.Error("web-2 was added by a rejected call")
	}
	if got := stored(); len(got) != 2 || got["Authorization"] != secret {
		t.Errorf("a rejected call changed web-1's headers to %v", got)
	}
	// A value that cannot be sent is refused without echoing it: the
	// error is logged.
	_, err = e.client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: httpTarget("web-3", map[string]string{"Authorization": secret + "\n"})})
	wantCode(t, err, codes.InvalidArgument, `target.http.headers: value of header "Authorization" must not contain control characters such as CR or LF, got '\n' at byte 30`)
	// Without the placeholder, values are written as sent.
	e.add(t, httpTarget("web-1", map[string]string{"Authorization": "Bearer rotated"}))
	if got := stored()["Authorization"]; got != "Bearer rotated" {
		t.Errorf("a new value was stored as %q", got)
	}
	if !strings.Contains(e.logs.String(), "AddTarget") || strings.Contains(e.logs.String(), "s3cret") {
		t.Errorf("the server's log misses the calls or shows the value:\n%s", e.logs.String())
	}
}

// A password in an HTTP probe's URL is a secret too: redacted in every
// answer, kept by a write back, never stored as the placeholder.
func TestURLPasswordsAreRedacted(t *testing.T) {
	e := start(t, checker.Config{})
	tg := httpTarget("web-1", nil)
	tg.GetHttp().Url = "http://probe:s3cret-pw@127.0.0.1:9/healthz"
	resp := e.add(t, tg)
	noSecret(t, "AddTarget's answer", resp)
	const shown = "http://probe:%3Credacted%3E@127.0.0.1:9/healthz"
	if got := resp.GetStatus().GetSpec().GetHttp().GetUrl(); got != shown {
		t.Errorf("AddTarget's URL = %q, want %q", got, shown)
	}
	list, err := e.client.ListTargets(t.Context(), &pb.ListTargetsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	noSecret(t, "ListTargets", list)
	storedURL := func() string {
		st, err := e.c.Status("web-1")
		if err != nil {
			t.Fatal(err)
		}
		return st.Spec.Probe.HTTP.URL
	}

	back := list.GetTargets()[0].GetSpec()
	back.Rise = proto.Int32(4)
	e.add(t, back)
	if got := storedURL(); got != "http://probe:s3cret-pw@127.0.0.1:9/healthz" {
		t.Errorf("after a write back the stored URL is %q, want the password kept", got)
	}
	tg2 := httpTarget("web-2", nil)
	tg2.GetHttp().Url = shown
	_, err = e.client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: tg2})
	wantCode(t, err, codes.InvalidArgument, `target.http.url: has the password "<redacted>", which keeps the stored one, but target "web-2" has no stored URL password`)
	if _, err := e.c.Status("web-2"); err == nil {
		t.Error("web-2 was added by a rejected call")
	}
}
