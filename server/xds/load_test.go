package xds_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server"
	"github.com/pulsehealth/pulse/server/xds"
)

// The xDS load measurement (BENCHMARKS.md, "xDS"): N clients, each on its
// own connection with one EDS watch, in a child process, against a server
// in this one; it reports the time from a transition to each client's
// update, and the server's memory per connected client. It runs only when
// asked:
//
//	PULSE_XDS_BENCH=1 go test -run TestXDSLoad -v -count=1 ./server/xds/
//
// PULSE_XDS_BENCH_CLIENTS (default 1,100,1000) and PULSE_XDS_BENCH_FLIPS
// (default 50) change the points.
func TestXDSLoad(t *testing.T) {
	if os.Getenv("PULSE_XDS_BENCH") == "" {
		t.Skip("a measurement, not a test: set PULSE_XDS_BENCH=1")
	}
	clients := []int{1, 100, 1000}
	if s := os.Getenv("PULSE_XDS_BENCH_CLIENTS"); s != "" {
		clients = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatal(err)
			}
			clients = append(clients, n)
		}
	}
	flips := 50
	if s := os.Getenv("PULSE_XDS_BENCH_FLIPS"); s != "" {
		var err error
		if flips, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("| clients | coalesce | p50 | p99 | max | server memory per client | goroutines per client |")
	t.Logf("|---|---|---|---|---|---|---|")
	for _, co := range []time.Duration{xds.DefaultCoalesce, time.Millisecond} {
		for _, n := range clients {
			loadPoint(t, n, flips, co)
		}
	}
}

func loadPoint(t *testing.T, n, flips int, coalesce time.Duration) {
	e := start(t, checker.Config{}, xds.Config{Coalesce: coalesce}, nil)
	// Serve on a listener of our own: start's server is for its own client.
	gs, _ := server.NewGRPCServer(server.New(e.c), server.Options{ServerOptions: []grpc.ServerOption{grpc.MaxConcurrentStreams(10000)}})
	e.s.Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	defer gs.Stop()
	for i := range 10 {
		e.add(t, true, tcpTarget(fmt.Sprintf("t-%d", i), "g", fmt.Sprintf("127.0.0.%d:80", i+1)))
	}
	e.round(t)

	base := serverMemory()
	baseG := runtime.NumGoroutine()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestXDSLoadClients$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("PULSE_XDS_BENCH_CLIENT=%s,%d", lis.Addr(), n))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	lines := make(chan string, 4096)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func() string {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the client process ended")
			}
			return l
		case <-time.After(60 * time.Second):
			t.Fatal("the client process said nothing for 60s")
		}
		return ""
	}
	for l := next(); l != "ready"; l = next() {
	}
	// Every client has its first assignment: measure the server's share.
	perClient := float64(serverMemory()-base) / float64(n)
	perG := float64(runtime.NumGoroutine()-baseG) / float64(n)

	var lat []time.Duration
	for i := range flips {
		addr := "127.0.0.1:80"
		e.set(addr, i%2 == 1) // fail, then recover, ...
		trs := e.c.RunRound(t.Context())
		if len(trs) != 1 {
			t.Fatalf("flip %d: %d transitions, want 1", i, len(trs))
		}
		at := trs[0].Time
		for range n {
			f := strings.Fields(next())
			ns, err := strconv.ParseInt(f[1], 10, 64)
			if f[0] != "update" || err != nil {
				t.Fatalf("client said %q", f)
			}
			lat = append(lat, time.Unix(0, ns).Sub(at))
		}
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))].Round(10 * time.Microsecond) }
	t.Logf("| %d | %v | %v | %v | %v | %.1f KiB | %.1f |", n, coalesce, q(0.5), q(0.99), lat[len(lat)-1].Round(10*time.Microsecond), perClient/1024, perG)
}

// serverMemory returns the heap and stacks in use after a collection.
func serverMemory() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// TestXDSLoadClients is TestXDSLoad's child process: N clients, each on
// its own connection, watching group g's assignment. It prints "ready"
// once every client has its first assignment, then "update <unix ns>" for
// each update a client receives.
func TestXDSLoadClients(t *testing.T) {
	spec := os.Getenv("PULSE_XDS_BENCH_CLIENT")
	if spec == "" {
		t.Skip("TestXDSLoad's child process")
	}
	addr, ns, _ := strings.Cut(spec, ",")
	n, err := strconv.Atoi(ns)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	say := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		w.WriteString(s + "\n")
		w.Flush()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var ready sync.WaitGroup
	ready.Add(n)
	for i := range n {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		st, err := discoverypb.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			req := &discoverypb.DiscoveryRequest{Node: &corev3.Node{Id: fmt.Sprintf("c%d", i)}, TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"g"}}
			if err := st.Send(req); err != nil {
				return
			}
			first := true
			for {
				r, err := st.Recv()
				if err != nil {
					return
				}
				at := time.Now()
				st.Send(&discoverypb.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: []string{"g"}, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()})
				if first {
					first = false
					ready.Done()
					continue
				}
				say(fmt.Sprintf("update %d", at.UnixNano()))
			}
		}()
	}
	ready.Wait()
	say("ready")
	<-ctx.Done()
}
