package xds_test

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server/xds"
)

// A target held by its group's panic threshold stays HEALTHY, and its
// metadata says why.
func TestPanicHeldIsHealthy(t *testing.T) {
	e := start(t, checker.Config{MaxUnhealthyFraction: 0.5}, xds.Config{Coalesce: time.Millisecond}, nil)
	e.add(t, true,
		tcpTarget("a", "edge", "127.0.0.1:1"),
		tcpTarget("b", "edge", "127.0.0.2:1"),
		tcpTarget("c", "edge", "127.0.0.3:1"),
		tcpTarget("d", "edge", "127.0.0.4:1"),
	)
	e.round(t)
	s := e.sotw(t, t.Context())
	s.request(resourcev3.EndpointType, []string{"edge"}, "", "")
	s.next("edge")
	// Three of four fail; at most two may be unhealthy: c is held.
	for _, a := range []string{"127.0.0.1:1", "127.0.0.2:1", "127.0.0.3:1"} {
		e.set(a, false)
	}
	e.round(t)
	var cla *endpointv3.ClusterLoadAssignment
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := s.next("edge")
		cla = &endpointv3.ClusterLoadAssignment{}
		if err := r.GetResources()[0].UnmarshalTo(cla); err != nil {
			t.Fatal(err)
		}
		if held(cla) != "" || time.Now().After(deadline) {
			break
		}
	}
	if got, want := health(t, &discoverypb.DiscoveryResponse{Resources: mustAnys(t, cla)})["edge"],
		"127.0.0.1:1 UNHEALTHY, 127.0.0.2:1 UNHEALTHY, 127.0.0.3:1 HEALTHY, 127.0.0.4:1 HEALTHY"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if got := held(cla); !strings.HasPrefix(got, "c: group edge's panic threshold holds c routable") {
		t.Errorf("held metadata: %q", got)
	}
}

// held returns "target: reason" for each held endpoint.
func held(cla *endpointv3.ClusterLoadAssignment) string {
	var out []string
	for _, ep := range cla.GetEndpoints()[0].GetLbEndpoints() {
		md := ep.GetMetadata().GetFilterMetadata()[xds.MetadataKey].AsMap()
		if md["panic_held"] == true {
			out = append(out, fmt.Sprintf("%s: %s", md["target"], md["reason"]))
		}
	}
	return strings.Join(out, "; ")
}

func mustAnys(t testing.TB, ms ...proto.Message) []*anypb.Any {
	t.Helper()
	var out []*anypb.Any
	for _, m := range ms {
		a, err := anypb.New(m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

// stallingSource blocks Groups while stall is set, to hold the follower.
type stallingSource struct {
	*checker.Checker
	stall   atomic.Bool
	stalled chan struct{} // receives when Groups starts stalling
	release chan struct{}
}

func (s *stallingSource) Groups(group string) []checker.GroupStatus {
	if s.stall.Load() {
		s.stalled <- struct{}{}
		<-s.release
	}
	return s.Checker.Groups(group)
}

// A target held during a panic, which has no event of its own, shows as
// held within the refresh; a follower stalled past the checker's history
// reloads from a snapshot and serves every target.
func TestPanicRefreshAndReload(t *testing.T) {
	var logs lockedBuffer
	var src *stallingSource
	e := startWith(t, checker.Config{MaxUnhealthyFraction: 0.5, HistorySize: 8},
		xds.Config{Coalesce: time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, nil,
		func(c *checker.Checker) xds.Source {
			src = &stallingSource{Checker: c, stalled: make(chan struct{}), release: make(chan struct{})}
			return src
		})
	for _, n := range "abcdef" {
		e.add(t, true, tcpTarget(string(n), "edge", fmt.Sprintf("127.0.0.%d:1", n-'a'+1)))
	}
	e.round(t)
	s := e.sotw(t, t.Context())
	s.request(resourcev3.EndpointType, []string{"edge"}, "", "")
	s.next("edge")
	waitHeld := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			cla := &endpointv3.ClusterLoadAssignment{}
			if err := s.next("edge").GetResources()[0].UnmarshalTo(cla); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, h := range strings.Split(held(cla), "; ") {
				names = append(names, strings.SplitN(h, ":", 2)[0])
			}
			if got := strings.Join(names, ","); got == want {
				return
			} else if time.Now().After(deadline) {
				t.Fatalf("held %q, want %q", got, want)
			}
		}
	}
	// a, b, c fail: three of six may be unhealthy. d fails: held (the
	// panic starts, with an event).
	for _, a := range []string{"127.0.0.1:1", "127.0.0.2:1", "127.0.0.3:1", "127.0.0.4:1"} {
		e.set(a, false)
	}
	e.round(t)
	waitHeld("d")
	// e fails during the panic: held, with no event.
	e.set("127.0.0.5:1", false)
	e.round(t)
	waitHeld("d,e")

	// Stall the follower at its next refresh, and make more events than
	// the history holds.
	src.stall.Store(true)
	<-src.stalled
	src.stall.Store(false)
	for i := range 20 {
		e.add2(t, tcpTarget(fmt.Sprintf("o-%02d", i), "other", fmt.Sprintf("127.0.1.%d:1", i+1)))
	}
	close(src.release)
	e.sync(t)
	s.subscribe("edge", "other")
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := health(t, s.next("edge", "other"))
		if strings.Count(got["other"], "UNHEALTHY") == 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("group other: %q", got["other"])
		}
	}
	if !strings.Contains(logs.String(), "fell behind the checker's events; reloading") {
		t.Errorf("no reload logged:\n%s", logs.String())
	}
}

// add2 registers a target without waiting for xDS to serve it.
func (e *env) add2(t testing.TB, spec checker.Spec) {
	t.Helper()
	if _, _, err := e.c.Add(spec); err != nil {
		t.Fatal(err)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
