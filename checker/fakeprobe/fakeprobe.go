// Package fakeprobe makes probers for tests that dial nothing: each passes
// while its switch is up. A target's switch is keyed by what its probe
// would reach (Key), so tests flip a backend up or down by its address.
// The checker's own tests use richer fakes (hanging, slow, panicking
// probes); this one is for the packages above it, which only need a
// backend that is up or down.
package fakeprobe

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/probe"
)

// ErrDown is what a prober whose switch is down returns.
var ErrDown = errors.New("connection refused")

// Switches makes probers (New, for checker.Config.NewProber) and holds
// their switches, all down until Set. It is safe for concurrent use.
type Switches struct {
	mu sync.Mutex
	up map[string]*atomic.Bool
}

// NewSwitches returns Switches with every switch down.
func NewSwitches() *Switches { return &Switches{up: map[string]*atomic.Bool{}} }

// Key is the switch of a probe: its TCP or gRPC address, its HTTP URL, or
// its DNS server.
func Key(p probe.Spec) string {
	switch {
	case p.TCP != nil:
		return p.TCP.Address
	case p.GRPC != nil:
		return p.GRPC.Address
	case p.HTTP != nil:
		return p.HTTP.URL
	case p.DNS != nil:
		return p.DNS.Server
	}
	return ""
}

func (s *Switches) sw(key string) *atomic.Bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.up[key]
	if !ok {
		b = new(atomic.Bool)
		s.up[key] = b
	}
	return b
}

// Set puts the switch key up or down; probers made before or after see it.
func (s *Switches) Set(key string, up bool) { s.sw(key).Store(up) }

// New returns a prober for p that passes while p's switch is up and fails
// with ErrDown otherwise. A spec of no kind it knows is an error.
func (s *Switches) New(p probe.Spec) (checker.Prober, error) {
	key := Key(p)
	if key == "" {
		return nil, errors.New("fakeprobe: a probe kind it does not know")
	}
	b := s.sw(key)
	return Func(func(context.Context) error {
		if b.Load() {
			return nil
		}
		return ErrDown
	}), nil
}

// Func is a function as a checker.Prober.
type Func func(context.Context) error

// Probe calls f.
func (f Func) Probe(ctx context.Context) error { return f(ctx) }
