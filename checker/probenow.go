package checker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// On-demand rounds (ProbeNow): the one-shot round of RunRound over a
// selection of targets, with the result of each, bounded in time and
// rate-limited. Scheduled probes go on meanwhile: a round's result moves a
// target's next probe as any result does, along the target's fixed-rate
// grid (see rescheduleLocked), so the schedule keeps its slots.

// The bounds of ProbeNow.
const (
	// MaxProbeNowNames bounds Selection.Names.
	MaxProbeNowNames = 10000
	// ProbeNowRate is how many ProbeNow rounds a second a checker starts
	// for each client (Selection.Client), with bursts of up to
	// ProbeNowBurst; a round over the rate is refused with a *RateError and
	// probes nothing. Other clients keep their own rate.
	ProbeNowRate  = 1
	ProbeNowBurst = 5
	// ProbeNowTotalRate is how many ProbeNow rounds a second a checker
	// starts for all clients together, with bursts of up to
	// ProbeNowTotalBurst; a round over it is refused as well.
	ProbeNowTotalRate  = 5
	ProbeNowTotalBurst = 20
	// MaxProbeNowClients bounds the clients whose ProbeNow rate a checker
	// remembers; past it, it forgets those whose budget has refilled.
	MaxProbeNowClients = 10000
	// ProbeNowSlack is added to a round's bound (see ProbeNow) for the
	// queueing and applying that are not probing.
	ProbeNowSlack = time.Second
)

// ErrRateLimited: a call came faster than its rate allows; see RateError.
var ErrRateLimited = errors.New("rate limit exceeded")

// RateError says which rate a call exceeded and when to retry.
type RateError struct {
	// What is limited, e.g. "probe-now rounds".
	What       string
	PerSecond  float64
	Burst      int
	RetryAfter time.Duration
	// Scope, when set, says whose calls the rate counts, e.g. "per
	// client".
	Scope string
}

