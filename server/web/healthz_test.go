package web_test

import (
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server/web"
)

// /healthz is liveness: 503 with what stalled while Live says so, 200
// again once it clears; /readyz keeps its own meaning meanwhile.
func TestHealthzFollowsLive(t *testing.T) {
	var stalled atomic.Pointer[error]
	e := newEnv(t, checker.Config{}, web.Config{Live: func() error {
		if err := stalled.Load(); err != nil {
			return *err
		}
		return nil
	}})
	if code, body := get(t, e.srv.URL+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz while live: %d %q", code, body)
	}
	err := errors.New("scheduler: no progress for 41s")
	stalled.Store(&err)
	if code, body := get(t, e.srv.URL+"/healthz"); code != http.StatusServiceUnavailable || body != "not live: scheduler: no progress for 41s\n" {
		t.Errorf("/healthz while stalled: %d %q", code, body)
	}
	if code, body := get(t, e.srv.URL+"/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Errorf("/readyz while stalled: %d %q, want the readiness it had", code, body)
	}
	stalled.Store(nil)
	if code, body := get(t, e.srv.URL+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz once recovered: %d %q", code, body)
	}
}
