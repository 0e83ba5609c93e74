package client_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/client"
)

// BenchmarkViewFollows is the View end to end: a real server over
// loopback, 10,000 targets, and one op is a probe round that flips every
// one of them: 10,000 transitions through the checker, the stream and the
// view, until the view has applied the last. events/s is what the whole
// path (checker, server and view in one process) sustains.
func BenchmarkViewFollows(b *testing.B) {
	const targets = 10_000
	e := newEnvB(b, checker.Config{HistorySize: 4 * targets, MaxConcurrentProbes: 64})
	c, err := client.New(b.Context(), e.addrs, client.WithToken(""))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for i := range targets {
		if _, _, err := c.Add(b.Context(), tcpTarget(fmt.Sprintf("t%05d", i), fmt.Sprintf("g%d", i%10), fmt.Sprintf("t%05d:80", i))); err != nil {
			b.Fatal(err)
		}
	}
	v := c.View(b.Context(), client.Filter{})
	defer v.Close()
	if err := v.WaitSynced(b.Context()); err != nil {
		b.Fatal(err)
	}
	up := false
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		up = !up
		for i := range targets {
			e.set(fmt.Sprintf("t%05d:80", i), up)
		}
		e.c.RunRound(b.Context())
		rev := e.c.Revision()
		deadline := time.Now().Add(time.Minute)
		for v.Revision() < rev {
			if time.Now().After(deadline) {
				b.Fatalf("the view is at %d a minute after the round, want %d", v.Revision(), rev)
			}
			time.Sleep(100 * time.Microsecond) // poll: the view has no wait-for-revision
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*targets)/time.Since(start).Seconds(), "events/s")
	if st, _ := v.Get("t00000"); st.State.Routable() != up {
		b.Fatalf("t00000 is %v after the last round", st.State)
	}
}
