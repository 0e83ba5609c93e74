package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/pulsedproc"
)

// TestRemote runs the same scenario with health from a real pulsed, then
// breaks the stream in four ways: a cut it resumes from, a cut longer than
// pulsed's history (it re-lists), a pulsed crash and restart from its
// store, and a pulsed replaced by an empty one. pulse-lb
// talks to pulsed through a forwarder the test controls, so the test can
// cut the stream without stopping pulsed, and point it at a new pulsed.
func TestRemote(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs pulsed")
	}
	bin := buildPulsed(t)
	dataDir := t.TempDir()
	p1 := startPulsed(t, bin, "-data-dir", dataDir)
	fwd := newForwarder(t, p1.Addr)
	whole := t // a pulsed started in one subtest and killed in the next is the whole test's

	bs := []*testBackend{newTestBackend(t, "web-1"), newTestBackend(t, "web-2"), newTestBackend(t, "web-3")}
	lb := startLB(t, append(e2eFlags(), "--backends", backendList(bs), "--pulse", fwd.addr(), "--group", "edge")...)
	// Unnamed, the backends are named by their host:port.
	names := []string{bs[0].addr, bs[1].addr, bs[2].addr}
	lb.logs.waitFor(t, 0, `msg="registered backends with pulsed"`)
	lb.logs.waitFor(t, 0, `msg="pulse snapshot applied"`)
	scenario(t, lb, bs, names)
	if t.Failed() {
		return
	}
	// Now web-2 is up, web-1 and web-3 are down.
	web1, web2 := bs[0], bs[1]
	const down = `msg="pulse watch down; routing with the last known view"`
	var p2 *pulsed // the restarted pulsed

	t.Run("stream cut: the last view routes, then the stream resumes", func(t *testing.T) {
		mark := lb.logs.mark()
		fwd.cut()
		lb.logs.waitFor(t, mark, down)
		// While the stream is down web-1 comes back; pulsed sees it, but
		// pulse-lb cannot until it resumes, and keeps routing to web-2.
		pmark := p1.logs.mark()
		web1.start()
		p1.logs.waitFor(t, pmark, transition(names[0], "unhealthy", "healthy"))
		for range 4 {
			if r := lb.get(t); r.status != http.StatusOK || r.body != web2.name {
				t.Errorf("with the stream down: %d %q; want 200 from %s", r.status, r.body, web2.name)
			}
		}
		fwd.restore()
		resumed := lb.logs.waitFor(t, mark, `msg="pulse watch resumed"`)
		lb.logs.waitFor(t, mark, transition(names[0], "unhealthy", "healthy"))
		if line, ok := lb.logs.find(mark, "snapshot"); ok {
			t.Errorf("pulse-lb re-listed instead of resuming: %s", line.text)
		}
		if !regexp.MustCompile(`start_revision=[1-9]`).MatchString(resumed.text) {
			t.Errorf("resumed without a revision: %s", resumed.text)
		}
		seen := map[string]int{}
		for range 6 {
			r := lb.get(t)
			if r.status != http.StatusOK {
				t.Fatalf("after the resume: %d %q", r.status, r.body)
			}
			seen[r.body]++
		}
		if seen[web1.name] != 3 || seen[web2.name] != 3 {
			t.Errorf("after the resume: %v; want web-1 and web-2 in turn", seen)
		}
	})

	t.Run("stream cut longer than the history: re-list", func(t *testing.T) {
		mark := lb.logs.mark()
		load := startLoad(lb)
		fwd.cut()
		lb.logs.waitFor(t, mark, down)
		// Registry events of another group push pulse-lb's revision out of
		// pulsed's history (-watch-history 8).
		addOthers(t, p1.Addr, 12)
		fwd.restore()
		lb.logs.waitFor(t, mark, `msg="pulse watch cannot resume; re-listing from a snapshot"`)
		snap := lb.logs.waitFor(t, mark, `msg="pulse snapshot applied"`)
		load.waitCount(t, snap.at, 10)
		checkOnly(t, load.stop(t), web1.name, web2.name)
	})

	t.Run("pulsed crashes and restarts from its store", func(t *testing.T) {
		mark := lb.logs.mark()
		load := startLoad(lb)
		load.waitCount(t, time.Time{}, 10)
		p1.kill(t)
		lb.logs.waitFor(t, mark, down)
		load.waitCount(t, time.Now(), 10) // the last view routes

		// The restarted pulsed has the targets and their states; pulse-lb
		// resumes if its revision is still valid there, else re-lists.
		p2 = startPulsedFor(t, whole, bin, "-data-dir", dataDir)
		fwd.retarget(p2.Addr)
		back := lb.logs.waitForAny(t, mark, `msg="pulse snapshot applied"`, `msg="pulse watch resumed"`)
		t.Logf("after the restart: %s", back.text)
		load.waitCount(t, back.at, 20)
		checkOnly(t, load.stop(t), web1.name, web2.name)
		streamWorks(t, lb, web1, names[0], web2)
	})
	if p2 == nil {
		return
	}

	t.Run("pulsed replaced by an empty one: register again, keep the states", func(t *testing.T) {
		mark := lb.logs.mark()
		load := startLoad(lb)
		load.waitCount(t, time.Time{}, 10)
		p2.kill(t)
		lb.logs.waitFor(t, mark, down)
		// A pulsed that knows nothing: pulse-lb registers the backends
		// again in the states it last knew, and re-lists since its revision
		// means nothing there.
		p3 := startPulsed(t, bin, "-data-dir", "")
		fwd.retarget(p3.Addr)
		lb.logs.waitFor(t, mark, `msg="registered backends with pulsed" component=pulse pulse=`+fwd.addr()+` group=edge created=3`)
		lb.logs.waitFor(t, mark, `msg="pulse watch cannot resume; re-listing from a snapshot"`)
		snap := lb.logs.waitFor(t, mark, `msg="pulse snapshot applied"`)
		load.waitCount(t, snap.at, 20)
		checkOnly(t, load.stop(t), web1.name, web2.name)
		streamWorks(t, lb, web1, names[0], web2)
		lb.stop(t)
		p3.stop(t)
	})
}

