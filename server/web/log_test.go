package web_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server/web"
)

// logBuffer is a bytes.Buffer safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines decodes every JSON line written.
func (l *logBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON line: %v\n%s", err, line)
		}
		out = append(out, m)
	}
	return out
}

// logEnv wires loggers the way pulsed does with -log-format json: the
// checker's with component=checker, the observer's with component=probe.
func logEnv(t *testing.T, level slog.Level) (*env, *logBuffer) {
	t.Helper()
	buf := &logBuffer{}
	logger := slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: level}))
	obs := web.NewObserver(web.ObserverOptions{Logger: logger.With("component", "probe")})
	e := newEnv(t, checker.Config{Logger: logger.With("component", "checker"), Observer: obs}, web.Config{Observer: obs})
	return e, buf
}

// At info, a failing target logs one JSON line per transition, in the
// documented form with the attributes, and nothing per failed probe.
func TestTransitionLogIsJSONWithAttributes(t *testing.T) {
	e, buf := logEnv(t, slog.LevelInfo)
	e.add(t, checker.Spec{Name: "db-1", Group: "data", Model: checker.ModelThreeState, Probe: tcpSpec("db-1", "").Probe})
	e.add(t, tcpSpec("web-1", "edge"))
	e.set("web-1:80", outcome{})
	e.set("db-1:80", outcome{})
	e.rounds(2)
	e.set("web-1:80", outcome{err: errRefused{}})
	e.rounds(5) // the fall, then three failed probes of an unhealthy target
	// A model change that drops suspect is a transition with a reason.
	e.set("db-1:80", outcome{err: errRefused{}})
	e.rounds(1)
	e.add(t, checker.Spec{Name: "db-1", Group: "data", Probe: tcpSpec("db-1", "").Probe})

	ignore := cmpopts.IgnoreMapEntries(func(k string, _ any) bool { return k == "time" || k == "revision" })
	var got []map[string]any
	for _, l := range buf.lines(t) {
		if l["level"] != "INFO" {
			t.Errorf("a line at %v: %v", l["level"], l)
		}
		if _, ok := l["revision"].(float64); !ok {
			t.Errorf("no numeric revision: %v", l)
		}
		got = append(got, l)
	}
	want := []map[string]any{
		{"level": "INFO", "msg": "db-1: unhealthy -> suspect", "component": "checker", "target": "db-1", "group": "data", "from": "unhealthy", "to": "suspect"},
		{"level": "INFO", "msg": "db-1: suspect -> healthy", "component": "checker", "target": "db-1", "group": "data", "from": "suspect", "to": "healthy"},
		{"level": "INFO", "msg": "web-1: unhealthy -> healthy", "component": "checker", "target": "web-1", "group": "edge", "from": "unhealthy", "to": "healthy"},
		{"level": "INFO", "msg": "web-1: healthy -> unhealthy", "component": "checker", "target": "web-1", "group": "edge", "from": "healthy", "to": "unhealthy", "error": "connection refused"},
		{"level": "INFO", "msg": "db-1: healthy -> suspect", "component": "checker", "target": "db-1", "group": "data", "from": "healthy", "to": "suspect", "error": "connection refused"},
		{"level": "INFO", "msg": "db-1: suspect -> healthy", "component": "checker", "target": "db-1", "group": "data", "from": "suspect", "to": "healthy", "reason": "model changed to rise_fall"},
	}
	if diff := cmp.Diff(want, got, ignore); diff != "" {
		t.Errorf("log lines (-want +got):\n%s", diff)
	}
}

// At debug, each failed probe is logged too.
func TestProbeFailuresLoggedAtDebug(t *testing.T) {
	e, buf := logEnv(t, slog.LevelDebug)
	e.add(t, tcpSpec("web-1", "edge"))
	e.rounds(2)
	var failures []map[string]any
	for _, l := range buf.lines(t) {
		if l["msg"] == "probe failed" {
			failures = append(failures, l)
		}
	}
	want := map[string]any{"level": "DEBUG", "msg": "probe failed", "component": "probe", "target": "web-1", "group": "edge", "kind": "tcp", "error": "connection refused", "latency": "0s"}
	if len(failures) != 2 {
		t.Fatalf("%d probe failures logged at debug, want 2", len(failures))
	}
	if diff := cmp.Diff(want, failures[0], cmpopts.IgnoreMapEntries(func(k string, _ any) bool { return k == "time" })); diff != "" {
		t.Errorf("probe failure line (-want +got):\n%s", diff)
	}
}

type errRefused struct{}

func (errRefused) Error() string { return "connection refused" }
