package main

import (
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// browserStates is the part of TestStatusPageInBrowser about what the page
// must tell beyond up and down. It starts with web-1 down and web-2 up in
// group edge (whose panic threshold, pulsed's default 0.5, lets one of its
// two targets be marked unhealthy), and checks, in a real browser:
//   - a target removed and added again under its name shows none of the
//     old target's results, and "down since added";
//   - a target its group's panic holds shows "held: panic in edge", and
//     the group says it is in panic;
//   - a flapping target shows "flapping", and the rows are in severity
//     order (flapping, unhealthy, held);
//   - a draining target has a colour of its own, counts in its group's
//     draining column rather than as a failure, and the fleet summary
//     names what needs attention apart from planned work;
//   - the state filter offers every state pulsectl ls --state takes, no
//     streak reads N/M with N > M, and no name wraps;
//   - at a phone's width (400px) nothing scrolls sideways, every target's
//     error is on screen, and more than three cards fit on one screen.
func browserStates(t *testing.T, page *page, client pb.HealthCheckerClient, other, third *switchServer, artifacts string) {
	t.Helper()
	rowState := func(name string) string {
		return `(() => { const tr = document.querySelector('tr[data-name="` + name + `"]'); return tr ? tr.dataset.state + " " + tr.querySelector(".badge").textContent : ""; })()`
	}
	cellOf := func(name, cls string) string {
		return `(() => { const td = document.querySelector('tr[data-name="` + name + `"] td.` + cls + `'); return td ? td.textContent : ""; })()`
	}
	count := func(name, sel string) int {
		n, _ := strconv.Atoi(page.evaluate(t, `String(document.querySelectorAll('tr[data-name="`+name+`"] `+sel+`').length)`))
		return n
	}

	// The fix: web-2, passing until now, is removed and added again under
	// its name, probing a closed port. Its row must show none of the old
	// target's passes from the first moment it shows a result.
	if _, err := client.RemoveTarget(t.Context(), &pb.RemoveTargetRequest{Name: "web-2"}); err != nil {
		t.Fatal(err)
	}
	addHTTPTarget(t, client, "web-2", "http://"+closedAddr(t))
	deadline := time.Now().Add(30 * time.Second)
	for page.evaluate(t, cellOf("web-2", "since")) != "down since added" || count("web-2", ".strip span.fail") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("web-2 added again: since %q, %d failures in its strip after 30s", page.evaluate(t, cellOf("web-2", "since")), count("web-2", ".strip span.fail"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := count("web-2", ".strip span.pass"); n != 0 {
		t.Errorf("web-2, added again, shows %d passes of the removed target", n)
	}
	if got := page.evaluate(t, cellOf("web-2", "uptime")); got != "0%" {
		t.Errorf("web-2's uptime over its own results shows %q, want 0%%", got)
	}
	page.screenshot(t, filepath.Join(artifacts, "status-page-readded.png"))
	addHTTPTarget(t, client, "web-2", other.URL) // back to its backend, keeping its results
	page.waitFor(t, rowState("web-2"), "healthy UP")

	// Held: web-2 fails too, but edge may have only one target unhealthy.
	other.down.Store(true)
	page.waitFor(t, `(() => { const tr = document.querySelector('tr[data-name="web-2"]'); return tr ? tr.dataset.held + " " + tr.querySelector(".tags").textContent : ""; })()`, "1 held: panic in edge")
	if got := page.evaluate(t, rowState("web-2")); !strings.HasPrefix(got, "healthy UP") {
		t.Errorf("held web-2 shows %q, want healthy (routable)", got)
	}
	page.waitFor(t, `document.querySelector('tr[data-group="edge"] td.n-held').textContent`, "panic: 1 held")
	page.evaluate(t, `document.getElementById("legend").open = true; ""`)
	page.screenshot(t, filepath.Join(artifacts, "status-page-held.png"))

	// Flapping: a target that rises and falls twice within its window.
	_, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: &pb.Target{
		Name: "flappy", Group: "lab", Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: third.URL + "/healthz"}},
		Rise: ptrTo[int32](1), Fall: ptrTo[int32](1), FlapThreshold: 2,
	}})
	if err != nil {
		t.Fatal(err)
	}
	page.waitFor(t, rowState("flappy"), "healthy UP")
	third.down.Store(true)
	page.waitFor(t, `(() => { const tr = document.querySelector('tr[data-name="flappy"]'); return tr ? tr.dataset.state + " " + tr.dataset.flapping + " " + tr.querySelector(".tags").textContent : ""; })()`, "unhealthy 1 flapping")
	third.down.Store(false) // its results pass again; damping keeps it down
	page.waitFor(t, `[...document.querySelectorAll("#targets tbody tr")].map((tr) => tr.dataset.name).join(" ")`, "flappy web-1 web-2")
	page.screenshot(t, filepath.Join(artifacts, "status-page-flapping.png"))

	// Draining: the badge says DRAIN and the tags give the operator's reason.
	if _, err := client.SetMode(t.Context(), &pb.SetModeRequest{Target: "flappy", Mode: pb.Mode_MODE_DRAINING, Reason: "deploy 4711"}); err != nil {
		t.Fatal(err)
	}
	page.waitFor(t, `(() => { const tr = document.querySelector('tr[data-name="flappy"]'); return tr ? tr.querySelector(".badge").textContent + " " + tr.querySelector(".tags .mode").textContent : ""; })()`, "DRAIN draining: deploy 4711")
	badgeColour := func(name string) string {
		return page.evaluate(t, `getComputedStyle(document.querySelector('tr[data-name="`+name+`"] .badge')).backgroundColor`)
	}
	if drain, down := badgeColour("flappy"), badgeColour("web-1"); drain == down || drain == "" {
		t.Errorf("a draining target's badge is %q, a down one's %q: planned work must not look like an outage", drain, down)
	}
	page.waitFor(t, `document.querySelector('tr[data-group="lab"] td.n-draining').textContent + " " + document.querySelector('tr[data-group="lab"] td.n-unhealthy').textContent`, "1 0")
	page.waitFor(t, `document.getElementById("summary").dataset.level`, "attention")
	if got := page.evaluate(t, `document.getElementById("summary").textContent`); !strings.Contains(got, "1 target down") || !strings.Contains(got, "1 group in panic") || !strings.Contains(got, "planned: 1 draining") {
		t.Errorf("the fleet summary reads %q; want the target down, the group in panic, and the drain as planned work", got)
	}
	offered := page.evaluate(t, `[...document.querySelectorAll("#state option")].map((o) => o.value).join(" ")`)
	for _, st := range []string{"healthy", "unhealthy", "suspect", "routable", "not-routable", "held", "flapping", "carried-over", "quarantined", "draining", "maintenance"} {
		if !slices.Contains(strings.Fields(offered), st) {
			t.Errorf("the state filter offers %q, without %s", offered, st)
		}
	}
	page.evaluate(t, `document.getElementById("state").value = "draining"; document.getElementById("state").dispatchEvent(new Event("change")); ""`)
	page.waitFor(t, `[...document.querySelectorAll("#targets tbody tr")].map((tr) => tr.dataset.name).join(" ")`, "flappy")
	page.evaluate(t, `document.getElementById("state").value = ""; document.getElementById("state").dispatchEvent(new Event("change")); ""`)
	page.waitFor(t, `String(document.querySelectorAll("#targets tbody tr").length)`, "3")
	if got := page.evaluate(t, `[...document.querySelectorAll("#targets .badge")].map((b) => b.textContent).filter((s) => { const m = s.match(/(\d+)\/(\d+)/); return m && Number(m[1]) > Number(m[2]); }).join(", ")`); got != "" {
		t.Errorf("streaks past their threshold: %s", got)
	}
	if got := page.evaluate(t, `[...document.querySelectorAll("#targets td.name, #groups td:first-child")].filter((td) => { const r = document.createRange(); r.selectNodeContents(td); return r.getClientRects().length > 1; }).map((td) => td.textContent).join(", ")`); got != "" {
		t.Errorf("names wrap: %s", got)
	}
	page.screenshot(t, filepath.Join(artifacts, "status-page-draining.png"))

	// A phone: 400 CSS pixels wide.
	page.evaluate(t, `document.getElementById("legend").open = false; ""`)
	page.call(t, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 400, "height": 860, "deviceScaleFactor": 2, "mobile": true}, nil)
	page.waitFor(t, `String(window.innerWidth)`, "400")
	if got := page.evaluate(t, `String(Math.max(document.documentElement.scrollWidth, document.body.scrollWidth))`); got != "400" {
		t.Errorf("at 400px the page is %spx wide: it scrolls sideways", got)
	}
	if got := page.evaluate(t, `[...document.querySelectorAll("#targets td.err")].filter((td) => { const r = td.getBoundingClientRect(); return td.textContent !== "" && (r.right > 400 || r.width === 0); }).length + ""`); got != "0" {
		t.Errorf("at 400px %s error cells are off screen or hidden", got)
	}
	if got := page.evaluate(t, cellOf("web-1", "err")); !strings.Contains(got, "status 503") {
		t.Errorf("at 400px web-1's error shows %q", got)
	}
	perScreen := page.evaluate(t, `(() => { const rows = [...document.querySelectorAll("#targets tbody tr")]; const h = Math.max(...rows.map((tr) => tr.getBoundingClientRect().height + 6)); return String(Math.floor(window.innerHeight / h)); })()`)
	if n, _ := strconv.Atoi(perScreen); n <= 3 {
		t.Errorf("at 400x860 a screen holds %s target cards, want more than three", perScreen)
	}
	t.Logf("at 400x860 a screen holds %s target cards", perScreen)
	page.screenshot(t, filepath.Join(artifacts, "status-page-phone.png"))
	page.call(t, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 720, "deviceScaleFactor": 1, "mobile": false}, nil)
}

func ptrTo[T any](v T) *T { return &v }

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
