package main

import (
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/liveness"
	"github.com/pulsehealth/pulse/server"
)

// startWatchdog starts the watchdog of pulsed's own progress (see
// liveness.Watchdog): while a part of the checker has made no progress for
// timeout, grpc.health.v1 answers NOT_SERVING for pulsed itself, /healthz
// answers 503 with what stalled, and pulse_stalled{component} is 1; the
// watchdog logs an error once per episode and an info line when it ends.
// Call it before obs.start, which serves /healthz; close the watchdog when
// done.
func startWatchdog(c *checker.Checker, timeout time.Duration, hs *server.Health, obs *observability, logger *slog.Logger) (*liveness.Watchdog, error) {
	stalled := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "pulse_stalled",
		Help: "1 while a part of pulsed has made no progress for -liveness-timeout (pulsed is not live), 0 otherwise.",
	}, []string{"component"})
	var components []string
	wd, err := checker.NewWatchdog(c, liveness.Config{
		Timeout: timeout,
		Logger:  logger.With("component", "watchdog"),
		OnChange: func(stalls []liveness.Stall) {
			for _, comp := range components {
				stalled.WithLabelValues(comp).Set(0)
			}
			for _, s := range stalls {
				stalled.WithLabelValues(s.Component).Set(1)
			}
			hs.SetLive(stallError(stalls))
		},
	})
	if err != nil {
		return nil, err
	}
	components = wd.Components()
	for _, comp := range components {
		stalled.WithLabelValues(comp).Set(0)
	}
	obs.reg.MustRegister(stalled)
	obs.live = func() error { return stallError(wd.Stalls()) }
	wd.Start()
	return wd, nil
}

// stallError says what stalled, e.g. "scheduler: no progress for 41s;
// checker_lock: lock held for 41s"; nil when nothing did.
func stallError(stalls []liveness.Stall) error {
	if len(stalls) == 0 {
		return nil
	}
	parts := make([]string, len(stalls))
	for i, s := range stalls {
		parts[i] = s.String()
	}
	return errors.New(strings.Join(parts, "; "))
}
