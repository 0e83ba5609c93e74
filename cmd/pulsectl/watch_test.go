package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// lines returns the complete lines of s.
func lines(s string) []string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return strings.Split(s[:i], "\n")
	}
	return nil
}

// waitLine waits until a line of b matches re and returns it.
func waitLine(t *testing.T, b *background, re string) string {
	t.Helper()
	rx := regexp.MustCompile(re)
	var found string
	eventually(t, "a watch line matching "+re+"\nstdout so far:\n"+b.stdout.String(), func() bool {
		for _, l := range lines(b.stdout.String()) {
			if rx.MatchString(l) {
				found = l
				return true
			}
		}
		return false
	})
	return found
}

// rfc3339 matches the time at the start of a watch line.
const rfc3339 = `^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:Z|[+-]\d\d:\d\d)) `

// TestWatch follows a target's life on a live watch: one line per event,
// time first, transitions as "<name>: <from> -> <to>", no line for
// progress events.
func TestWatch(t *testing.T) {
	p := startPulsed(t, "-watch-progress", "50ms")
	web := okServer(t)
	addr := "--addr=" + p.Addr

	w := startBackground(t, "watch", addr)
	eventually(t, "the watch to start", func() bool { return strings.Contains(w.stderr.String(), "watching pulsed at "+p.Addr) })

	mustRun(t, "add", addr, "--name", "web-1", "--http", web.URL)
	waitLine(t, w, rfc3339+`web-1: added \(http GET `+regexp.QuoteMeta(web.URL)+`, unhealthy\)$`)
	line := waitLine(t, w, rfc3339+`web-1: unhealthy -> healthy$`)
	if _, err := time.Parse(time.RFC3339, strings.Fields(line)[0]); err != nil {
		t.Errorf("transition line %q: %v", line, err)
	}
	mustRun(t, "add", addr, "--name", "web-1", "--tcp", web.Listener.Addr().String())
	waitLine(t, w, rfc3339+`web-1: updated: probe http GET `+regexp.QuoteMeta(web.URL)+` -> tcp `+regexp.QuoteMeta(web.Listener.Addr().String())+`$`)
	mustRun(t, "set", addr, "web-1", "--interval", "5s", "--rise", "3")
	waitLine(t, w, rfc3339+`web-1: updated: interval `+regexp.QuoteMeta(testInterval.String())+` -> 5s, rise 2 -> 3$`)
	mustRun(t, "rm", addr, "web-1")
	waitLine(t, w, rfc3339+`web-1: removed$`)

	// A late watch with --snapshot first shows the current targets.
	mustRun(t, "add", addr, "--name", "web-2", "--group", "edge", "--http", web.URL)
	mustRun(t, "add", addr, "--name", "other", "--http", web.URL)
	waitState(t, p.Addr, "web-2", pb.State_STATE_HEALTHY)
	snap := startBackground(t, "watch", addr, "--snapshot", "--group", "edge")
	waitLine(t, snap, rfc3339+`web-2: healthy \(snapshot\)$`)

	// Progress events came every 50ms; none of them printed a line.
	if code := w.stop(t); code != exitOK {
		t.Errorf("watch stopped by its context: exit %d, want 0\n%s", code, w.stderr.String())
	}
	if code := snap.stop(t); code != exitOK {
		t.Errorf("watch --snapshot: exit %d", code)
	}
	for _, l := range lines(w.stdout.String()) {
		// The checker's own events (a loaded machine can make it
		// degraded) are lines too.
		if !regexp.MustCompile(rfc3339 + `((web-1|web-2|other): |checker (degraded|recovered))`).MatchString(l) {
			t.Errorf("unexpected watch line %q", l)
		}
	}
	for _, l := range lines(snap.stdout.String()) {
		if strings.Contains(l, "other") {
			t.Errorf("watch --group edge printed %q", l)
		}
	}
}

