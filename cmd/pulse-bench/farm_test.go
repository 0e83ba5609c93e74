package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/internal/testscale"
)

func newTestFarm(t *testing.T, n int) *Farm {
	t.Helper()
	f, err := NewFarm(FarmConfig{N: n})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// get probes a URL like a checker does and returns the status code.
func get(t *testing.T, client *http.Client, url string) int {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func testClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func TestFarmAddressesAreDistinctLoopbackAddresses(t *testing.T) {
	f := newTestFarm(t, 600)
	seen := map[string]bool{}
	for i := range f.Len() {
		ap := netip.MustParseAddrPort(f.Addr(i))
		a := ap.Addr()
		if !loopback.Contains(a) {
			t.Fatalf("target %d at %v, outside 127.0.0.0/8", i, a)
		}
		if b := a.As4(); b[3] == 0 || b[3] == 255 {
			t.Errorf("target %d at %v: host part 0 or 255", i, a)
		}
		if seen[a.String()] {
			t.Fatalf("target %d: address %v used twice", i, a)
		}
		seen[a.String()] = true
		if got := f.index(a); got != i {
			t.Fatalf("index(%v) = %d, want %d", a, got, i)
		}
	}
	for _, a := range []string{"127.1.0.0", "127.1.0.255", "127.0.0.1", "127.1.2.93", "10.0.0.1"} {
		if i := f.index(netip.MustParseAddr(a)); i != -1 {
			t.Errorf("index(%s) = %d, want -1", a, i)
		}
	}
	if got, want := f.Addr(0), "127.1.0.1:"; got[:len(want)] != want {
		t.Errorf("Addr(0) = %s, want 127.1.0.1:<port>", got)
	}
	if got := farmAddr(f.base, 254).String(); got != "127.1.1.1" {
		t.Errorf("the 255th target is at %s, want 127.1.1.1", got)
	}
}

// Each target counts the probes it answers, and only its own.
func TestFarmCountsProbesPerTarget(t *testing.T) {
	f := newTestFarm(t, 300)
	client := testClient(t)
	want := map[int]uint64{0: 3, 1: 1, 253: 2, 254: 1, 299: 4}
	for i, n := range want {
		for range n {
			if code := get(t, client, f.URL(i)); code != http.StatusOK {
				t.Fatalf("target %d answered %d, want 200", i, code)
			}
		}
	}
	var total uint64
	for i := range f.Len() {
		if got := f.Probes(i); got != want[i] {
			t.Errorf("target %d counted %d probes, want %d", i, got, want[i])
		}
		total += want[i]
	}
	snap := f.Snapshot()
	if snap.Probes != total {
		t.Errorf("the farm counted %d probes, want %d", snap.Probes, total)
	}
	// One keep-alive connection per target probed (the client keeps them).
	if snap.Conns != uint64(len(want)) {
		t.Errorf("the farm accepted %d connections, want %d", snap.Conns, len(want))
	}
	// Another path is not a probe.
	if code := get(t, client, "http://"+f.Addr(0)+"/other"); code != http.StatusNotFound {
		t.Errorf("GET /other answered %d, want 404", code)
	}
	if got := f.Probes(0); got != want[0] {
		t.Errorf("GET /other was counted: %d probes", got)
	}
}

// A connection to an address that is no target is closed unanswered.
func TestFarmRefusesOtherAddresses(t *testing.T) {
	f := newTestFarm(t, 2)
	port := netip.MustParseAddrPort(f.Addr(0)).Port()
	client := testClient(t)
	for _, a := range []string{"127.1.0.3", "127.0.0.1"} {
		resp, err := client.Get("http://" + netip.AddrPortFrom(netip.MustParseAddr(a), port).String() + "/healthz")
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s answered %d, want the connection closed", a, resp.StatusCode)
		}
	}
	if got := f.Snapshot().Probes; got != 0 {
		t.Errorf("%d probes counted, want 0", got)
	}
}

func TestFarmModes(t *testing.T) {
	f := newTestFarm(t, 3)
	client := testClient(t)
	if _, ok := f.FirstFail(1); ok {
		t.Fatal("a healthy target has a first failure")
	}
	f.SetMode([]int{1}, ModeFail)
	if code := get(t, client, f.URL(1)); code != http.StatusServiceUnavailable {
		t.Errorf("failing target answered %d, want 503", code)
	}
	first, ok := f.FirstFail(1)
	if !ok {
		t.Fatal("no first failure recorded")
	}
	get(t, client, f.URL(1))
	if again, _ := f.FirstFail(1); !again.Equal(first) {
		t.Errorf("the first failure moved from %v to %v on the second failure", first, again)
	}
	if code := get(t, client, f.URL(0)); code != http.StatusOK {
		t.Errorf("a target not switched answered %d", code)
	}
	f.SetMode([]int{1}, ModeOK)
	if _, ok := f.FirstFail(1); ok {
		t.Error("SetMode did not forget the first failure")
	}
	if code := get(t, client, f.URL(1)); code != http.StatusOK {
		t.Errorf("healed target answered %d, want 200", code)
	}

	// A hanging target answers nothing until the client gives up.
	f.SetMode([]int{2}, ModeHang)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.URL(2), nil)
	resp, err := client.Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("hanging target answered %d", resp.StatusCode)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("hanging target: %v, want the client's deadline", err)
	}
	// The client gives up after 50ms; on a loaded machine the farm may read
	// the request only after that, so wait for it to be counted.
	for deadline := time.Now().Add(testscale.D(10 * time.Second)); f.Probes(2) == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if _, ok := f.FirstFail(2); !ok {
		t.Error("a hang is not recorded as the first failure")
	}
	if got := f.Probes(2); got != 1 {
		t.Errorf("hanging target counted %d probes, want 1", got)
	}
}

