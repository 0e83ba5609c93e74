package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pulsehealth/pulse/client"
)

// registerTimeout bounds the ListTargets and AddTarget calls of one
// (re)connection.
const registerTimeout = 5 * time.Second

// remoteSource is remote mode's health: a client.View of the group, which
// follows pulsed's WatchTransitions stream (resuming, re-listing and
// failing over between replicas as the stream's contract says), and keeps
// routing with what it last knew while pulsed is away.
//
// Before each stream it registers the backends with AddTarget, which
// changes nothing when pulsed already has the same spec, and brings the
// backends back when pulsed restarted and lost them. A backend new to
// pulsed starts in the state the view last knew it in (unhealthy when
// never seen), so a pulsed restart does not take healthy backends out of
// rotation while they prove themselves again.
type remoteSource struct {
	cfg     config
	logger  *slog.Logger
	c       *client.Client
	view    *client.View
	healthy atomic.Pointer[[]string] // sorted names of the routable backends, replaced after each event
	pending []client.Change          // the changes of the event being applied; only changed touches it
	down    bool                     // the watch broke and has not come back; only logEvent touches it
}

// newRemoteSource connects to the pulsed at cfg.pulse (lazily: pulse-lb
// starts even while pulsed is down, and answers 503 until it has a view)
// and starts following it in the background.
func newRemoteSource(cfg config, logger *slog.Logger) (*remoteSource, error) {
	return newRemoteSourceWith(cfg, logger)
}

