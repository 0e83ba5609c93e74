package main

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/internal/testscale"
)

// The end-to-end tests run pulse-lb (its run function, in this process)
// in front of three real HTTP backends on 127.0.0.1, with short probe
// intervals so they are quick.
const (
	e2eInterval = 50 * time.Millisecond
	e2eFall     = 3
	e2eRise     = 2
)

// e2eSlack is what a detection may take beyond its probe intervals: one
// more interval for the first probe after a change to come round on the
// checker's fixed grid, and time for a loaded machine (the race detector,
// a pulsed in another process) to schedule everything, scaled by
// testscale.
var e2eSlack = e2eInterval + testscale.D(400*time.Millisecond)

func e2eFlags() []string {
	return []string{
		"--health-interval", e2eInterval.String(),
		"--health-timeout", e2eInterval.String(),
		"--unhealthy-after", strconv.Itoa(e2eFall),
		"--healthy-after", strconv.Itoa(e2eRise),
	}
}

func backendList(bs []*testBackend) string {
	var urls []string
	for _, b := range bs {
		urls = append(urls, b.url())
	}
	return strings.Join(urls, ",")
}

// transition is the message of the log line of name's transition.
func transition(name, from, to string) string {
	return fmt.Sprintf(`msg="%s: %s -> %s"`, name, from, to)
}

func TestEmbedded(t *testing.T) {
	bs := []*testBackend{newTestBackend(t, "web-1"), newTestBackend(t, "web-2"), newTestBackend(t, "web-3")}
	lb := startLB(t, append(e2eFlags(), "--backends", backendList(bs), "--names", "web-1,web-2,web-3")...)
	names := []string{"web-1", "web-2", "web-3"}
	scenario(t, lb, bs, names)

	lb.stop(t)
	if !strings.Contains(lb.logs.String(), `msg="pulse-lb stopped"`) {
		t.Errorf("pulse-lb did not log its shutdown:\n%s", lb.logs)
	}
}

// scenario is the end-to-end test of pulse-lb's routing, the same in both modes. It
// starts with every backend up and ends with bs[1] up, the others down.
// names are the backends' names in pulse-lb's logs, and each backend's
// body is its name.
func scenario(t *testing.T, lb *lbProc, bs []*testBackend, names []string) {
	// Backends start unhealthy and are routed to once they prove
	// themselves; every transition is logged. (In remote mode a backend
	// that proves itself before pulse-lb's first snapshot shows up in it
	// as healthy.)
	bodyOf := map[string]string{}
	for i, name := range names {
		bodyOf[name] = bs[i].name
		lb.logs.waitHealthy(t, 0, name)
	}

	t.Run("all up: round robin", func(t *testing.T) {
		var seq []string
		for range 30 {
			r := lb.get(t)
			if r.status != http.StatusOK {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			seq = append(seq, r.body)
		}
		if seq[0] == seq[1] || seq[1] == seq[2] || seq[0] == seq[2] {
			t.Fatalf("the first three requests went to %v", seq[:3])
		}
		for i := 3; i < len(seq); i++ {
			if seq[i] != seq[i-3] {
				t.Fatalf("not round robin: %v", seq)
			}
		}
	})

	t.Run("one stops: the others keep the traffic", func(t *testing.T) {
		a, b, c := bs[0], bs[1], bs[2]
		load := startLoad(lb)
		load.waitCount(t, time.Time{}, 20)
		mark := lb.logs.mark()
		stopped := time.Now()
		b.stop()
		down := lb.logs.waitFor(t, mark, transition(names[1], "healthy", "unhealthy"))
		load.waitCount(t, down.at, 40)
		replies := load.stop(t)

		detect := down.at.Sub(stopped)
		bound := e2eFall*e2eInterval + e2eSlack
		if detect > bound {
			t.Errorf("%s was taken out %v after it stopped; want within --unhealthy-after (%d) intervals of %v, plus %v", names[1], detect, e2eFall, e2eInterval, e2eSlack)
		}
		var failed, after int
		var lastFailed time.Duration
		counts := map[string]int{}
		for _, r := range replies {
			if r.status != http.StatusOK {
				// Only the stopped backend fails requests, with a 502;
				// nobody gets a 503 while two backends are up.
				if r.status != http.StatusBadGateway || r.backend != names[1] {
					t.Errorf("reply %d from %q: %s", r.status, r.backend, r.body)
				}
				failed++
				lastFailed = max(lastFailed, r.start.Sub(stopped))
				if r.start.After(down.at) {
					t.Errorf("a request started %v after %s was taken out failed: %d %s", r.start.Sub(down.at), names[1], r.status, r.body)
				}
				continue
			}
			if r.body != bodyOf[r.backend] {
				t.Errorf("X-Pulse-Backend %q, body %q", r.backend, r.body)
			}
			if r.start.After(down.at) {
				after++
				counts[r.body]++
			}
		}
		t.Logf("%s stopped: taken out after %v (bound %v); %d of %d requests failed, the last one started %v after the stop", names[1], detect, bound, failed, len(replies), lastFailed)
		if lastFailed > bound {
			t.Errorf("requests failed until %v after the stop; want within %v", lastFailed, bound)
		}
		// Afterwards the two others share the traffic evenly: the stopped
		// one's turn is not handed to its neighbour.
		if n1, n3 := counts[a.name], counts[c.name]; n1+n3 != after || n1-n3 > 1 || n3-n1 > 1 {
			t.Errorf("after %s was taken out: %v over %d requests; want an even split of %s and %s", names[1], counts, after, a.name, c.name)
		}
	})

	t.Run("all stop: 503 at once", func(t *testing.T) {
		mark := lb.logs.mark()
		bs[0].stop()
		bs[2].stop()
		lb.logs.waitFor(t, mark, transition(names[0], "healthy", "unhealthy"))
		lb.logs.waitFor(t, mark, transition(names[2], "healthy", "unhealthy"))
		for range 5 {
			start := time.Now()
			r := lb.get(t)
			took := time.Since(start)
			if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, "no healthy backend") {
				t.Errorf("with every backend down: %d %q; want 503", r.status, r.body)
			}
			if took > testscale.D(time.Second) {
				t.Errorf("the 503 took %v; want it at once", took)
			}
		}
	})

	t.Run("one starts again: back after 2 passing probes", func(t *testing.T) {
		b := bs[1]
		mark := lb.logs.mark()
		started := time.Now()
		b.start()
		up := lb.logs.waitFor(t, mark, transition(names[1], "unhealthy", "healthy"))
		probes := b.probes.Load()
		took := up.at.Sub(started)
		t.Logf("%s back after %v and %d probes", names[1], took, probes)
		if probes < e2eRise {
			t.Errorf("%s was back after %d passing probes; want %d", names[1], probes, e2eRise)
		}
		if bound := e2eRise*e2eInterval + e2eSlack; took > bound {
			t.Errorf("%s was back %v after it started; want within --healthy-after (%d) intervals of %v, plus %v", names[1], took, e2eRise, e2eInterval, e2eSlack)
		}
		for range 5 {
			if r := lb.get(t); r.status != http.StatusOK || r.body != b.name {
				t.Errorf("got %d %q; want 200 from %s", r.status, r.body, b.name)
			}
		}
	})
}
