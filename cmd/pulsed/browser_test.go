package main

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The real-browser test of the status page: headless Chromium (Debian's
// chromium package) loads the page of a real pulsed with tokens and a real
// HTTP target. Without a token the page asks for one and shows no target
// data; a refused token is said so; with a read token the page shows the
// targets, targets added after it opened appear, the target fails and its
// row changes state, held, flapping and re-added targets show as such (see
// browserStates), the page fits a phone, all without a reload; signing out
// wipes the rows.
// Screenshots go to test-artifacts/ at the repository root.
//
// Without chromium the test skips, loudly; scripts/browser-test (make
// browser-test) installs chromium and sets PULSE_BROWSER_TEST=require, under
// which a missing chromium fails the test instead.
func TestStatusPageInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs pulsed and chromium")
	}
	chromium := findChromium()
	if chromium == "" {
		const banner = "\n##################################################################\n"
		msg := banner +
			"## SKIPPING the real-browser test: chromium is not installed.\n" +
			"## Run scripts/browser-test (make browser-test): it installs\n" +
			"## Debian's chromium package, then runs this test." + banner
		if os.Getenv("PULSE_BROWSER_TEST") == "require" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	artifacts, err := filepath.Abs(filepath.Join("..", "..", "test-artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}

	bin := buildPulsed(t)
	target := newSwitchServer(t)
	other := newSwitchServer(t)
	// A discovery group whose file is empty until the end: its target's
	// row must say which group found it.
	sdDir := t.TempDir()
	sdFile := filepath.Join(sdDir, "found.json")
	writeFile(t, sdFile, "[]")
	sdConfig := filepath.Join(sdDir, "discovery.yaml")
	writeFile(t, sdConfig, "groups:\n  - name: found\n    file_sd_configs: [{files: [found.json], refresh_interval: 200ms}]\n    template: {tcp: {}}\n")
	p, base := startPulsedJSON(t, bin, "-interval", "200ms", "-timeout", "150ms", "-rise", "2", "-fall", "3", "-token-file", writeTokenFile(t), "-discovery-config", sdConfig)
	client := dialToken(t, p.Addr, writeToken)
	addHTTPTarget(t, client, "web-1", target.URL)

	b := startChromium(t, chromium)
	page := b.newPage(t)
	page.call(t, "Page.enable", nil, nil)
	page.call(t, "Runtime.enable", nil, nil)
	page.call(t, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 720, "deviceScaleFactor": 1, "mobile": false}, nil)
	// A link to web-1's details, as another replica's page gives.
	page.call(t, "Page.navigate", map[string]any{"url": base + "/?target=web-1"}, nil)

	// Without a token: a prompt, and no target data anywhere on the page.
	page.waitFor(t, `document.getElementById("conn").dataset.conn`, "locked")
	page.waitFor(t, `String(!document.getElementById("login").hidden && document.getElementById("data").hidden)`, "true")
	if got := page.evaluate(t, `location.search`); got != "?target=web-1" {
		t.Errorf("the locked page's URL lost the target it opens after the sign-in: %q", got)
	}
	noData := func(when string) {
		t.Helper()
		if got := page.evaluate(t, `String(document.querySelectorAll("#targets tbody tr, #groups tbody tr").length)`); got != "0" {
			t.Errorf("%s: %s rows on the page, want none", when, got)
		}
		if got := page.evaluate(t, `String(document.documentElement.outerHTML.includes("web-1") || document.body.innerText.includes("edge"))`); got != "false" {
			t.Errorf("%s: the page shows target data", when)
		}
	}
	noData("without a token")
	page.screenshot(t, filepath.Join(artifacts, "status-page-token.png"))
	page.evaluate(t, `window.pulseNotReloaded = "yes"`)
	login := func(token string) {
		t.Helper()
		page.evaluate(t, `document.getElementById("token").value = "`+token+`"; document.getElementById("login-form").requestSubmit(); ""`)
	}
	login("not-a-known-token-at-all")
	page.waitFor(t, `String(document.getElementById("login-msg").textContent.includes("refused"))`, "true")
	noData("with a refused token")

	// A read token: the page fills in and follows the feed.
	login(readToken)
	page.waitFor(t, `document.getElementById("conn").dataset.conn`, "live")
	// The details the link asked for open once signed in.
	page.waitFor(t, `document.getElementById("detail-name").textContent + " " + document.getElementById("detail").dataset.loaded`, "web-1 1")
	page.evaluate(t, `document.getElementById("detail-close").click(); ""`)
	page.waitFor(t, `location.search`, "")
	rowState := func(name string) string {
		return `(() => { const tr = document.querySelector('tr[data-name="` + name + `"]'); return tr ? tr.dataset.state + " " + tr.querySelector(".badge").textContent : ""; })()`
	}
	page.waitFor(t, rowState("web-1"), "healthy UP")
	if got := page.evaluate(t, `String(location.href.includes("`+readToken+`") || document.cookie !== "")`); got != "false" {
		t.Errorf("the token is in the URL or a cookie")
	}
	// Targets added after the page opened appear from the feed's "added"
	// events.
	addHTTPTarget(t, client, "web-2", other.URL)
	page.waitFor(t, rowState("web-2"), "healthy UP")
	// The strip fills from the feed's results events.
	page.waitFor(t, `String(document.querySelectorAll('tr[data-name="web-1"] .strip span.pass').length >= 3)`, "true")
	page.screenshot(t, filepath.Join(artifacts, "status-page-healthy.png"))

	target.down.Store(true)
	// With fall 3 the row passes through "UP 1/3" and "UP 2/3" on its way.
	page.waitFor(t, rowState("web-1"), "unhealthy DOWN")
	if got := page.evaluate(t, `document.querySelector('tr[data-name="web-1"] td.err').textContent`); got != "status 503" {
		t.Errorf("web-1's last error shows %q, want status 503", got)
	}
	if got := page.evaluate(t, `document.querySelector('tr[data-group="edge"] td.n-unhealthy').textContent`); got != "1" {
		t.Errorf("edge's unhealthy count shows %q, want 1", got)
	}
	page.screenshot(t, filepath.Join(artifacts, "status-page-failed.png"))
	browserHistory(t, page, artifacts)

	browserStates(t, page, client, other, newSwitchServer(t), artifacts)
	browserOutlier(t, page, client, artifacts)

	// A discovered target: its row names the discovery group.
	writeFile(t, sdFile+".tmp", `[{"targets": ["127.0.0.1:9"]}]`)
	if err := os.Rename(sdFile+".tmp", sdFile); err != nil {
		t.Fatal(err)
	}
	page.waitFor(t, `(() => { const s = document.querySelector('tr[data-name="found-127.0.0.1:9"] td.name .src'); return s ? s.textContent : ""; })()`, "discovery:found")

	// Signing out forgets the token and wipes the rows.
	page.evaluate(t, `document.getElementById("signout").click(); ""`)
	page.waitFor(t, `document.getElementById("conn").dataset.conn`, "locked")
	noData("after signing out")
	if got := page.evaluate(t, `String(sessionStorage.getItem("pulse-token"))`); got != "null" {
		t.Errorf("the token is still in sessionStorage after signing out: %q", got)
	}

	if got := page.evaluate(t, `String(window.pulseNotReloaded)`); got != "yes" {
		t.Errorf("the page was reloaded (marker %q)", got)
	}
	if n := page.navigations(); n != 1 {
		t.Errorf("%d navigations of the page, want the first only", n)
	}
	if errs := page.exceptions(); len(errs) > 0 {
		t.Errorf("the page threw: %v", errs)
	}
	b.close(t)
	p.stop(t)
}

func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	return ""
}

