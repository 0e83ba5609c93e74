package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
)

// shutdownGrace is how long past -shutdown-timeout pulsed lets its
// graceful shutdown run before it gives up and exits with status 1.
const shutdownGrace = 5 * time.Second

// signals watches SIGINT and SIGTERM for run. The first ends ctx, which
// starts the graceful shutdown, and bounds it: if run has not called stop
// within bound, or at a second signal, pulsed logs what the shutdown was
// still waiting for and exits at once with status 1, whatever state it is
// in, a wedged checker included. Stored data stays consistent: every write
// to the store is one bbolt transaction, applied whole or not at all.
type signals struct {
	ctx    context.Context // done at the first signal
	cancel context.CancelFunc
	bound  time.Duration
	logger *slog.Logger
	exit   func(code int)
	sig    chan os.Signal
	step   atomic.Pointer[string] // what the shutdown is waiting for now
	done   chan struct{}          // closed by stop
	ended  chan struct{}          // closed when the watching goroutine has ended
}

// watchSignals starts watching for SIGINT and SIGTERM. exit is os.Exit
// outside tests.
func watchSignals(bound time.Duration, logger *slog.Logger, exit func(int)) *signals {
	s := &signals{
		bound:  bound,
		logger: logger,
		exit:   exit,
		sig:    make(chan os.Signal, 2),
		done:   make(chan struct{}),
		ended:  make(chan struct{}),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.waitingFor("the main loop to begin the shutdown")
	signal.Notify(s.sig, os.Interrupt, syscall.SIGTERM)
	go s.watch()
	return s
}

// waitingFor records the step the shutdown is at, for the log if it does
// not finish in time.
func (s *signals) waitingFor(step string) { s.step.Store(&step) }

// shutdownStep records the step the shutdown has reached and logs it: a
// slow shutdown says what it is waiting for while it waits.
func (s *signals) shutdownStep(step string) {
	s.waitingFor(step)
	s.logger.Info("pulsed shutting down: waiting for "+step, "waiting_for", step)
}

func (s *signals) watch() {
	defer close(s.ended)
	select {
	case <-s.sig:
		s.cancel()
	case <-s.done:
		return
	}
	timer := time.NewTimer(s.bound)
	defer timer.Stop()
	select {
	case <-s.done:
		return
	case <-timer.C:
		s.logger.Error("shutdown did not finish within -shutdown-timeout plus grace: exiting now", "bound", s.bound.String(), "waiting_for", *s.step.Load())
	case sig := <-s.sig:
		s.logger.Error("second signal: exiting now", "signal", sig.String(), "waiting_for", *s.step.Load())
	}
	s.exit(1)
}

// stop ends the watch: run is done, within its bound. It is idempotent.
func (s *signals) stop() {
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	<-s.ended
	signal.Stop(s.sig)
	s.cancel()
}