func (e *RateError) Error() string {
	scope := ""
	if e.Scope != "" {
		scope = " " + e.Scope
	}
	return fmt.Sprintf("%v: at most %g %s a second%s (burst %d); retry in %v", ErrRateLimited, e.PerSecond, e.What, scope, e.Burst, e.RetryAfter.Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrRateLimited) true.
func (e *RateError) Is(target error) bool { return target == ErrRateLimited }

// Selection picks the targets of a ProbeNow round. The zero Selection
// picks every target; with both fields set a target must match both.
type Selection struct {
	// Group, when set, picks that group's targets.
	Group string
	// Names, when set, picks these targets; each must exist. At most
	// MaxProbeNowNames; a name listed twice is probed once.
	Names []string
	// Client names the caller for the rate limit of ProbeNowRate per
	// client, e.g. the name of its token or its address. Empty is one
	// client like any other.
	Client string
}

// Round is what a ProbeNow round did.
type Round struct {
	// Transitions are the round's transitions in target name order,
	// including those its results caused in other targets (a panic hold
	// released).
	Transitions []Transition
	// Results has one entry per selected target, in name order.
	Results []RoundResult
}

// RoundResult is what a round did with one target.
type RoundResult struct {
	Name string
	// Probed is true when the round probed the target; Result is then the
	// probe's result.
	Probed bool
	Result Result
	// Skipped says why the target was not probed when Probed is false,
	// e.g. "a probe was already in flight".
	Skipped string
	// State is the target's state after the round.
	State State
}

// ProbeNow probes the targets sel picks once, at once, as RunRound does,
// and returns the round's transitions and each target's result. The round
// waits for the slowest probe, but no longer than the longest timeout of
// its targets times the number of waves MaxConcurrentProbes slots need
// for them, plus ProbeNowSlack; a probe not done by then is Skipped. A
// target with a probe in flight, quarantined, or (with a shared registry)
// probed by another replica is Skipped. Scheduled probes keep their grid.
//
// Errors: a *FieldError for a malformed selection, an error wrapping
// ErrUnknownTarget for a name not registered (nothing is probed), a
// *RateError over ProbeNowRate for sel.Client or over ProbeNowTotalRate
// (a refused round takes nothing from either rate), ErrClosed: also when
// the checker closes during the round, which cuts its probes short and
// applies none of them.
func (c *Checker) ProbeNow(ctx context.Context, sel Selection) (Round, error) {
	if err := sel.validate(); err != nil {
		return Round{}, err
	}
	return c.sched.probeNow(ctx, sel)
}

func (sel Selection) validate() error {
	if err := ValidateGroup(sel.Group); err != nil {
		return &FieldError{Field: "group", Reason: err.Error()}
	}
	if n := len(sel.Names); n > MaxProbeNowNames {
		return &FieldError{Field: "names", Reason: fmt.Sprintf("must list at most %d targets, got %d; select a group instead", MaxProbeNowNames, n)}
	}
	for i, n := range sel.Names {
		if err := ValidateName(n); err != nil {
			return &FieldError{Field: fmt.Sprintf("names[%d]", i), Reason: err.Error()}
		}
	}
	return nil
}

// lookupLocked returns the target of that name; nil if none.
func (r *registry) lookupLocked(name string) *target { return r.targets[name] }

// probeNow is ProbeNow once the selection is valid.
func (s *scheduler) probeNow(ctx context.Context, sel Selection) (Round, error) {
	pick := func() ([]*target, error) {
		if len(sel.Names) == 0 {
			var ts []*target
			s.reg.eachLocked(func(t *target) {
				if sel.Group == "" || t.spec.Group == sel.Group {
					ts = append(ts, t)
				}
			})
			return ts, nil
		}
		ts := make([]*target, 0, len(sel.Names))
		seen := make(map[string]bool, len(sel.Names))
		for _, name := range sel.Names {
			t := s.reg.lookupLocked(name)
			if t == nil {
				return nil, fmt.Errorf("%w %q", ErrUnknownTarget, name)
			}
			if seen[name] || sel.Group != "" && t.spec.Group != sel.Group {
				continue
			}
			seen[name] = true
			ts = append(ts, t)
		}
		return ts, nil
	}
	limited := func() ([]*target, error) {
		ts, err := pick()
		if err == nil {
			err = s.demand.takeLocked(sel.Client, s.clock.Now())
		}
		return ts, err
	}
	return s.round(ctx, limited, true)
}

// round is the one-shot round of RunRound and ProbeNow: with the
// registry's lock held, pick returns the targets to probe; round queues a
// job for each that can be probed now, waits for them all, then applies
// the results in name order under the lock. With demand, the round is an
// on-demand one (whose pick takes the rate limit, see probeNow): it is
// bounded in time (see ProbeNow) and reports each picked target's result.
func (s *scheduler) round(ctx context.Context, pick func() ([]*target, error), demand bool) (Round, error) {
	s.reg.lock()
	if s.reg.closedLocked() || s.ctx.Err() != nil {
		s.reg.unlock()
		return Round{}, ErrClosed
	}
	picked, err := pick()
	if err != nil {
		s.reg.unlock()
		return Round{}, err
	}
	now := s.clock.Now()
	slices.SortFunc(picked, func(a, b *target) int { return cmp.Compare(a.spec.Name, b.spec.Name) })
	skipped := make([]string, len(picked))
	var jobs []job
	var longest time.Duration
	for i, t := range picked {
		switch {
		case t.quarantined() != "":
			skipped[i] = "quarantined: " + t.quarantined()
		case !s.reg.probedLocked(t):
			skipped[i] = "probed by another replica"
		case t.inFlight:
			skipped[i] = "a probe was already in flight; its result comes as scheduled"
		default:
			j := s.jobLocked(t, now)
			j.i, j.hung = i, false // a round waits for all its probes: none waits in the hung queue
			jobs = append(jobs, j)
			longest = max(longest, t.spec.Timeout)
		}
	}
	// The round's probes end with the checker too: Close cancels the
	// scheduler's context and waits for the workers, and a probe under the
	// caller's context alone (a ProbeNow of a target with a 30s timeout)
	// would hold the shutdown that long.
	ctx, cancelRound := context.WithCancel(ctx)
	defer cancelRound()
	defer context.AfterFunc(s.ctx, cancelRound)()
	if demand && len(jobs) > 0 {
		waves := (len(jobs) + s.pool.max - 1) / s.pool.max
		var cancel context.CancelFunc
		ctx, cancel = s.clock.WithTimeout(ctx, mulDur(int64(waves), longest)+ProbeNowSlack)
		defer cancel()
	}
	rd := &round{ctx: ctx, out: make([]outcome, len(picked)), left: len(jobs), done: make(chan struct{})}
	if len(jobs) == 0 {
		close(rd.done)
	}
	for _, j := range jobs {
		j.round = rd
		s.enqueueLocked(j)
	}
	s.dispatchLocked()
	s.reg.unlockAndReport()
	<-rd.done

	s.reg.lock()
	mark := s.reg.reportsLocked()
	for _, j := range jobs {
		o := rd.out[j.i]
		if o.skipped {
			if s.reg.currentLocked(j.t) {
				j.t.inFlight = false
			}
			continue
		}
		// The round's own context may have ended since: a probe that
		// finished before it did is a valid result.
		s.applyLocked(s.ctx, j.t, j.gen, j.due, o.r, o.timedOut)
	}
	if demand && s.ctx.Err() != nil {
		// The checker closed during the round: nothing of it was applied
		// (applyLocked drops a result once the scheduler is stopping).
		s.reg.unlockAndReport()
		return Round{}, ErrClosed
	}
	out := Round{Transitions: s.reg.transitionsSinceLocked(mark)}
	if demand {
		out.Results = make([]RoundResult, len(picked))
		probed := make([]bool, len(picked))
		gens := make([]uint32, len(picked))
		for _, j := range jobs {
			probed[j.i], gens[j.i] = true, j.gen
		}
		for i, t := range picked {
			rr := RoundResult{Name: t.spec.Name, State: t.state, Skipped: skipped[i]}
			o := rd.out[i]
			switch {
			case !probed[i]:
			case !s.reg.currentLocked(t):
				rr.Skipped = "removed during the round"
			case t.gen != gens[i]:
				rr.Skipped = "its probe changed during the round"
			case o.skipped:
				rr.Skipped = "the round ended before its probe did (its deadline passed, or the caller left)"
			default:
				rr.Probed, rr.Result = true, o.r
			}
			out.Results[i] = rr
		}
	}
	s.reg.unlockAndReport()
	slices.SortStableFunc(out.Transitions, func(a, b Transition) int { return cmp.Compare(a.Target, b.Target) })
	return out, nil
}