// browser is headless Chromium driven over the DevTools protocol on a pipe
// (--remote-debugging-pipe: JSON messages ending in NUL, on fds 3 and 4), so
// no port is opened and nothing but this test can drive it.
type browser struct {
	cmd    *exec.Cmd
	toCDP  *os.File
	exited chan struct{} // closed when the reader has seen the pipe close

	mu        sync.Mutex
	nextID    int
	pending   map[int]chan cdpMessage
	navs      map[string]int // main-frame navigations by session
	thrown    []string
	readerErr error
}

type cdpMessage struct {
	ID        int             `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

func startChromium(t *testing.T, path string) *browser {
	t.Helper()
	toR, toW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fromR, fromW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio",
		"--user-data-dir="+t.TempDir(), "--remote-debugging-pipe", "about:blank")
	cmd.ExtraFiles = []*os.File{toR, fromW} // fd 3: commands in, fd 4: answers out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	toR.Close()
	fromW.Close()
	b := &browser{cmd: cmd, toCDP: toW, exited: make(chan struct{}), pending: map[int]chan cdpMessage{}, navs: map[string]int{}}
	go b.read(fromR)
	t.Cleanup(func() {
		select {
		case <-b.exited:
		default:
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-b.exited
		}
		toW.Close()
		cmd.Wait()
	})
	return b
}

func (b *browser) read(from *os.File) {
	defer close(b.exited)
	defer from.Close()
	r := bufio.NewReaderSize(from, 1<<20)
	for {
		raw, err := r.ReadBytes(0)
		if err != nil {
			b.mu.Lock()
			b.readerErr = err
			for id, ch := range b.pending {
				close(ch)
				delete(b.pending, id)
			}
			b.mu.Unlock()
			return
		}
		var m cdpMessage
		if json.Unmarshal(raw[:len(raw)-1], &m) != nil {
			continue
		}
		b.mu.Lock()
		switch {
		case m.ID != 0:
			if ch, ok := b.pending[m.ID]; ok {
				ch <- m
				delete(b.pending, m.ID)
			}
		case m.Method == "Page.frameNavigated":
			var p struct {
				Frame struct {
					ParentID string `json:"parentId"`
				} `json:"frame"`
			}
			if json.Unmarshal(m.Params, &p) == nil && p.Frame.ParentID == "" {
				b.navs[m.SessionID]++
			}
		case m.Method == "Runtime.exceptionThrown":
			b.thrown = append(b.thrown, string(m.Params))
		}
		b.mu.Unlock()
	}
}

// send calls method in session ("" for the browser) and decodes its result
// into result (if not nil), failing the test on an error or after 30s.
func (b *browser) send(t *testing.T, session, method string, params, result any) {
	t.Helper()
	b.mu.Lock()
	b.nextID++
	id := b.nextID
	ch := make(chan cdpMessage, 1)
	b.pending[id] = ch
	b.mu.Unlock()
	req := map[string]any{"id": id, "method": method}
	if params != nil {
		req["params"] = params
	}
	if session != "" {
		req["sessionId"] = session
	}
	msg, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.toCDP.Write(append(msg, 0)); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatalf("%s: chromium went away: %v", method, b.readerErr)
		}
		if m.Error != nil {
			t.Fatalf("%s: %d %s", method, m.Error.Code, m.Error.Message)
		}
		if result != nil {
			if err := json.Unmarshal(m.Result, result); err != nil {
				t.Fatalf("%s: %v", method, err)
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no answer within 30s", method)
	}
}

// page is one tab, attached with a flat session.
type page struct {
	b       *browser
	session string
}

func (b *browser) newPage(t *testing.T) *page {
	t.Helper()
	var created struct {
		TargetID string `json:"targetId"`
	}
	b.send(t, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &created)
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	b.send(t, "", "Target.attachToTarget", map[string]any{"targetId": created.TargetID, "flatten": true}, &attached)
	return &page{b: b, session: attached.SessionID}
}

func (p *page) call(t *testing.T, method string, params, result any) {
	t.Helper()
	p.b.send(t, p.session, method, params, result)
}

// evaluate returns the value of a JavaScript expression as a string ("" if
// it is not one).
func (p *page) evaluate(t *testing.T, expr string) string {
	t.Helper()
	var res struct {
		Result struct {
			Value any `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	p.call(t, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &res)
	if res.ExceptionDetails != nil {
		return "exception: " + res.ExceptionDetails.Text
	}
	s, _ := res.Result.Value.(string)
	return s
}

