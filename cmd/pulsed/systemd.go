package main

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// systemdNotifier tells systemd (sd_notify, over $NOTIFY_SOCKET) how
// pulsed is doing: READY=1 once it serves, WATCHDOG=1 every half of
// $WATCHDOG_USEC while pulsed is live, STOPPING=1 when the shutdown
// starts. Without $NOTIFY_SOCKET (not started by systemd with Type=notify)
// every message is a no-op; without $WATCHDOG_USEC (no WatchdogSec=) no
// pings are sent.
//
// The pings are the service manager's view of pulsed's own liveness
// watchdog (see startWatchdog): while live() reports a stall they stop, so
// that systemd, past WatchdogSec=, kills pulsed and restarts it as
// Restart= says. Its methods are safe for concurrent use; close is
// idempotent.
type systemdNotifier struct {
	logger   *slog.Logger
	live     func() error
	interval time.Duration // between two pings; 0: no watchdog

	stopOnce sync.Once
	stop     chan struct{} // closed by close
	done     chan struct{} // closed when the ping loop has returned
}

// startSystemd reads $WATCHDOG_USEC and, when it is set, starts pinging
// systemd's watchdog while live() returns nil. A $WATCHDOG_USEC that is
// not a positive number of microseconds is an error.
func startSystemd(live func() error, logger *slog.Logger) (*systemdNotifier, error) {
	timeout, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		return nil, fmt.Errorf("systemd watchdog: WATCHDOG_USEC must be a positive number of microseconds: %w", err)
	}
	n := &systemdNotifier{
		logger:   logger,
		live:     live,
		interval: timeout / 2, // as sd_watchdog_enabled(3) advises
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	if n.interval <= 0 {
		close(n.done)
		return n, nil
	}
	logger.Info("systemd watchdog enabled", "timeout", timeout.String(), "ping_every", n.interval.String())
	go n.pingLoop()
	return n, nil
}

// pingLoop sends WATCHDOG=1 every interval while live() is nil.
func (n *systemdNotifier) pingLoop() {
	defer close(n.done)
	t := time.NewTicker(n.interval)
	defer t.Stop()
	n.ping()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			n.ping()
		}
	}
}

// ping sends WATCHDOG=1 unless pulsed is not live.
func (n *systemdNotifier) ping() {
	if err := n.live(); err != nil {
		return // the watchdog logs the stall; systemd acts past WatchdogSec=
	}
	n.send(daemon.SdNotifyWatchdog)
}

// ready tells systemd that pulsed serves (Type=notify's start-up is done).
func (n *systemdNotifier) ready() { n.send(daemon.SdNotifyReady) }

// stopping tells systemd that pulsed shuts down, and stops the pings.
func (n *systemdNotifier) stopping() {
	n.send(daemon.SdNotifyStopping)
	n.close()
}

// close stops the pings and waits for the ping loop to return.
func (n *systemdNotifier) close() {
	n.stopOnce.Do(func() { close(n.stop) })
	<-n.done
}

// send sends one sd_notify message; a failure is logged, never fatal.
func (n *systemdNotifier) send(state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		n.logger.Warn("sd_notify failed", "state", state, "error", err)
	}
}
