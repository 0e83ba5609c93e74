// Package oneshot checks a list of targets once, concurrently, and reports
// on them: the one-shot checker, made for cron jobs and CI
// pipelines (pulsectl check). It probes with package probe, so a target is
// probed here exactly as pulsed would probe it.
//
// Each target is checked by one of Options.Workers goroutines. A check makes
// attempts until one passes, the retry budget is spent, a failure is not
// worth retrying, or the global deadline would be crossed:
//
//   - The global deadline is Options.Deadline after Run starts. No attempt
//     starts at or after it, and each attempt's timeout is the target's
//     Timeout clipped to what is left of it.
//   - Transient failures are retried: an HTTP 5xx, a timeout, a transport
//     error (connection refused, reset, DNS), and for gRPC targets
//     NOT_SERVING and the gRPC codes a server returns when overloaded or
//     unreachable. Anything else, such as an HTTP 4xx, an unexpected 2xx
//     or 3xx, or an answer that fails an expectation (a body without the
//     text it must contain, a TCP step's reply, a DNS answer: a
//     *probe.ExpectError), is the target's answer and is not retried.
//   - Between attempts the check sleeps a full-jitter backoff (see Backoff):
//     rand * min(cap, base * 2^attempt). A backoff that would reach the
//     deadline ends the check instead ("global deadline reached while
//     backing off").
//
// The outcome is Healthy when the first attempt passed, Degraded when a
// retry passed ("ok after N retries"), and Down otherwise, with the reason.
// Results keep the order of the targets. Summarize computes the report and
// WriteMetrics the Prometheus text.
package oneshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pulsehealth/pulse/checker/probe"
)

// Defaults of Options and Target fields left zero.
const (
	// DefaultWorkers is how many targets are checked at once.
	DefaultWorkers = 8
	// DefaultDeadline bounds a whole run.
	DefaultDeadline = 20 * time.Second
	// DefaultTimeout bounds one attempt of a target.
	DefaultTimeout = 2 * time.Second
	// DefaultBackoffBase is the backoff ceiling before the first retry; it
	// doubles for each later one.
	DefaultBackoffBase = 200 * time.Millisecond
	// DefaultBackoffCap is the largest backoff ceiling.
	DefaultBackoffCap = 5 * time.Second
	// DefaultMaxRetries is the retry budget pulsectl check uses. It is not
	// a zero-value default: Options.MaxRetries 0 means no retries.
	DefaultMaxRetries = 3
	// MaxTimeout bounds Target.Timeout, as pulsed bounds a target's
	// timeout: no health check waits longer for one answer.
	MaxTimeout = time.Hour
)

// Target is one thing to check. The zero Target is invalid (it has no
// probe).
type Target struct {
	// Name identifies the target in results and metrics.
	Name string
	// Probe says what to probe. For HTTP, set ExpectedStatus to the one
	// status that passes (expected_status) so that a passing
	// Attempt reports it; any other status is a failed attempt whose
	// Status is the code received.
	Probe probe.Spec
	// Timeout bounds one attempt, at most MaxTimeout. Zero means
	// DefaultTimeout.
	Timeout time.Duration
	// Critical targets that end Down are listed in Summary.CriticalDown.
	Critical bool
}

// Validate reports the first problem with t: a *probe.FieldError for its
// probe spec (including the probe package's size bounds), or an error
// starting "timeout: " for a Timeout that is negative or over MaxTimeout.
// Run does not call it: a probe spec Validate refuses fails its attempts,
// and a long timeout is clipped to the deadline.
func (t Target) Validate() error {
	switch {
	case t.Timeout < 0:
		return fmt.Errorf("timeout: must be positive when set, got %v", t.Timeout)
	case t.Timeout > MaxTimeout:
		return fmt.Errorf("timeout: must be at most %v, got %v", MaxTimeout, t.Timeout)
	}
	return t.Probe.Validate()
}

