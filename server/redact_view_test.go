package server_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"

	"github.com/pulsehealth/pulse/checker"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/server"
)

func TestReadURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"http://h/x", "http://h/x"},
		{"http://u:pw@h/x?check=deep&token=abc&API_KEY=k&X-Amz-Signature=s&sig=&v=1#top",
			"http://u:%3Credacted%3E@h/x?check=deep&token=%3Credacted%3E&API_KEY=%3Credacted%3E&X-Amz-Signature=%3Credacted%3E&sig=&v=1#top"},
		{"http://h/?access%5Ftoken=abc&password", "http://h/?access%5Ftoken=%3Credacted%3E&password"},
	} {
		if got := server.ReadURL(c.in); got != c.want {
			t.Errorf("ReadURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// The read role sees query values of secret names redacted and a request
// body as its size, in State, ListTargets and WatchTransitions' snapshot
// and events; the write role sees them, to write a spec back as read.
func TestReadRoleSeesNoQueryTokensNorBodies(t *testing.T) {
	tokens, err := server.ParseTokens(strings.NewReader(tokenFile))
	if err != nil {
		t.Fatal(err)
	}
	e := startWith(t, checker.Config{}, server.Options{Tokens: tokens})
	ctx := t.Context()
	write := withToken(ctx, "writer-token-0123456789")
	read := withToken(ctx, "reader-token-0123456789")
	const tok, body = "qry-s3cr3t-91e", `{"password":"body-s3cr3t-2b7"}`
	web := &pb.Target{Name: "web-1", Probe: &pb.Target_Http{Http: &pb.HttpProbe{
		Url: "http://127.0.0.1:9/healthz?check=deep&access_token=" + tok, Method: "POST", Body: body,
	}}}
	snapWatch, err := e.client.WatchTransitions(read, &pb.WatchTransitionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	readSnapshot(t, snapWatch)
	writeWatch, err := e.client.WatchTransitions(write, &pb.WatchTransitionsRequest{}) // shares encoded events
	if err != nil {
		t.Fatal(err)
	}
	readSnapshot(t, writeWatch)
	if _, err := e.client.AddTarget(write, &pb.AddTargetRequest{Target: web}); err != nil {
		t.Fatal(err)
	}
	ev, err := snapWatch.Recv() // added
	if err != nil {
		t.Fatal(err)
	}
	if wev, err := writeWatch.Recv(); err != nil || wev.GetAdded().GetSpec().GetHttp().GetBody() != body {
		t.Errorf("the write role's watch: %v, %v; want the body as written", wev, err)
	}
	st, err := e.client.State(read, &pb.StateRequest{Name: "web-1"})
	if err != nil {
		t.Fatal(err)
	}
	list, err := e.client.ListTargets(read, &pb.ListTargetsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	w2, err := e.client.WatchTransitions(read, &pb.WatchTransitionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := w2.Recv()
	if err != nil {
		t.Fatal(err)
	}
	const wantURL = "http://127.0.0.1:9/healthz?check=deep&access_token=%3Credacted%3E"
	for what, h := range map[string]*pb.HttpProbe{
		"State":                     st.GetStatus().GetSpec().GetHttp(),
		"ListTargets":               list.GetTargets()[0].GetSpec().GetHttp(),
		"WatchTransitions snapshot": snap.GetSnapshot().GetSpec().GetHttp(),
		"WatchTransitions added":    ev.GetAdded().GetSpec().GetHttp(),
	} {
		if h.GetUrl() != wantURL || h.GetBody() != "<30 bytes>" {
			t.Errorf("%s shows the read role url %q and body %q, want %q and \"<30 bytes>\"", what, h.GetUrl(), h.GetBody(), wantURL)
		}
		if text := prototext.Format(h); strings.Contains(text, "s3cr3t") {
			t.Errorf("%s shows the read role a secret:\n%s", what, text)
		}
	}
	st, err = e.client.State(write, &pb.StateRequest{Name: "web-1"})
	if err != nil {
		t.Fatal(err)
	}
	if h := st.GetStatus().GetSpec().GetHttp(); h.GetUrl() != web.GetHttp().GetUrl() || h.GetBody() != body {
		t.Errorf("the write role sees url %q and body %q, want them as written", h.GetUrl(), h.GetBody())
	}
}