// streamWorks checks that pulse-lb hears of new transitions: b (named
// name) stops and is taken out, leaving other; it starts again and is
// back.
func streamWorks(t *testing.T, lb *lbProc, b *testBackend, name string, other *testBackend) {
	t.Helper()
	mark := lb.logs.mark()
	b.stop()
	lb.logs.waitFor(t, mark, transition(name, "healthy", "unhealthy"))
	for range 4 {
		if r := lb.get(t); r.status != http.StatusOK || r.body != other.name {
			t.Errorf("after %s stopped: %d %q; want 200 from %s", b.name, r.status, r.body, other.name)
		}
	}
	b.start()
	lb.logs.waitFor(t, mark, transition(name, "unhealthy", "healthy"))
}

// checkOnly checks that every reply is a 200 from one of bodies, and that
// each of them answered.
func checkOnly(t *testing.T, replies []reply, bodies ...string) {
	t.Helper()
	seen := map[string]int{}
	for _, r := range replies {
		if r.status != http.StatusOK {
			t.Errorf("%d %q", r.status, r.body)
			continue
		}
		seen[r.body]++
	}
	for _, b := range bodies {
		if seen[b] == 0 {
			t.Errorf("no request went to %s: %v", b, seen)
		}
	}
	if len(seen) != len(bodies) {
		t.Errorf("requests went to %v; want %v only", seen, bodies)
	}
}

// addOthers registers n targets of another group with the pulsed at addr,
// probed too rarely to ever change state.
func addOthers(t *testing.T, addr string, n int) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewHealthCheckerClient(conn)
	ctx, cancel := context.WithTimeout(t.Context(), waitBound)
	defer cancel()
	for i := range n {
		_, err := client.AddTarget(ctx, &pb.AddTargetRequest{Target: &pb.Target{
			Name:     fmt.Sprintf("other-%d", i),
			Group:    "other",
			Probe:    &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: "127.0.0.1:1"}},
			Interval: durationpb.New(time.Hour),
		}})
		if err != nil {
			t.Fatalf("AddTarget: %v", err)
		}
	}
}

