package checker

import (
	"context"
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

// Passive outcomes with a shared registry. Any replica accepts
// ReportOutcome; the target's owner applies it. The replica asked takes a
// token from the target's bucket as stored in the shared registry, and
// stores the outcome together with the bucket after it
// (SharedOutcomes.PutOutcome), on the condition that the stored bucket is
// still the one it took the token from: two replicas cannot both take the
// last token. Every replica applies every stored outcome, in the shared
// registry's order (its bucket and its passive_results count), and the
// owner at that revision feeds it to the target's machine, as a probe
// result.
//
// How exact the rate limit is across replicas: exactly one bucket of
// passive_rate a second with a burst of as many per target, whatever
// replicas the outcomes go to, except that a bucket refills by the clock
// of the replica that takes the next token: a replica whose clock runs
// ahead of the others' by d grants up to d x passive_rate more tokens
// (none with clocks in step). An outcome that loses outcomeTries races in a
// row for the bucket is answered as over the rate (counted false).
// passive_rate_limited counts the outcomes the replica asked refused: it
// is that replica's own count.

// SharedOutcomes is the part of Shared that forwards passive outcomes to
// the targets' owners.
type SharedOutcomes interface {
	// PutOutcome stores o as the named target's latest outcome if the one
	// stored is still the one stored at prevRev (0: none), and returns the
	// revision it was stored at. If another one was stored since, it
	// stores nothing and returns that one (cur, not nil) and its revision.
	// An error wraps ErrUnknownTarget when the target is not stored.
	PutOutcome(ctx context.Context, name string, o SharedOutcome, prevRev uint64) (rev uint64, cur *SharedOutcome, err error)
}

// SharedOutcomePut: a replica stored a passive outcome (Name, Outcome) for
// the target's owner; numbered apart from the kinds in shared.go.
const SharedOutcomePut SharedChangeKind = 16

// SharedOutcome is a passive outcome on its way to its target's owner,
// with the target's rate-limit bucket after it.
type SharedOutcome struct {
	// Result is the outcome as a result (Passive); its Time is when a
	// replica accepted it, and the time of the bucket's Tokens.
	Result Result `json:"result"`
	// Tokens is what the bucket holds after the outcome took its token.
	Tokens float64 `json:"tokens"`
	// Replica is the replica that accepted it; the shared registry fills
	// it in.
	Replica string `json:"replica,omitempty"`
}

// outcomeTries bounds the attempts of one ReportOutcome to store its
// outcome while other replicas' outcomes for the same target take the
// bucket first.
const outcomeTries = 8

// outcomeBucket is a target's passive-outcome token bucket as stored with
// its latest outcome. It is hand-rolled rather than a rate.Limiter because
// it travels through the shared registry: a Limiter's tokens cannot be set
// to a stored count.
type outcomeBucket struct {
	tokens float64
	at     time.Time
	rev    uint64 // the stored outcome's revision; 0: none known
}

// take returns the bucket after one outcome at now, with rate tokens a
// second and a burst of as many (a bucket never stored is full), and false
// if it holds no token.
func (b outcomeBucket) take(now time.Time, rate int) (outcomeBucket, bool) {
	tokens := float64(rate)
	if b.rev != 0 {
		tokens = b.tokens
		if !(tokens >= 0) { // a record that does not make sense (NaN too) is an empty bucket
			tokens = 0
		}
		if el := now.Sub(b.at); el > 0 {
			tokens += el.Seconds() * float64(rate)
		}
		tokens = min(tokens, float64(rate))
	}
	if tokens < 1 {
		return b, false
	}
	// A clock behind the stored time does not refill the same time twice.
	return outcomeBucket{tokens: tokens - 1, at: later(now, b.at), rev: b.rev}, true
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// bucketLocked returns t's passive outcomes' bucket as last stored, making
// it.
func (t *target) bucketLocked() *outcomeBucket {
	m := t.moreLocked()
	if m.bucket == nil {
		m.bucket = &outcomeBucket{}
	}
	return m.bucket
}

// reportOutcome is ReportOutcome with a shared registry.
func (rp *replication) reportOutcome(name string, o Outcome) (Status, bool, error) {
	ctx, cancel := context.WithTimeout(rp.closing, sharedWait)
	defer cancel()
	var cur *outcomeBucket // the stored bucket a lost race returned
	for range outcomeTries {
		out, prevRev, st, counted, err := rp.reg.takeOutcome(name, o, cur)
		if err != nil || !counted {
			return st, false, err
		}
		rev, stored, err := rp.shared.PutOutcome(ctx, name, out, prevRev)
		switch {
		case errors.Is(err, ErrUnknownTarget):
			return Status{}, false, err
		case err != nil:
			return Status{}, false, sharedWriteErr(err)
		case stored != nil:
			cur = &outcomeBucket{tokens: stored.Tokens, at: stored.Result.Time, rev: rev}
			continue
		}
		if err := rp.waitApplied(ctx, rev); err != nil {
			return Status{}, false, err
		}
		st, err = rp.reg.status(name)
		return st, err == nil, err
	}
	st, err := rp.reg.limitedOutcome(name)
	return st, false, err
}

// takeOutcome takes a token for an outcome from name's bucket: the stored
// one, or cur when a lost race returned a newer one. It returns the outcome
// to store and the revision of the bucket it took from, or counted false
// and the target's status when the bucket is empty.
func (r *registry) takeOutcome(name string, o Outcome, cur *outcomeBucket) (out SharedOutcome, prevRev uint64, st Status, counted bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.takeOutcomeLocked(name, o, cur)
}

func (r *registry) takeOutcomeLocked(name string, o Outcome, cur *outcomeBucket) (out SharedOutcome, prevRev uint64, st Status, counted bool, err error) {
	t, err := r.outcomeTargetLocked(name)
	if err != nil {
		return SharedOutcome{}, 0, Status{}, false, err
	}
	now := r.clock.Now()
	b := *t.bucketLocked()
	if cur != nil && cur.rev > b.rev {
		b = *cur
	}
	nb, ok := b.take(now, t.spec.passiveRate())
	if !ok {
		t.moreLocked().limited++
		return SharedOutcome{}, 0, r.statusLocked(t, now), false, nil
	}
	return SharedOutcome{Result: outcomeResult(t.spec, o, now), Tokens: nb.tokens}, b.rev, Status{}, true, nil
}

// limitedOutcome counts an outcome refused as over the rate.
func (r *registry) limitedOutcome(name string) (Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, err := r.outcomeTargetLocked(name)
	if err != nil {
		return Status{}, err
	}
	t.moreLocked().limited++
	return r.statusLocked(t, r.clock.Now()), nil
}

// applyOutcomeLocked applies an outcome stored at rev: every replica keeps
// the bucket and counts it; the owner feeds it to the target's machine,
// and so does each of its vantages, probed from several, to its own: an
// outcome is the client's word, not one vantage's.
func (r *registry) applyOutcomeLocked(name string, so SharedOutcome, rev uint64, now time.Time) {
	t, ok := r.targets[name]
	if !ok {
		return
	}
	*t.bucketLocked() = outcomeBucket{tokens: so.Tokens, at: so.Result.Time, rev: rev}
	if !t.spec.PassiveOutcomes || t.quarantined() != "" {
		return
	}
	t.moreLocked().passive++
	if !t.owned && !t.vantage {
		return // its owner, and each of its vantages, count it
	}
	res := so.Result
	res.Passive = true
	r.observeLocked(t, res, now)
	r.sched.rescheduleLocked(t, now)
}
