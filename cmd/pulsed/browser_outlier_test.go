package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// browserOutlier is the part of TestStatusPageInBrowser about gray
// failures: of four HTTP targets in group lag, one answers in 80ms and
// the others at once. In a real browser, its row must say it is an
// outlier and why, its group must count it, and the fleet summary name
// it; with enforce it is ejected (not routable) and says so; once it is
// as fast as its peers it is none.
func browserOutlier(t *testing.T, page *page, client pb.HealthCheckerClient, artifacts string) {
	t.Helper()
	var slow atomic.Int64
	slow.Store(int64(80 * time.Millisecond))
	for _, n := range []string{"lag-1", "lag-2", "lag-3", "lag-slow"} {
		delay := new(atomic.Int64)
		if n == "lag-slow" {
			delay = &slow
		}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-time.After(time.Duration(delay.Load())):
			case <-r.Context().Done():
			}
			io.WriteString(w, "ok")
		}))
		t.Cleanup(srv.Close)
		if _, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: &pb.Target{
			Name: n, Group: "lag", Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: srv.URL + "/healthz"}},
		}}); err != nil {
			t.Fatalf("AddTarget(%s): %v", n, err)
		}
	}
	policy := func(enforce bool) {
		t.Helper()
		if _, err := client.SetGroupPolicy(t.Context(), &pb.SetGroupPolicyRequest{Group: "lag", Policy: &pb.GroupPolicy{
			Outlier: &pb.OutlierPolicy{Interval: durationpb.New(time.Second), Samples: 3, LatencyFactor: 3, Consecutive: 1,
				Enforce: enforce, BaseEjectionTime: durationpb.New(time.Second)},
		}}); err != nil {
			t.Fatalf("SetGroupPolicy(lag): %v", err)
		}
	}
	policy(false)
	tag := `(() => { const s = document.querySelector('tr[data-name="lag-slow"] .tag.outlier'); return s ? s.className + " | " + s.textContent : ""; })()`
	page.waitForFunc(t, tag, func(got string) bool {
		return strings.HasPrefix(got, "tag outlier | outlier: p50 ") && strings.Contains(got, " vs group ")
	},
		"want an outlier tag with its p50 and the group's")
	page.waitFor(t, `document.querySelector('tr[data-group="lag"] td.n-held').textContent`, "1 outlier")
	page.waitFor(t, `String(document.getElementById("summary").textContent.includes("1 outlier"))`, "true")
	if got := page.evaluate(t, `String(document.querySelectorAll('#targets .tag.outlier').length)`); got != "1" {
		t.Errorf("%s outlier tags on the page, want lag-slow's alone", got)
	}
	page.screenshot(t, filepath.Join(artifacts, "status-page-outlier.png"))

	policy(true)
	page.waitForFunc(t, tag, func(got string) bool { return strings.HasPrefix(got, "tag outlier ejected | ejected: p50 ") },
		"want an ejected tag with its p50")
	page.screenshot(t, filepath.Join(artifacts, "status-page-outlier-ejected.png"))

	slow.Store(0)
	page.waitFor(t, tag, "")
	page.waitFor(t, `String(document.getElementById("summary").textContent.includes("outlier"))`, "false")
}
