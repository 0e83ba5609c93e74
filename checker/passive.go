package checker

import (
	"errors"
	"fmt"
	"time"
)

// ErrPassiveDisabled: the target's spec does not accept passive outcomes
// (Spec.PassiveOutcomes is off).
var ErrPassiveDisabled = errors.New("passive outcomes are off for this target")

// ErrQuarantined: the target is quarantined (Status.Quarantined) and takes
// no results until its spec is fixed.
var ErrQuarantined = errors.New("the target is quarantined: fix its spec with AddTarget or remove it")

// Bounds of an Outcome's fields, checked by Outcome.Validate.
const (
	// MaxOutcomeErrLen bounds Outcome.Err, in bytes.
	MaxOutcomeErrLen = 1024
	// MaxOutcomeLatency bounds Outcome.Latency: no request a health check
	// judges takes longer.
	MaxOutcomeLatency = 24 * time.Hour
)

// Outcome is the outcome of one real request to a target, as a load
// balancer saw it: a passive check (HAProxy's observe layer7, Envoy's
// outlier detection).
type Outcome struct {
	// Pass is true when the request succeeded.
	Pass bool
	// Latency is how long it took; zero if unknown, never negative, at most
	// MaxOutcomeLatency. Above the target's MaxLatency the outcome is a
	// failure.
	Latency time.Duration
	// Err says why it failed; empty when Pass is true. If empty on a
	// failure, "request failed".
	Err string
}

// Validate returns a *FieldError naming the first bad field ("latency",
// "error").
func (o Outcome) Validate() error {
	switch {
	case o.Latency < 0:
		return &FieldError{"latency", fmt.Sprintf("must not be negative, got %v", o.Latency)}
	case o.Latency > MaxOutcomeLatency:
		return &FieldError{"latency", fmt.Sprintf("must be at most %v, got %s", MaxOutcomeLatency, durText(o.Latency))}
	case len(o.Err) > MaxOutcomeErrLen:
		return &FieldError{"error", fmt.Sprintf("must be at most %d bytes, got %d", MaxOutcomeErrLen, len(o.Err))}
	case o.Pass && o.Err != "":
		return &FieldError{"error", "must be empty when the outcome is ok"}
	}
	return nil
}

// reportOutcome is ReportOutcome for a valid outcome.
//
// It feeds a passive outcome to the named target's machine,
// exactly as a probe result would be (rise, fall, the model and the pool
// policies all apply), when its spec has PassiveOutcomes. Outcomes are
// rate-limited per target by a token bucket of Spec.PassiveRate a second
// with a burst of as many: one over the rate is dropped, counted in
// Status.PassiveLimited, and ReportOutcome returns counted false and no
// error. A passive result does not go to the Observer (which sees probes).
//
// Errors: a *FieldError for a bad outcome, ErrUnknownTarget, an error
// wrapping ErrPassiveDisabled, ErrClosed.
func (r *registry) reportOutcome(name string, o Outcome) (st Status, counted bool, err error) {
	r.mu.Lock()
	defer r.unlockAndReport()
	out, prevRev, st, counted, err := r.takeOutcomeLocked(name, o, nil)
	if err != nil || !counted {
		return st, false, err
	}
	// The one member's log: the outcome is applied at once, as a shared
	// registry's owner applies it.
	now := r.clock.Now()
	r.applyOutcomeLocked(name, out, prevRev+1, now)
	return r.statusLocked(r.targets[name], now), true, nil
}

// outcomeTargetLocked returns the target an outcome is reported for, or
// ErrClosed, ErrUnknownTarget, or an error wrapping ErrQuarantined or
// ErrPassiveDisabled.
func (r *registry) outcomeTargetLocked(name string) (*target, error) {
	if r.closed {
		return nil, ErrClosed
	}
	t, ok := r.targets[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownTarget, name)
	}
	if t.quarantined() != "" {
		return nil, fmt.Errorf("target %q: %w", name, ErrQuarantined)
	}
	if !t.spec.PassiveOutcomes {
		return nil, fmt.Errorf("target %q: %w", name, ErrPassiveDisabled)
	}
	return t, nil
}

// outcomeResult is the result a passive outcome gives a target of spec
// spec at now: a failure without a reason says "request failed", and a
// success slower than MaxLatency is a failure.
func outcomeResult(spec Spec, o Outcome, now time.Time) Result {
	res := Result{Pass: o.Pass, Latency: o.Latency, Err: o.Err, Time: now, Passive: true}
	switch {
	case !res.Pass && res.Err == "":
		res.Err = "request failed"
	case res.Pass && spec.MaxLatency > 0 && res.Latency > spec.MaxLatency:
		res.Pass = false
		res.Err = fmt.Sprintf("slow: %v > %v", res.Latency.Round(time.Millisecond), spec.MaxLatency)
	}
	return res
}