// newRemoteSourceWith is newRemoteSource with more client options (tests
// shorten the backoff).
func newRemoteSourceWith(cfg config, logger *slog.Logger, more ...client.Option) (*remoteSource, error) {
	opts, err := cfg.pulseConn.ClientOptions()
	if err != nil {
		return nil, fmt.Errorf("--pulse: %w", err)
	}
	opts = append(opts, client.WithIdleTimeout(cfg.idleTimeout))
	opts = append(opts, more...)
	c, err := client.New(context.Background(), strings.Split(cfg.pulse, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("--pulse: %w", err)
	}
	s := &remoteSource{cfg: cfg, logger: logger, c: c}
	s.healthy.Store(new([]string))
	s.view = c.NewView(client.Filter{Group: cfg.group}, client.BeforeStream(s.register), client.OnEvent(s.logEvent))
	s.view.Subscribe(s.changed)
	s.view.Start(context.Background())
	return s, nil
}

// Healthy returns the names of the routable backends, sorted.
func (s *remoteSource) Healthy() []string { return *s.healthy.Load() }

// Close stops following pulsed and closes the connection. The backends stay
// registered with pulsed: a restarted pulse-lb (or another one sharing the
// group) picks up their states at once.
func (s *remoteSource) Close() error {
	s.view.Close()
	return s.c.Close()
}

// changed gathers the changes of one event and, after its last one,
// publishes the routable names and then logs the changes: once a transition
// is in the log, pulse-lb routes by it. The view calls it from one
// goroutine at a time.
func (s *remoteSource) changed(ch client.Change) {
	s.pending = append(s.pending, ch)
	if ch.More {
		return
	}
	s.publish()
	for _, ch := range s.pending {
		s.logChange(ch)
	}
	clear(s.pending)
	s.pending = s.pending[:0]
}

func (s *remoteSource) logChange(ch client.Change) {
	if ch.From == ch.To { // an update of a spec alone is not worth a line
		return
	}
	attrs := []any{"target", ch.Name, "group", s.cfg.group, "from", ch.From.String(), "to", ch.To.String(), "revision", ch.Revision}
	if ch.Err != "" {
		attrs = append(attrs, "error", ch.Err)
	}
	if ch.Reason != "transition" {
		attrs = append(attrs, "reason", ch.Reason)
	}
	s.logger.Info(ch.String(), attrs...)
}

func (s *remoteSource) publish() {
	routable := s.view.Routable(s.cfg.group)
	names := make([]string, len(routable))
	for i, st := range routable {
		names[i] = st.Target.Name
	}
	s.healthy.Store(&names)
}

// logEvent logs the stream's own events: it broke, resumed, or started
// over from a snapshot.
func (s *remoteSource) logEvent(ev client.Event) {
	switch ev.Kind {
	case client.EventDisconnected:
		// One warning a break: the retries that fail after it are INFO, so
		// that an alert on warnings fires once, not once a retry.
		retry := ev.RetryIn.Round(time.Millisecond).String()
		if s.down {
			s.logger.Info("pulse watch still down; routing with the last known view", "pulse", s.cfg.pulse, "error", ev.Err, "retry_in", retry)
			return
		}
		s.down = true
		s.logger.Warn("pulse watch down; routing with the last known view", "pulse", s.cfg.pulse, "error", ev.Err, "retry_in", retry)
	case client.EventStopped:
		s.logger.Error("pulse watch stopped; routing with the last known view until restarted", "pulse", s.cfg.pulse, "error", ev.Err)
	case client.EventResumed:
		s.down = false
		s.logger.Info("pulse watch resumed", "pulse", s.cfg.pulse, "group", s.cfg.group, "start_revision", ev.Revision)
	case client.EventSnapshot:
		s.down = false
		if ev.Resnapshot {
			s.logger.Warn("pulse watch cannot resume; re-listing from a snapshot", "error", ev.Err)
		}
		s.publish() // a snapshot that changed nothing has no change to publish it
		s.logger.Info("pulse snapshot applied", "revision", ev.Revision, "healthy", s.Healthy())
	}
}

// register adds every backend to pulsed, in the group, with the health
// flags' interval, timeout and thresholds, and sets the group's panic
// threshold.
func (s *remoteSource) register(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, registerTimeout)
	defer cancel()
	// The initial state of a target pulsed already has is ignored, but a
	// different one still counts as a new spec and makes an `updated`
	// event: send the one pulsed has.
	list, err := s.c.List(ctx, s.cfg.group)
	if err != nil {
		return fmt.Errorf("listing the group's targets: %w", err)
	}
	known := make(map[string]client.State)
	for _, st := range list.Targets {
		known[st.Target.Name] = st.Target.InitialState
	}
	created := 0
	for _, b := range s.cfg.backends {
		initial := client.StateUnhealthy
		if st, ok := s.view.Get(b.name); ok && st.Routable {
			initial = client.StateHealthy
		}
		if st, ok := known[b.name]; ok {
			initial = st
		}
		_, isNew, err := s.c.Add(ctx, s.target(b, initial))
		if err != nil {
			return fmt.Errorf("registering backend %s: %w", b.name, err)
		}
		if isNew {
			created++
		}
	}
	if created > 0 {
		s.logger.Info("registered backends with pulsed", "pulse", s.cfg.pulse, "group", s.cfg.group, "created", created)
	}
	// pulsed's default panic threshold keeps half of a failing group in
	// rotation; pulse-lb's own default takes out every failing backend.
	if _, err := s.c.SetGroupPolicy(ctx, s.cfg.group, client.GroupPolicy{MaxUnhealthyFraction: s.cfg.panicFrac}); err != nil {
		return fmt.Errorf("setting the group's panic threshold: %w", err)
	}
	return nil
}

// target is backend b's spec.
func (s *remoteSource) target(b backendConfig, initial client.State) client.Target {
	return client.Target{
		Name:         b.name,
		Group:        s.cfg.group,
		HTTP:         &client.HTTPProbe{URL: b.healthURL},
		Interval:     s.cfg.healthInterval,
		Timeout:      s.cfg.healthTimeout,
		Rise:         s.cfg.healthyAfter,
		Fall:         s.cfg.unhealthyAfter,
		InitialState: initial,
		SlowStart:    s.cfg.slowStart,
	}
}