// Outcome is how a target's check ended.
type Outcome string

// The outcomes.
const (
	// Healthy: the first attempt passed.
	Healthy Outcome = "healthy"
	// Degraded: an attempt after one or more retries passed.
	Degraded Outcome = "degraded"
	// Down: no attempt passed.
	Down Outcome = "down"
)

// Attempt is one probe of a target.
type Attempt struct {
	// Start is when the attempt started, on the target's clock.
	Start time.Time
	// Latency is how long the attempt took.
	Latency time.Duration
	// Answered is true when the target answered: an HTTP status, a TCP
	// connect, a gRPC reply. It is false for timeouts and transport errors
	// (no status); the latency percentiles use only
	// answered attempts.
	Answered bool
	// Status is the HTTP status received: the code of a failing response,
	// or the expected code when the attempt passed and the probe expects
	// exactly one. Zero otherwise, and for TCP and gRPC targets.
	Status int
	// Err says why the attempt failed, e.g. "status 503", "timeout after
	// 1s", "connection refused"; empty when it passed.
	Err string
}

// Result is the outcome of one target's check.
type Result struct {
	Target   Target
	Attempts []Attempt
	Outcome  Outcome
	// Reason explains the outcome: "ok", "ok after 2 retries", "status 404,
	// not retried", "still failing after 3 retries (status 500)", "global
	// deadline reached while backing off", ...
	Reason string
}

// Retries returns the number of attempts after the first.
func (r Result) Retries() int { return max(0, len(r.Attempts)-1) }

// Last returns the last attempt; ok is false when none was made.
func (r Result) Last() (a Attempt, ok bool) {
	if len(r.Attempts) == 0 {
		return Attempt{}, false
	}
	return r.Attempts[len(r.Attempts)-1], true
}

// ProberFactory builds a Prober for a probe spec; *probe.Factory is one.
type ProberFactory interface {
	New(probe.Spec) (probe.Prober, error)
}

// Options configures Run. The zero Options is ready to use: every zero
// field takes the default its comment gives.
type Options struct {
	// Workers bounds how many targets are checked at once. Zero means
	// DefaultWorkers.
	Workers int
	// Deadline bounds the whole run. Zero means DefaultDeadline.
	Deadline time.Duration
	// MaxRetries is how many times a transient failure is retried. Zero
	// means no retries; pulsectl check passes DefaultMaxRetries.
	MaxRetries int
	// BackoffBase and BackoffCap shape the backoff (see Backoff). Zero
	// means DefaultBackoffBase and DefaultBackoffCap.
	BackoffBase, BackoffCap time.Duration
	// Factory builds the probers. Nil means a probe.Factory that Run
	// creates and closes. gRPC probers (io.Closers) are closed when their
	// target's check ends.
	Factory ProberFactory
	// Clock is the run's time source: the global deadline is Deadline after
	// Clock.Now() when Run starts, and every target's check reads, sleeps
	// and times out on it unless TargetClock is set. Nil means the wall
	// clock.
	Clock Clock
	// TargetClock, when set, returns the clock the check of targets[i]
	// uses instead of Clock; it must read the same time as Clock when Run
	// starts. Tests use it to give each target its own fake timeline: one
	// target's fake probe time and backoff then never show up in another
	// target's latency, whatever order the goroutines run in.
	TargetClock func(i int) Clock
	// Rand returns a number in [0, 1) for the backoff jitter. Run
	// serializes its calls, so a *rand.Rand's Float64 may be passed. Nil
	// means math/rand/v2's Float64.
	Rand func() float64
	// Progress, when set, is called after each target's check with the
	// number of checks done, the total, and how many ended Down so far.
	// Calls never overlap.
	Progress func(done, total, failing int)
}

