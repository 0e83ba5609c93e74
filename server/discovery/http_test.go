package discovery

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// sdServer is a real HTTP SD endpoint on loopback whose answer a test sets.
type sdServer struct {
	mu     sync.Mutex
	status int
	body   string
	delay  time.Duration
	stop   chan struct{}
}

func (s *sdServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	status, body, delay := s.status, s.body, s.delay
	s.mu.Unlock()
	if delay > 0 {
		select { // a slow answer, until the client gives up or the test ends
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		case <-s.stop:
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprint(w, body)
}

func (s *sdServer) set(status int, body string, delay time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.body, s.delay = status, body, delay
}

func sumCounter(t *testing.T, metrics *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// TestManagerHTTPSource follows a real HTTP SD endpoint on loopback through
// error statuses, bad JSON, a slow answer and a huge one: each failure is
// counted and the last good set stays.
func TestManagerHTTPSource(t *testing.T) {
	sd := &sdServer{status: 200, body: `[{"targets": ["127.0.0.1:1", "127.0.0.1:2"]}]`, stop: make(chan struct{})}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(sd)
	srv.Listener.Close()
	srv.Listener = lis
	srv.Start()
	defer srv.Close()
	defer close(sd.stop)

	reg := newFakeRegistry()
	m, metrics := startManager(t, fmt.Sprintf(`
groups:
  - name: h
    http_sd_configs:
      - url: %s/sd
        refresh_interval: 200ms
        authorization: {credentials: hunter2}
    template: {tcp: {}}
    on_disappear: remove
`, srv.URL), reg)
	const good = "h-127.0.0.1:1=active h-127.0.0.1:2=active"
	waitFor(t, "first answer", reg.modes, good)

	var huge strings.Builder
	huge.WriteString(`[{"targets": [`)
	for i := range MaxTargetsPerGroup + 1 {
		if i > 0 {
			huge.WriteString(",")
		}
		fmt.Fprintf(&huge, `"127.0.%d.%d:80"`, i/250, i%250+1)
	}
	huge.WriteString(`]}]`)

	for _, c := range []struct {
		name   string
		status int
		body   string
		delay  time.Duration
		metric string
	}{
		{"500", 500, "oops", 0, "pulse_discovery_prometheus_sd_http_failures_total"},
		{"404", 404, "", 0, "pulse_discovery_prometheus_sd_http_failures_total"},
		{"bad JSON", 200, `[{"targets": [`, 0, "pulse_discovery_prometheus_sd_http_failures_total"},
		{"slow", 200, `[]`, time.Minute, "pulse_discovery_prometheus_sd_http_failures_total"},
		{"huge", 200, huge.String(), 0, "pulse_discovery_answers_refused_total"},
	} {
		before := sumCounter(t, metrics, c.metric)
		sd.set(c.status, c.body, c.delay)
		waitFor(t, c.name+" counted", func() string { return fmt.Sprint(sumCounter(t, metrics, c.metric) > before) }, "true")
		if got := reg.modes(); got != good {
			t.Fatalf("after %s: %s, want the last good set", c.name, got)
		}
	}
	for _, st := range m.Status() {
		if strings.Contains(st.LastError, "hunter2") {
			t.Errorf("status quotes a secret: %+v", st)
		}
	}

	sd.set(200, `[{"targets": ["127.0.0.1:3"]}]`, 0)
	waitFor(t, "a good answer again", reg.modes, "h-127.0.0.1:3=active")
}
