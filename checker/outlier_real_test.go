package checker_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/outlier"
	"github.com/pulsehealth/pulse/checker/probe"
)

// Real HTTP backends on loopback, each answering after its own delay: in
// a group of uniformly slow members (about 60ms each) plus one far slower
// (400ms), only the far slower one becomes an outlier; enforced, it is
// ejected, never more than one of the group at once; when it speeds up it
// is back once its ejection time is up.
func TestOutliersAgainstRealSlowBackends(t *testing.T) {
	delays := map[string]*atomic.Int64{}
	urls := map[string]string{}
	for _, n := range []string{"s1", "s2", "s3", "s4", "slowest", "slower"} {
		d := new(atomic.Int64)
		d.Store(int64(60 * time.Millisecond))
		delays[n] = d
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-time.After(time.Duration(d.Load())):
			case <-r.Context().Done():
			}
			io.WriteString(w, "ok")
		}))
		t.Cleanup(srv.Close)
		urls[n] = srv.URL + "/healthz"
	}
	delays["slowest"].Store(int64(400 * time.Millisecond))
	delays["slower"].Store(int64(300 * time.Millisecond))
	c, err := checker.New(checker.Config{MaxUnhealthyFraction: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.SetGroupPolicy("edge", checker.GroupPolicy{Outlier: outlier.Policy{
		LatencyFactor: 3, Consecutive: 2, Samples: 5, Interval: time.Second, Enforce: true, MaxEjectionPercent: 10, BaseEjectionTime: 2 * time.Second,
	}}); err != nil {
		t.Fatal(err)
	}
	for n, u := range urls {
		s := checker.Spec{Name: n, Group: "edge", Probe: probe.Spec{HTTP: &probe.HTTPSpec{URL: u}},
			Interval: 500 * time.Millisecond, Timeout: 500 * time.Millisecond, Rise: 1, Fall: 1, InitialState: checker.StateHealthy}
		if _, _, err := c.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	w, err := c.Watch(checker.Filter{}, c.Revision())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	c.Start()

	// The two far slower ones are outliers; with six members and 10%, one
	// is ejected and the other degraded.
	waitFor(t, "both far slower members outliers", func() bool {
		a, _ := c.Status("slowest")
		b, _ := c.Status("slower")
		return a.Outlier != nil && b.Outlier != nil
	})
	ejected := 0
	for _, n := range []string{"slowest", "slower"} {
		st, _ := c.Status(n)
		if st.Outlier.Ejected {
			ejected++
			if st.Routable || !strings.HasPrefix(st.Outlier.Reason, "p50 ") {
				t.Errorf("%s ejected but routable %v, reason %q", n, st.Routable, st.Outlier.Reason)
			}
		} else if !strings.Contains(st.Outlier.Reason, "not ejected") || st.Weight != outlier.Weight {
			t.Errorf("%s degraded: %+v, weight %d; want the cap named and weight %d", n, st.Outlier, st.Weight, outlier.Weight)
		}
	}
	if ejected != 1 {
		t.Errorf("%d of the group ejected at once; want 1 (10%% of 6, at least one)", ejected)
	}
	for _, n := range []string{"s1", "s2", "s3", "s4"} {
		if st, _ := c.Status(n); st.Outlier != nil || !st.Routable || st.Weight != 100 {
			t.Errorf("%s, as slow as its peers, is an outlier: %+v", n, st.Outlier)
		}
	}

	// Both speed up: no outliers left, every member routable at 100%.
	delays["slowest"].Store(int64(60 * time.Millisecond))
	delays["slower"].Store(int64(60 * time.Millisecond))
	waitFor(t, "no outliers left", func() bool {
		list, _ := c.List("edge")
		for _, st := range list {
			if st.Outlier != nil || !st.Routable {
				return false
			}
		}
		return true
	})
	evs, err := w.Next(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	started := 0
	for _, e := range evs {
		if e.Kind == checker.EventOutlierStarted {
			started++
			if n := e.Policy.Target; n != "slowest" && n != "slower" {
				t.Errorf("OUTLIER_STARTED for %s", n)
			}
		}
	}
	if started < 2 {
		t.Errorf("%d OUTLIER_STARTED events, want at least 2", started)
	}
}

// Real HTTP backends, one failing two requests in five: a client sends
// each 150 requests and reports every outcome (passive checks); at the
// next judgement the failing one is an outlier by its failure percentage,
// the others not.
func TestOutliersAgainstARealFailingBackend(t *testing.T) {
	urls := map[string]string{}
	for _, n := range []string{"f1", "f2", "f3", "bad"} {
		var count atomic.Int64
		bad := n == "bad"
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if bad && count.Add(1)%5 < 2 {
				http.Error(w, "overloaded", http.StatusServiceUnavailable)
				return
			}
			io.WriteString(w, "ok")
		}))
		t.Cleanup(srv.Close)
		urls[n] = srv.URL + "/"
	}
	c, err := checker.New(checker.Config{MaxUnhealthyFraction: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.SetGroupPolicy("api", checker.GroupPolicy{Outlier: outlier.Policy{
		FailurePercentage: 30, FailurePercentageRequestVolume: 100, Interval: time.Second,
	}}); err != nil {
		t.Fatal(err)
	}
	for n, u := range urls {
		s := checker.Spec{Name: n, Group: "api", Probe: probe.Spec{HTTP: &probe.HTTPSpec{URL: u + "healthz"}},
			Interval: time.Hour, Rise: 1, Fall: 1000, InitialState: checker.StateHealthy, PassiveOutcomes: true, PassiveRate: 10000}
		if _, _, err := c.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	c.Start()
	// The client's requests, and their outcomes reported as they come.
	for range 150 {
		for n, u := range urls {
			resp, err := http.Get(u)
			o := checker.Outcome{Pass: err == nil && resp.StatusCode == http.StatusOK}
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if !o.Pass {
					o.Err = resp.Status
				}
			}
			if _, _, err := c.ReportOutcome(n, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, "bad an outlier", func() bool { st, _ := c.Status("bad"); return st.Outlier != nil })
	if st, _ := c.Status("bad"); !strings.Contains(st.Outlier.Reason, "outcomes failed (40%)") || st.Outlier.Ejected {
		t.Errorf("bad: %+v; want degraded, 40%% of its outcomes failed", st.Outlier)
	}
	for _, n := range []string{"f1", "f2", "f3"} {
		if st, _ := c.Status(n); st.Outlier != nil {
			t.Errorf("%s is an outlier: %+v", n, st.Outlier)
		}
	}
}

// Real gRPC health servers on loopback, one answering 300ms late: it is
// the group's outlier, the others not.
func TestOutliersAgainstRealSlowGRPCBackends(t *testing.T) {
	addrs := map[string]string{}
	for _, n := range []string{"g1", "g2", "g3", "g4"} {
		delay := time.Duration(0)
		if n == "g4" {
			delay = 300 * time.Millisecond
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gs := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			select {
			case <-time.After(delay):
			case <-ctx.Done():
			}
			return h(ctx, req)
		}))
		healthpb.RegisterHealthServer(gs, health.NewServer())
		go gs.Serve(l)
		t.Cleanup(gs.Stop)
		addrs[n] = l.Addr().String()
	}
	c, err := checker.New(checker.Config{MaxUnhealthyFraction: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.SetGroupPolicy("rpc", checker.GroupPolicy{Outlier: outlier.Policy{
		LatencyFactor: 3, Consecutive: 1, Samples: 3, Interval: time.Second}}); err != nil {
		t.Fatal(err)
	}
	for n, a := range addrs {
		s := checker.Spec{Name: n, Group: "rpc", Probe: probe.Spec{GRPC: &probe.GRPCSpec{Address: a}},
			Interval: 400 * time.Millisecond, Timeout: 400 * time.Millisecond, Rise: 1, Fall: 1, InitialState: checker.StateHealthy}
		if _, _, err := c.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	c.Start()
	waitFor(t, "g4 an outlier", func() bool { st, _ := c.Status("g4"); return st.Outlier != nil })
	if st, _ := c.Status("g4"); !strings.HasPrefix(st.Outlier.Reason, "p50 3") || !st.Routable {
		t.Errorf("g4: %+v, routable %v; want degraded, p50 about 300ms", st.Outlier, st.Routable)
	}
	for _, n := range []string{"g1", "g2", "g3"} {
		if st, _ := c.Status(n); st.Outlier != nil {
			t.Errorf("%s is an outlier: %+v", n, st.Outlier)
		}
	}
}