// Run checks every target and returns one Result per target, in the
// targets' order. Cancelling ctx ends the checks in progress (their reason
// is "check canceled") and skips the rest. Run is safe to call
// concurrently with other Runs that do not share a non-thread-safe Rand.
func Run(ctx context.Context, targets []Target, opts Options) []Result {
	r := newRun(opts)
	if r.factory == nil {
		f := probe.NewFactory()
		defer f.Close()
		r.factory = f
	}
	r.deadline = r.clock.Now().Add(r.opts.Deadline)

	results := make([]Result, len(targets))
	jobs := make(chan int)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex // protects done and failing, and serializes Progress
		done    int
		failing int
	)
	for range min(r.opts.Workers, len(targets)) {
		wg.Go(func() {
			for i := range jobs {
				res := r.check(ctx, i, targets[i])
				results[i] = res
				mu.Lock()
				done++
				if res.Outcome == Down {
					failing++
				}
				if r.opts.Progress != nil {
					r.opts.Progress(done, len(targets), failing)
				}
				mu.Unlock()
			}
		})
	}
	for i := range targets {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return results
}

// run is one Run's settings with the defaults filled in.
type run struct {
	opts     Options
	factory  ProberFactory
	clock    Clock
	deadline time.Time

	randMu sync.Mutex // serializes opts.Rand
}

func newRun(opts Options) *run {
	if opts.Workers <= 0 {
		opts.Workers = DefaultWorkers
	}
	if opts.Deadline <= 0 {
		opts.Deadline = DefaultDeadline
	}
	if opts.MaxRetries < 0 {
		opts.MaxRetries = 0
	}
	if opts.BackoffBase <= 0 {
		opts.BackoffBase = DefaultBackoffBase
	}
	if opts.BackoffCap <= 0 {
		opts.BackoffCap = DefaultBackoffCap
	}
	if opts.Rand == nil {
		opts.Rand = rand.Float64
	}
	r := &run{opts: opts, factory: opts.Factory, clock: opts.Clock}
	if r.clock == nil {
		r.clock = realClock{}
	}
	return r
}

// rand returns the next jitter factor.
func (r *run) rand() float64 {
	r.randMu.Lock()
	defer r.randMu.Unlock()
	return r.opts.Rand()
}

// check runs the attempts of one target; see the package comment.
func (r *run) check(ctx context.Context, i int, t Target) Result {
	clock := r.clock
	if r.opts.TargetClock != nil {
		clock = r.opts.TargetClock(i)
	}
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	res := Result{Target: t, Outcome: Down}
	if ctx.Err() != nil {
		res.Reason = "check canceled"
		return res
	}
	p, err := r.factory.New(t.Probe)
	if err != nil {
		res.Reason = "invalid probe: " + err.Error()
		return res
	}
	if c, ok := p.(io.Closer); ok {
		defer c.Close()
	}
	for attempt := 0; ; attempt++ {
		now := clock.Now()
		if !now.Before(r.deadline) {
			// Only the first attempt can get here on a fake clock; a real
			// sleep may overshoot the deadline by a little.
			res.Reason = "global deadline reached before the check ran"
			if attempt > 0 {
				res.Reason = "global deadline reached while backing off"
			}
			return res
		}
		// The attempt's timeout is clipped to what is left of the deadline.
		limit := min(timeout, r.deadline.Sub(now))
		actx, cancel := clock.WithTimeout(ctx, limit)
		err := safeProbe(actx, p)
		att := Attempt{Start: now, Latency: clock.Now().Sub(now)}
		cancel()
		if ctx.Err() != nil {
			res.Reason = "check canceled"
			return res
		}
		transient := classify(&att, err, t.Probe, limit)
		res.Attempts = append(res.Attempts, att)

		switch {
		case err == nil && attempt == 0:
			res.Outcome, res.Reason = Healthy, "ok"
			return res
		case err == nil:
			res.Outcome, res.Reason = Degraded, fmt.Sprintf("ok after %d retries", attempt)
			return res
		case !transient:
			res.Reason = att.Err + ", not retried"
			return res
		case attempt >= r.opts.MaxRetries:
			res.Reason = fmt.Sprintf("still failing after %d retries (%s)", attempt, att.Err)
			return res
		}
		delay := Backoff(attempt, r.opts.BackoffBase, r.opts.BackoffCap, r.rand)
		if !clock.Now().Add(delay).Before(r.deadline) {
			res.Reason = "global deadline reached while backing off"
			return res
		}
		if clock.Sleep(ctx, delay) != nil {
			res.Reason = "check canceled"
			return res
		}
	}
}