func buildPulsed(t *testing.T) string {
	t.Helper()
	var flags []string
	if raceEnabled {
		flags = append(flags, "-race")
	}
	bin, err := pulsedproc.Build(t.Context(), t.TempDir(), pulsedproc.Package, flags...)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// pulsed is a pulsed process; logs holds its log for waitFor.
type pulsed struct {
	*pulsedproc.Process
	logs *logSink
}

// startPulsed starts pulsed on a free loopback port, without its HTTP
// endpoint. It sends progress events often, so the stream's progress
// handling is exercised too, and keeps a short history, so a test can
// outrun it.
func startPulsed(t *testing.T, bin string, args ...string) *pulsed {
	t.Helper()
	return startPulsedFor(t, t, bin, args...)
}

// startPulsedFor is startPulsed for a pulsed that outlives the subtest t
// starting it: owner, its parent, kills it when it ends. Were t to, the
// next subtest would find its watch already down when it kills pulsed.
func startPulsedFor(t, owner *testing.T, bin string, args ...string) *pulsed {
	t.Helper()
	p := &pulsed{logs: newLogSink()}
	ctx, cancel := context.WithTimeout(t.Context(), waitBound)
	defer cancel()
	proc, err := pulsedproc.Start(ctx, bin, append([]string{"-listen", "127.0.0.1:0", "-http-listen", "", "-watch-progress", "100ms", "-watch-history", "8"}, args...), func(line string) {
		p.logs.Write([]byte(line + "\n"))
	})
	if err != nil {
		t.Fatal(err)
	}
	p.Process = proc
	owner.Cleanup(proc.Kill)
	return p
}

// kill kills pulsed at once, as a crash would. It is idempotent.
func (p *pulsed) kill(*testing.T) { p.Kill() }

// stop stops pulsed with SIGTERM and checks that it exits cleanly.
func (p *pulsed) stop(t *testing.T) {
	t.Helper()
	if err := p.Stop(waitBound); err != nil {
		t.Errorf("pulsed: %v\n%s", err, p.logs)
	}
}

// forwarder is a TCP forwarder on 127.0.0.1 between pulse-lb and pulsed.
// cut closes every connection and refuses new ones until restore.
type forwarder struct {
	ln net.Listener
	wg sync.WaitGroup

	mu     sync.Mutex // protects the fields below
	target string
	down   bool
	conns  map[net.Conn]bool
}

func newForwarder(t *testing.T, target string) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{ln: ln, target: target, conns: make(map[net.Conn]bool)}
	f.wg.Go(f.accept)
	t.Cleanup(f.close)
	return f
}

func (f *forwarder) addr() string { return f.ln.Addr().String() }

func (f *forwarder) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		target, down := f.target, f.down
		f.mu.Unlock()
		if down || !f.track(c) {
			c.Close()
			continue
		}
		f.wg.Go(func() { f.pipe(c, target) })
	}
}

func (f *forwarder) pipe(c net.Conn, target string) {
	defer f.untrack(c)
	s, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return
	}
	if !f.track(s) {
		s.Close()
		return
	}
	defer f.untrack(s)
	done := make(chan struct{})
	go func() {
		io.Copy(s, c)
		s.Close()
		close(done)
	}()
	io.Copy(c, s)
	c.Close()
	<-done
}

// track records an open connection; it reports false when the forwarder
// is down.
func (f *forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return false
	}
	f.conns[c] = true
	return true
}

func (f *forwarder) untrack(c net.Conn) {
	c.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.conns, c)
}

// cut closes every connection and refuses new ones.
func (f *forwarder) cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = true
	for c := range f.conns {
		c.Close()
	}
}

// restore accepts connections again.
func (f *forwarder) restore() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = false
}

// retarget sends new connections to target.
func (f *forwarder) retarget(target string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.target = target
}

func (f *forwarder) close() {
	f.ln.Close()
	f.cut()
	f.wg.Wait()
}