// waitFor polls expr until it evaluates to want, within 30s.
func (p *page) waitFor(t *testing.T, expr, want string) {
	t.Helper()
	p.waitForFunc(t, expr, func(got string) bool { return got == want }, "want %q", want)
}

// waitForFunc polls expr until ok says yes to its value, within 30s; what
// it wants is said by the format and args that follow.
func (p *page) waitForFunc(t *testing.T, expr string, ok func(string) bool, wantFormat string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var got string
	for {
		if got = p.evaluate(t, expr); ok(got) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %q after 30s, %s", expr, got, fmt.Sprintf(wantFormat, args...))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *page) screenshot(t *testing.T, path string) {
	t.Helper()
	var shot struct {
		Data string `json:"data"`
	}
	p.call(t, "Page.captureScreenshot", map[string]any{"format": "png"}, &shot)
	png, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

func (p *page) navigations() int {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	return p.b.navs[p.session]
}

func (p *page) exceptions() []string {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	return append([]string(nil), p.b.thrown...)
}

// close asks chromium to exit and waits for it, within 30s.
func (b *browser) close(t *testing.T) {
	t.Helper()
	msg, _ := json.Marshal(map[string]any{"id": 1 << 30, "method": "Browser.close"})
	b.toCDP.Write(append(msg, 0))
	select {
	case <-b.exited:
	case <-time.After(30 * time.Second):
		t.Error("chromium did not exit within 30s of Browser.close")
	}
}