// Backoff returns the full-jitter delay before retry number attempt+1:
// rng() * min(cap, base * 2^attempt), so attempt 0 waits up to base,
// attempt 1 up to 2*base, and so on up to cap. The random spread stops many
// checkers from retrying in lock step against a struggling server. rng must
// return a number in [0, 1).
func Backoff(attempt int, base, cap time.Duration, rng func() float64) time.Duration {
	ceiling := min(base, cap)
	for range max(attempt, 0) {
		if ceiling <= 0 || ceiling >= cap {
			break
		}
		ceiling = min(2*ceiling, cap) // cap bounds it before it can overflow
	}
	return time.Duration(rng() * float64(ceiling))
}

// panicError is a probe that panicked: a failed attempt, not worth a retry.
type panicError struct{ v any }

func (e *panicError) Error() string { return fmt.Sprintf("probe panicked: %v", e.v) }

// safeProbe runs p.Probe and turns a panic into an error.
func safeProbe(ctx context.Context, p probe.Prober) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{v: v}
		}
	}()
	return p.Probe(ctx)
}

// classify fills att's Answered, Status and Err from the probe's error and
// reports whether a failure is transient, that is, worth retrying. limit is
// the attempt's timeout.
func classify(att *Attempt, err error, spec probe.Spec, limit time.Duration) (transient bool) {
	if err == nil {
		att.Answered = true
		if spec.HTTP != nil && len(spec.HTTP.ExpectedStatus) == 1 {
			att.Status = spec.HTTP.ExpectedStatus[0]
		}
		return false
	}
	att.Err = probe.Describe(err)
	var (
		statusErr *probe.StatusError
		expectErr *probe.ExpectError
		panicErr  *panicError
	)
	switch {
	case errors.As(err, &statusErr):
		att.Answered, att.Status = true, statusErr.Code
		return statusErr.Code >= 500 && statusErr.Code <= 599
	case errors.As(err, &expectErr):
		// A body, header, TCP step or DNS answer other than the one
		// expected: the target answered, and asking again is not worth it.
		att.Answered = true
		return false
	case errors.Is(err, context.DeadlineExceeded):
		att.Err = "timeout after " + limit.Round(time.Millisecond).String()
		return true
	case errors.As(err, &panicErr):
		att.Err = panicErr.Error()
		return false
	case spec.GRPC != nil:
		return classifyGRPC(att, err)
	}
	return true // a transport error: refused, reset, DNS, TLS
}

// classifyGRPC classifies a failed grpc.health.v1 Check. NOT_SERVING is
// the gRPC form of a 503 and is retried; SERVICE_UNKNOWN is its 404.
func classifyGRPC(att *Attempt, err error) (transient bool) {
	switch att.Err {
	case "NOT_SERVING", "UNKNOWN":
		att.Answered = true
		return true
	case "SERVICE_UNKNOWN":
		att.Answered = true
		return false
	}
	st, ok := status.FromError(err)
	if !ok {
		return true
	}
	switch st.Code() {
	case codes.Unavailable:
		return true // no connection: the server did not answer
	case codes.ResourceExhausted, codes.Aborted, codes.Internal, codes.Unknown:
		att.Answered = true
		return true
	default: // Unimplemented (no health service), PermissionDenied, ...
		att.Answered = true
		return false
	}
}
