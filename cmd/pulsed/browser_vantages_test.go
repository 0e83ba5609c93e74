package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker/etcdreg/etcdtest"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// The status page of a replica shows a target probed from three zones
// with one chip per vantage, coloured by its verdict; the chips follow
// the target down without a reload, and its history lists the verdicts
// with their errors and names its owner; a target another replica probes
// says which one keeps its history and links to that one's page, which
// the link opens on the target's details, with the history it keeps.
// Skips without chromium, as TestStatusPageInBrowser.
func TestStatusPageVantagesInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs pulsed, etcd and chromium")
	}
	chromium := findChromium()
	if chromium == "" {
		if os.Getenv("PULSE_BROWSER_TEST") == "require" {
			t.Fatal("chromium is not installed; run scripts/browser-test")
		}
		t.Skip("chromium is not installed; run scripts/browser-test")
	}
	artifacts, err := filepath.Abs(filepath.Join("..", "..", "test-artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	etcd := etcdtest.Start(t, time.Second)
	bin := buildPulsed(t)
	var reps [3]*pulsed
	for i := range reps {
		reps[i] = startPulsed(t, bin, "-registry", "etcd", "-etcd-endpoints", etcd.Endpoint, "-etcd-prefix", e2ePrefix,
			"-etcd-lease-ttl", "3s", "-replica-id", fmt.Sprintf("r%d", i+1), "-vantage", fmt.Sprintf("zone-%c", 'a'+i),
			"-interval", "200ms", "-timeout", "150ms", "-rise", "1", "-fall", "1")
	}
	client := dial(t, reps[0].Addr)
	eventually(t, "three replicas", func() bool { return len(listTargets(t, client).GetChecker().GetReplicas()) == 3 })
	backend := newSwitchServer(t)
	if _, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: &pb.Target{
		Name: "web-1", Vantages: 3, Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: backend.URL}},
	}}); err != nil {
		t.Fatal(err)
	}
	base := httpBase(reps[1])

	b := startChromium(t, chromium)
	page := b.newPage(t)
	page.call(t, "Page.enable", nil, nil)
	page.call(t, "Runtime.enable", nil, nil)
	page.call(t, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 720, "deviceScaleFactor": 1, "mobile": false}, nil)
	page.call(t, "Page.navigate", map[string]any{"url": base + "/"}, nil)
	page.waitFor(t, `document.getElementById("conn").dataset.conn`, "live")
	chips := `[...document.querySelectorAll('tr[data-name="web-1"] .vt')].map((s) => s.textContent + "=" + s.dataset.state).sort().join(" ")`
	page.waitFor(t, chips, "zone-a=healthy zone-b=healthy zone-c=healthy")
	page.screenshot(t, filepath.Join(artifacts, "status-page-vantages.png"))

	backend.down.Store(true)
	page.waitFor(t, `document.querySelector('tr[data-name="web-1"]').dataset.state`, "unhealthy")
	page.waitFor(t, chips, "zone-a=unhealthy zone-b=unhealthy zone-c=unhealthy")
	page.evaluate(t, `document.querySelector('tr[data-name="web-1"] td.name').click(); ""`)
	page.waitFor(t, `document.getElementById("detail").dataset.loaded`, "1")
	page.waitFor(t, `String(document.getElementById("detail-vantages").textContent.includes("zone-b=unhealthy(status 503)"))`, "true")
	// The details name the owner, the first vantage, and whether it is
	// the replica serving the page (r2).
	st, err := client.State(t.Context(), &pb.StateRequest{Name: "web-1"})
	if err != nil {
		t.Fatal(err)
	}
	owner := "probed by replica " + st.GetStatus().GetOwner()
	if o := st.GetStatus().GetOwner(); o != st.GetStatus().GetVantages()[0].GetMember() {
		t.Errorf("owner %q, vantages %v; want the owner first", o, st.GetStatus().GetVantages())
	} else if o == "r2" {
		owner += " (this one)"
	}
	page.waitFor(t, `document.getElementById("detail-owner").textContent`, owner)
	page.screenshot(t, filepath.Join(artifacts, "status-page-vantages-down.png"))

	// A target another replica probes alone: r2's page has no probe of
	// it, and its details say which replica keeps its history.
	var other, keeper string
	for i := 1; i <= 8 && other == ""; i++ {
		name := fmt.Sprintf("solo-%d", i)
		resp, err := client.AddTarget(t.Context(), &pb.AddTargetRequest{Target: &pb.Target{
			Name: name, Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: backend.URL}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if o := resp.GetStatus().GetOwner(); o != "r2" {
			other, keeper = name, o
		}
	}
	if other == "" {
		t.Fatal("r2 owns all of solo-1 to solo-8")
	}
	page.waitFor(t, fmt.Sprintf(`String(!!document.querySelector('tr[data-name=%q] td.name'))`, other), "true")
	page.evaluate(t, fmt.Sprintf(`document.querySelector('tr[data-name=%q] td.name').click(); ""`, other))
	page.waitFor(t, `document.getElementById("detail").dataset.loaded`, "1")
	page.waitFor(t, `document.getElementById("detail-msg").textContent`,
		"no probe of it recorded by this replica: replica "+keeper+" probes it and keeps its history (open its status page)")
	// The link opens the keeper's page, as it advertises it, on the same
	// target; r2's URL names the target while its details are open.
	var keeperAt *pulsed
	for i, p := range reps {
		if fmt.Sprintf("r%d", i+1) == keeper {
			keeperAt = p
		}
	}
	href := page.evaluate(t, `(() => { const a = document.querySelector("#detail-msg a"); return a ? a.href : ""; })()`)
	if want := httpBase(keeperAt) + "/?q=" + other + "&target=" + other; href != want {
		t.Fatalf("the details of %s link to %q, want %q", other, href, want)
	}
	page.waitFor(t, `location.search`, "?target="+other)
	page.evaluate(t, `document.getElementById("detail-close").click(); ""`)
	page.waitFor(t, `location.search`, "")
	if n := page.navigations(); n != 1 {
		t.Errorf("%d navigations of the page, want the first only", n)
	}

	owned := b.newPage(t)
	owned.call(t, "Page.enable", nil, nil)
	owned.call(t, "Runtime.enable", nil, nil)
	owned.call(t, "Page.navigate", map[string]any{"url": href}, nil)
	owned.waitFor(t, `document.getElementById("detail").dataset.loaded`, "1")
	// The owner comes from the target's row: the details open once the
	// list is loaded.
	owned.waitFor(t, `document.getElementById("detail-name").textContent + ": " + document.getElementById("detail-owner").textContent`,
		other+": probed by replica "+keeper+" (this one)")
	if msg := owned.evaluate(t, `document.getElementById("detail-msg").textContent`); strings.Contains(msg, "keeps its history") {
		t.Errorf("on %s's own page, %s's details say %q", keeper, other, msg)
	}
	if up := owned.evaluate(t, `document.querySelector('#detail-uptime dd[data-window="1h"]').textContent`); up == "—" {
		t.Errorf("on %s's own page, %s's uptime over 1h is %q, want the probes it recorded", keeper, other, up)
	}
	if got := owned.evaluate(t, `location.search`); got != "?q="+other+"&target="+other {
		t.Errorf("%s's page lost the target from its URL: %q", keeper, got)
	}
	owned.screenshot(t, filepath.Join(artifacts, "status-page-keeper.png"))
	if errs := page.exceptions(); len(errs) > 0 {
		t.Errorf("the pages threw: %v", errs)
	}
	b.close(t)
}

// httpBase is the URL of p's HTTP listener, as p logs it, without a
// trailing slash.
func httpBase(p *pulsed) string {
	return "http://" + regexp.MustCompile(`msg="http listening" .*addr=(\S+)`).FindStringSubmatch(p.Logs())[1]
}
