package main

import (
	"fmt"
	"log/slog"

	"github.com/pulsehealth/pulse/checker"
)

// checkerSource is the embedded mode's health: a checker.Checker of its own
// that probes every backend. The rotor reads the states through
// Checker.Healthy, under the checker's own lock, the one the checker holds
// when it applies a probe result: a backend is out of rotation from the
// moment its transition is recorded, with no copy in between to lag behind.
type checkerSource struct {
	c     *checker.Checker
	group string
}

// newCheckerSource registers every backend with a new checker and starts
// probing. The checker logs every transition ("web-1: healthy ->
// unhealthy") to logger. Backends start unhealthy: each must pass
// --healthy-after probes before it gets traffic (a backend proves itself
// first), so for about that long after start pulse-lb answers 503.
func newCheckerSource(cfg config, logger *slog.Logger) (*checkerSource, error) {
	c, err := checker.New(checker.Config{Defaults: cfg.defaults(), Logger: logger, MaxUnhealthyFraction: cfg.panicFrac})
	if err != nil {
		return nil, err
	}
	for _, b := range cfg.backends {
		if _, _, err := c.Add(cfg.spec(b, checker.StateUnhealthy)); err != nil {
			c.Close()
			return nil, fmt.Errorf("backend %s: %w", b.url, err)
		}
	}
	c.Start()
	return &checkerSource{c: c, group: cfg.group}, nil
}

// Healthy returns the names of the healthy backends, sorted.
func (s *checkerSource) Healthy() []string { return s.c.Healthy(s.group) }

// Close stops probing and waits for the probes in flight.
func (s *checkerSource) Close() error { return s.c.Close() }