// serverRevision returns the revision ls -o json reports. pulsed always
// reports one even with no targets, so 0 is a regression, not a reason
// to skip.
func serverRevision(t *testing.T, addr string) uint64 {
	t.Helper()
	var list pb.ListTargetsResponse
	if err := protojson.Unmarshal([]byte(mustRun(t, "ls", "--addr", addr, "-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	if list.GetRevision() == 0 {
		t.Fatal("ls -o json reports revision 0: pulsed lost its revisions, so --since and resuming cannot work")
	}
	return list.GetRevision()
}

// TestWatchSince resumes from a revision taken from ls -o json: the events
// after it are replayed in order, in JSON and in text.
func TestWatchSince(t *testing.T) {
	p := startPulsed(t)
	addr := "--addr=" + p.Addr
	rev := serverRevision(t, p.Addr)
	web := okServer(t)
	mustRun(t, "add", addr, "--name", "web-1", "--http", web.URL)
	waitState(t, p.Addr, "web-1", pb.State_STATE_HEALTHY)

	js := startBackground(t, "watch", addr, "--since", uintText(rev), "-o", "json")
	waitLine(t, js, `"text":\s*"web-1: unhealthy -> healthy"`)
	text := startBackground(t, "watch", addr, "--since", uintText(rev))
	waitLine(t, text, rfc3339+`web-1: unhealthy -> healthy$`)
	js.stop(t)
	text.stop(t)

	var kinds []string
	last := rev
	for _, l := range lines(js.stdout.String()) {
		var ev pb.WatchTransitionsResponse
		if err := protojson.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("line %q is not a WatchTransitionsResponse: %v", l, err)
		}
		if ev.GetRevision() <= last {
			t.Errorf("revision %d after %d: want strictly increasing, above --since %d", ev.GetRevision(), last, rev)
		}
		last = ev.GetRevision()
		switch {
		case ev.GetAdded() != nil:
			kinds = append(kinds, "added")
		case ev.GetTransition() != nil:
			kinds = append(kinds, "transition")
		}
	}
	if strings.Join(kinds, " ") != "added transition" {
		t.Errorf("replayed %v, want the add then the transition", kinds)
	}
	if got := lines(text.stdout.String()); len(got) != 2 || !strings.Contains(got[0], "web-1: added") {
		t.Errorf("text replay:\n%s", text.stdout.String())
	}

	// A revision the server no longer holds, or never had, is a usage
	// error with advice.
	r := pulsectl(t, "watch", addr, "--since", "1")
	if r.code != exitUsage || !strings.Contains(r.stderr, "watch without --since") {
		t.Errorf("watch --since 1: %+v", r)
	}
	r = pulsectl(t, "watch", addr, "--since", uintText(last+1_000_000))
	if r.code != exitUsage || !strings.Contains(r.stderr, "watch without --since") {
		t.Errorf("watch --since <future>: %+v", r)
	}
}

// TestWatchServerGone: when pulsed shuts down, watch exits 4 and says
// which revision to resume from.
func TestWatchServerGone(t *testing.T) {
	p := startPulsed(t)
	addr := "--addr=" + p.Addr
	serverRevision(t, p.Addr)
	web := okServer(t)
	w := startBackground(t, "watch", addr)
	eventually(t, "the watch to start", func() bool { return strings.Contains(w.stderr.String(), "watching") })
	mustRun(t, "add", addr, "--name", "web-1", "--http", web.URL)
	waitLine(t, w, `web-1: added`)
	p.stop(t)
	if code := w.wait(t); code != exitServer {
		t.Errorf("watch after pulsed stopped: exit %d, want %d", code, exitServer)
	}
	if !regexp.MustCompile(`resume with pulsectl watch --since \d+`).MatchString(w.stderr.String()) {
		t.Errorf("stderr does not say where to resume:\n%s", w.stderr.String())
	}
}

func uintText(v uint64) string { return strconv.FormatUint(v, 10) }

// TestWatchReconnects: pulsed restarts (from its data dir, on the same
// address) under a running watch: the watch says it lost pulsed, comes
// back, and goes on printing from where it was, with no event twice.
func TestWatchReconnects(t *testing.T) {
	dir := t.TempDir()
	p := startPulsed(t, "-data-dir", dir)
	addr := "--addr=" + p.Addr
	web := okServer(t)
	w := startBackground(t, "watch", addr, "--reconnect", "60s")
	eventually(t, "the watch to start", func() bool { return strings.Contains(w.stderr.String(), "watching pulsed at "+p.Addr) })
	mustRun(t, "add", addr, "--name", "web-1", "--http", web.URL)
	waitLine(t, w, rfc3339+`web-1: unhealthy -> healthy$`)

	p.stop(t)
	eventually(t, "the watch to say it lost pulsed", func() bool { return strings.Contains(w.stderr.String(), "lost pulsed at "+p.Addr) })
	startPulsed(t, "-listen", p.Addr, "-data-dir", dir)
	eventually(t, "the watch to reconnect\n"+w.stderr.String(), func() bool {
		return strings.Contains(w.stderr.String(), "reconnected to pulsed at "+p.Addr)
	})
	mustRun(t, "rm", addr, "web-1")
	waitLine(t, w, rfc3339+`web-1: removed$`)
	if code := w.stop(t); code != exitOK {
		t.Errorf("watch: exit %d\n%s", code, w.stderr.String())
	}
	seen := map[string]int{}
	for _, l := range lines(w.stdout.String()) {
		if f := strings.SplitN(l, " ", 2); len(f) == 2 {
			seen[f[1]]++
		}
	}
	for line, n := range seen {
		if n > 1 {
			t.Errorf("%q printed %d times", line, n)
		}
	}
}

// A text line says why: a transition's reason and probe error when its
// text does not, and policy events as their text.
// An update says what it changed when the watch knows the target's spec
// before it (from the snapshot, or an event since), and names the probe
// when it does not (after a --since resume). A probe's own fields are
// named, not shown: a header may hold a secret.
func TestWatchUpdateSaysWhatChanged(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	p := &watchPrinter{now: func() time.Time { return at }}
	web := func(interval time.Duration, header string) *pb.Target {
		return &pb.Target{Name: "web-1", Interval: durationpb.New(interval), Probe: &pb.Target_Http{Http: &pb.HttpProbe{
			Url: "http://127.0.0.1:8080/healthz", Headers: map[string]string{"Authorization": header}}}}
	}
	withHeader := func(t *pb.Target, name string) *pb.Target {
		t.GetHttp().Headers[name] = redacted
		return t
	}
	withURL := func(t *pb.Target, url string) *pb.Target {
		t.GetHttp().Url = url
		return t
	}
	withCA := func(t *pb.Target, ca string) *pb.Target {
		t.GetHttp().Tls = &pb.TlsOptions{CaFile: ca}
		return t
	}
	withTLS := func(t *pb.Target) *pb.Target { return withCA(t, "ca.pem") }
	grpc := func(md map[string]string) *pb.Target {
		return &pb.Target{Name: "web-1", Interval: durationpb.New(3 * time.Second), Probe: &pb.Target_Grpc{Grpc: &pb.GrpcProbe{
			Address: "127.0.0.1:50051", Metadata: md}}}
	}
	status := func(t *pb.Target) *pb.TargetStatus {
		return &pb.TargetStatus{Spec: t, State: pb.State_STATE_HEALTHY, Source: "api"}
	}
	withStatus := func(ev *pb.WatchTransitionsResponse, source, quarantined string) *pb.WatchTransitionsResponse {
		st := ev.GetUpdated()
		if st == nil {
			st = ev.GetSnapshot()
		}
		st.Source, st.Quarantined = source, quarantined
		return ev
	}
	snapshot := func(t *pb.Target) *pb.WatchTransitionsResponse {
		return &pb.WatchTransitionsResponse{Event: &pb.WatchTransitionsResponse_Snapshot{Snapshot: status(t)}}
	}
	updated := func(t *pb.Target) *pb.WatchTransitionsResponse {
		return &pb.WatchTransitionsResponse{Event: &pb.WatchTransitionsResponse_Updated{Updated: status(t)}}
	}
	removed := &pb.WatchTransitionsResponse{Event: &pb.WatchTransitionsResponse_Removed{Removed: &pb.TargetRemoved{Name: "web-1"}}}
	for i, tt := range []struct {
		ev   *pb.WatchTransitionsResponse
		want string
	}{
		{updated(web(2*time.Second, "Bearer a")), "2026-12-01T10:00:00Z web-1: updated (http GET http://127.0.0.1:8080/healthz, headers Authorization=<redacted>)"},
		{updated(web(5*time.Second, "Bearer a")), "2026-12-01T10:00:00Z web-1: updated: interval 2s -> 5s"},
		{updated(web(5*time.Second, "Bearer b")), "2026-12-01T10:00:00Z web-1: updated: http.headers changed"},
		{removed, "2026-12-01T10:00:00Z web-1: removed"},
		{updated(web(time.Second, "Bearer b")), "2026-12-01T10:00:00Z web-1: updated (http GET http://127.0.0.1:8080/healthz, headers Authorization=<redacted>)"},
		{snapshot(web(time.Second, "Bearer b")), ""},
		{updated(web(3*time.Second, "Bearer b")), "2026-12-01T10:00:00Z web-1: updated: interval 1s -> 3s"},
		// A header added or removed is named, not the whole probe twice;
		// the probe is shown when more of it changed.
		{updated(withHeader(web(3*time.Second, redacted), "X-Env")), "2026-12-01T10:00:00Z web-1: updated: header X-Env added"},
		{updated(web(3*time.Second, redacted)), "2026-12-01T10:00:00Z web-1: updated: header X-Env removed"},
		// pulsed sends an update only for a spec that changed: when none
		// shows, a value it does not show changed.
		{updated(web(3*time.Second, redacted)), "2026-12-01T10:00:00Z web-1: updated: a value pulsed does not show changed (a header, a URL password, gRPC metadata or a TLS key)"},
		// Or the source, or the quarantine, which are not in the spec.
		{withStatus(updated(web(3*time.Second, redacted)), "file", ""), "2026-12-01T10:00:00Z web-1: updated: source api -> file"},
		{withStatus(snapshot(web(3*time.Second, redacted)), "api", "stored spec refused: egress policy"), ""},
		{withStatus(updated(web(3*time.Second, redacted)), "api", ""), "2026-12-01T10:00:00Z web-1: updated: out of quarantine"},
		{updated(withURL(withHeader(web(3*time.Second, redacted), "X-Env"), "http://127.0.0.1:8081/ready")),
			"2026-12-01T10:00:00Z web-1: updated: probe http GET http://127.0.0.1:8080/healthz -> http GET http://127.0.0.1:8081/ready, header X-Env added"},
		{updated(withTLS(withURL(web(3*time.Second, redacted), "http://127.0.0.1:8081/ready"))),
			"2026-12-01T10:00:00Z web-1: updated: probe http GET http://127.0.0.1:8081/ready -> http GET http://127.0.0.1:8081/ready (tls options), header X-Env removed"},
		{updated(withHeader(withTLS(withURL(web(3*time.Second, redacted), "http://127.0.0.1:8081/ready")), "X-Env")), "2026-12-01T10:00:00Z web-1: updated: header X-Env added"},
		{updated(withCA(withURL(web(3*time.Second, redacted), "http://127.0.0.1:8081/ready"), "other.pem")),
			"2026-12-01T10:00:00Z web-1: updated: header X-Env removed, http.tls changed"},
		{updated(withHeader(withURL(web(3*time.Second, redacted), "http://127.0.0.1:8081/ready"), "X-Env")),
			"2026-12-01T10:00:00Z web-1: updated: probe http GET http://127.0.0.1:8081/ready (tls options) -> http GET http://127.0.0.1:8081/ready, header X-Env added"},
		{updated(grpc(map[string]string{"x-api-key": redacted})), "2026-12-01T10:00:00Z web-1: updated: probe http GET http://127.0.0.1:8081/ready, headers Authorization=<redacted> X-Env=<redacted> -> grpc 127.0.0.1:50051"},
		{updated(grpc(map[string]string{"x-tenant": redacted})), "2026-12-01T10:00:00Z web-1: updated: metadata x-api-key removed, metadata x-tenant added"},
	} {
		var b strings.Builder
		p.w = &b
		if err := p.print(tt.ev); err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSuffix(b.String(), "\n"); got != tt.want {
			t.Errorf("event %d: %q, want %q", i, got, tt.want)
		}
		if strings.Contains(b.String(), "Bearer") {
			t.Errorf("event %d printed a header's value: %q", i, b.String())
		}
	}
}

func TestWatchLineSaysWhy(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	p := &watchPrinter{now: func() time.Time { return at }}
	ts := timestamppb.New(at)
	for _, tt := range []struct {
		ev   *pb.WatchTransitionsResponse
		want string
	}{
		{&pb.WatchTransitionsResponse{Event: &pb.WatchTransitionsResponse_Transition{Transition: &pb.Transition{
			Target: "web-1", Time: ts, Text: "web-1: healthy -> unhealthy", Result: &pb.ProbeResult{Error: "status 503"},
		}}}, "2026-12-01T10:00:00Z web-1: healthy -> unhealthy: status 503"},
		{&pb.WatchTransitionsResponse{Event: &pb.WatchTransitionsResponse_Transition{Transition: &pb.Transition{
			Target: "web-2", Time: ts, Text: "web-2: healthy -> unhealthy", Reason: "draining: deploy 4711",
		}}}, "2026-12-01T10:00:00Z web-2: healthy -> unhealthy (draining: deploy 4711)"},
		{&pb.WatchTransitionsResponse{Event: &pb.WatchTransitionsResponse_Transition{Transition: &pb.Transition{
			Target: "web-3", Time: ts, Text: "web-3: healthy -> unhealthy (connection refused)", Result: &pb.ProbeResult{Error: "connection refused"},
		}}}, "2026-12-01T10:00:00Z web-3: healthy -> unhealthy (connection refused)"},
		{&pb.WatchTransitionsResponse{Event: &pb.WatchTransitionsResponse_Policy{Policy: &pb.PolicyEvent{
			Kind: pb.PolicyEvent_KIND_PANIC_ENTERED, Group: "edge", Time: ts, Text: "edge: panic entered, holding web-3 (2 of 4 down, at most 2)",
		}}}, "2026-12-01T10:00:00Z edge: panic entered, holding web-3 (2 of 4 down, at most 2)"},
		// Vantages: their verdicts when they decided the transition (its
		// reason), else after it; their events as their text, or, without
		// one, which vantage and its numbers.
		{&pb.WatchTransitionsResponse{Event: &pb.WatchTransitionsResponse_Transition{Transition: &pb.Transition{
			Target: "web-4", Time: ts, Text: "web-4: healthy -> unhealthy", Reason: "vantages: zone-a=unhealthy(connection refused) zone-b=unhealthy(connection refused) zone-c=healthy",
			Vantages: []*pb.VantageVerdict{
				{Label: "zone-a", State: pb.State_STATE_UNHEALTHY, Error: "connection refused"},
				{Label: "zone-b", State: pb.State_STATE_UNHEALTHY, Error: "connection refused"},
				{Label: "zone-c", State: pb.State_STATE_HEALTHY},
			},
		}}}, "2026-12-01T10:00:00Z web-4: healthy -> unhealthy (vantages: zone-a=unhealthy(connection refused) zone-b=unhealthy(connection refused) zone-c=healthy)"},
		{&pb.WatchTransitionsResponse{Event: &pb.WatchTransitionsResponse_Transition{Transition: &pb.Transition{
			Target: "web-5", Time: ts, Text: "web-5: unhealthy -> healthy", Reason: "mode active, was maintenance",
			Vantages: []*pb.VantageVerdict{{Label: "zone-a", State: pb.State_STATE_HEALTHY}, {Label: "zone-b"}},
		}}}, "2026-12-01T10:00:00Z web-5: unhealthy -> healthy (mode active, was maintenance) [vantages: zone-a=healthy zone-b=none]"},
		{&pb.WatchTransitionsResponse{Event: &pb.WatchTransitionsResponse_Policy{Policy: &pb.PolicyEvent{
			Kind: pb.PolicyEvent_KIND_VANTAGE_SUSPECT, Time: ts, Replica: "r2", Vantage: "zone-b", Disagree: 4, Judged: 6,
			Text: "vantage zone-b (r2) suspect: 4 of 6 targets unhealthy from it that the others see healthy",
		}}}, "2026-12-01T10:00:00Z vantage zone-b (r2) suspect: 4 of 6 targets unhealthy from it that the others see healthy"},
		{&pb.WatchTransitionsResponse{Event: &pb.WatchTransitionsResponse_Policy{Policy: &pb.PolicyEvent{
			Kind: pb.PolicyEvent_KIND_VANTAGE_SUSPECT, Time: ts, Replica: "r2", Vantage: "zone-b", Disagree: 4, Judged: 6,
		}}}, "2026-12-01T10:00:00Z vantage zone-b (replica r2) suspect: unhealthy from it for 4 of 6 targets the others see healthy; left out of every quorum"},
		{&pb.WatchTransitionsResponse{Event: &pb.WatchTransitionsResponse_Policy{Policy: &pb.PolicyEvent{
			Kind: pb.PolicyEvent_KIND_VANTAGE_RECOVERED, Time: ts, Replica: "r2", Vantage: "zone-b", Disagree: 1, Judged: 6,
		}}}, "2026-12-01T10:00:00Z vantage zone-b (replica r2) recovered: disagrees on 1 of 6 targets"},
	} {
		if got := p.line(tt.ev); got != tt.want {
			t.Errorf("line = %q\nwant   %q", got, tt.want)
		}
	}
}
