package main

import (
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/internal/testscale"
)

// darkServer accepts connections and reads them, and never answers: a
// rack behind a path that went dark.
func darkServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { io.Copy(io.Discard, c) })
		}
	})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

// A rack that goes dark fills every probe slot: 24 hung targets on 8
// slots, each holding its slot for its whole timeout, beside 8 targets
// that answer. The hung targets are marked down, as a blackholed rack must
// be (pulsed once took the full slots for its own overload and ignored
// their timeouts for as long as the rack stayed dark), and the answering
// ones stay up.
func TestADarkRackIsMarkedDown(t *testing.T) {
	const dark, answering = 24, 8
	up := newSwitchServer(t)
	darkAddr := darkServer(t)
	var b strings.Builder
	b.WriteString("targets:\n")
	for i := range dark {
		fmt.Fprintf(&b, "  - {name: dark-%02d, group: rack, http: {url: \"http://%s/\"}, interval: 1s, timeout: 1s, fall: 2, initial_state: STATE_HEALTHY}\n", i, darkAddr)
	}
	for i := range answering {
		fmt.Fprintf(&b, "  - {name: up-%d, group: web, http: {url: %q}, interval: 1s, timeout: 1s, initial_state: STATE_HEALTHY}\n", i, up.URL)
	}
	path := filepath.Join(t.TempDir(), "targets.yaml")
	writeFile(t, path, b.String())

	p, base := startPulsedJSON(t, buildPulsed(t), "-targets", path, "-max-concurrent-probes", "8", "-max-unhealthy-fraction", "1")
	routable := func() (rack, web int, metrics string) {
		_, metrics = httpGet(t, base+"/metrics")
		for line := range strings.Lines(metrics) {
			switch {
			case strings.HasPrefix(line, `pulse_target_up{group="rack"`) && strings.HasSuffix(line, " 1\n"):
				rack++
			case strings.HasPrefix(line, `pulse_target_up{group="web"`) && strings.HasSuffix(line, " 1\n"):
				web++
			}
		}
		return rack, web, metrics
	}
	deadline := time.Now().Add(testscale.D(2 * time.Minute))
	for {
		rack, web, metrics := routable()
		if rack == 0 {
			if web != answering {
				t.Errorf("%d of the %d answering targets routable", web, answering)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d dark targets still routable after 2 minutes\n%s\n%s", rack, dark, metrics, p.Logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.stop(t)
}
