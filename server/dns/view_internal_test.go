package dns

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/probe"
)

type passProber struct{}

func (passProber) Probe(context.Context) error { return nil }

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
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

// A view that falls further behind than the checker's history reloads
// from a snapshot and ends up with every target.
func TestViewReloadsWhenBehind(t *testing.T) {
	c, err := checker.New(checker.Config{
		HistorySize: 4,
		NewProber:   func(probe.Spec) (checker.Prober, error) { return passProber{}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var logs lockedBuffer
	s, err := New(c, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	add := func(i int) {
		t.Helper()
		spec := checker.Spec{Name: fmt.Sprintf("t-%02d", i), Group: "g", Probe: probe.Spec{TCP: &probe.TCPSpec{Address: "127.0.0.1:80"}}}
		if _, _, err := c.Add(spec); err != nil {
			t.Fatal(err)
		}
	}
	// Holding the view's lock stalls the follower while 12 events go by a
	// history of 4.
	s.v.mu.Lock()
	for i := range 12 {
		add(i)
	}
	s.v.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.v.mu.RLock()
		n := 0
		if set := s.v.groups["g"]; set != nil {
			n = len(set.byName)
		}
		s.v.mu.RUnlock()
		if n == 12 && s.Revision() >= c.Revision() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("view has %d of 12 targets at revision %d, checker at %d", n, s.Revision(), c.Revision())
		}
		time.Sleep(time.Millisecond)
	}
	if !strings.Contains(logs.String(), "fell behind the checker's events; reloading") {
		t.Errorf("no reload logged:\n%s", logs.String())
	}
}