// Close releases a request hanging on a target.
func TestFarmCloseReleasesHangingRequests(t *testing.T) {
	f, err := NewFarm(FarmConfig{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	f.SetMode([]int{0}, ModeHang)
	conn, err := net.Dial("tcp", f.Addr(0))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(testscale.D(10 * time.Second)); f.Probes(0) == 0; { // until the handler hangs
		if time.Now().After(deadline) {
			f.Close()
			t.Fatal("the hanging request never reached the farm's handler")
		}
		time.Sleep(time.Millisecond)
	}
	f.Close() // returns once the handler has let go
	f.Close() // idempotent
}

// The gaps between probes of one target are counted, and a gap longer
// than the late threshold counts as a late probe.
func TestFarmGapsAndLateProbes(t *testing.T) {
	f := newTestFarm(t, 2)
	f.SetLateAfter(1500 * time.Millisecond)
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	before := f.Snapshot()
	// Target 0: probes at 0, 1s, 2s, 4s (late), 5s; target 1: 0, 1s.
	for _, at := range []int64{0, 1000, 2000, 4000, 5000} {
		f.record(0, ms(1+at)) // +1: 0 means "never probed"
	}
	for _, at := range []int64{0, 1000} {
		f.record(1, ms(1+at))
	}
	d := f.Snapshot().Sub(before)
	if d.Probes != 7 || d.Late != 1 {
		t.Errorf("probes %d, late %d; want 7 and 1", d.Probes, d.Late)
	}
	if got := d.GapQuantile(0.5); got != 1010*time.Millisecond {
		t.Errorf("median gap %v, want 1.01s (the upper edge of 1s's bucket)", got)
	}
	if got := d.GapQuantile(1); got != 2010*time.Millisecond {
		t.Errorf("max gap %v, want 2.01s", got)
	}
	// After Forget the next probe starts a new series: no gap.
	f.Forget()
	f.record(1, ms(60000))
	if d := f.Snapshot().Sub(before); d.Late != 1 || d.GapQuantile(1) != 2010*time.Millisecond {
		t.Errorf("after Forget: late %d, max gap %v; want no new gap", d.Late, d.GapQuantile(1))
	}
	if got := (FarmSnapshot{Gaps: make([]uint64, 3)}).GapQuantile(0.99); got != 0 {
		t.Errorf("quantile without gaps = %v, want 0", got)
	}
}

func TestNewFarmRejectsBadConfigs(t *testing.T) {
	for _, cfg := range []FarmConfig{
		{N: 0},
		{N: 1, FirstAddr: netip.MustParseAddr("10.0.0.1")},
		{N: 1, FirstAddr: netip.MustParseAddr("127.1.0.2")},
		{N: 1, FirstAddr: netip.MustParseAddr("::1")},
		{N: 1 << 20, FirstAddr: netip.MustParseAddr("127.255.255.1")},
	} {
		if f, err := NewFarm(cfg); err == nil {
			f.Close()
			t.Errorf("NewFarm(%+v) succeeded, want an error", cfg)
		}
	}
}

func TestParseMode(t *testing.T) {
	for _, m := range []Mode{ModeOK, ModeFail, ModeHang} {
		if got, err := ParseMode(m.String()); err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m, got, err)
		}
	}
	if _, err := ParseMode("down"); err == nil {
		t.Error(`ParseMode("down") succeeded`)
	}
}
