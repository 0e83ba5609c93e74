package checker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pulsehealth/pulse/checker/probe"
)

// The probe pool: a FIFO queue of jobs and at most MaxConcurrentProbes
// workers that take jobs from it, probe, and apply the result. A due target
// costs one small queue entry, not a goroutine parked on a semaphore, so a
// checker that falls behind holds its backlog in a slice (about 64 bytes a
// target) rather than in goroutine stacks. Workers wake one another, or
// start, one at a time as jobs need them (see spreadLocked), up to the
// bound; up to maxIdleWorkers of them stay until Close once idle, the
// others end. An idle worker waits on a condition of the registry's lock,
// which guards the pool.
//
// A worker takes the registry's lock once per probe: to apply the result of the probe it
// just ran and, in the same critical section, to take its next job. An
// asynchronous probe (AsyncProber) holds no worker while it waits: the
// worker takes its next job at once, and asyncDone takes the lock to apply
// the result when it comes. The queue and the counts below are guarded by
// the registry's lock.

// probePool is the scheduler's pool state; guarded by the registry's lock.
type probePool struct {
	max     int        // the bound: MaxConcurrentProbes
	queue   jobQueue   // jobs waiting for a worker
	urgent  jobQueue   // reprobes waiting for a worker (see reprobe.go): taken first
	hung    jobQueue   // probes of targets whose last probe timed out (see pop)
	workers int        // workers started and not yet stopped
	idle    int        // workers waiting for a job
	running int        // jobs taken by a worker and not yet applied
	hungRun int        // of running, the jobs taken from hung
	fullEnd int64      // when running last fell from max (on the scheduler's frame): a job that waited got its slot then
	cond    *sync.Cond // on the registry's lock: signalled when a job is queued or the pool stops
}

func (p *probePool) init(mu *sync.Mutex, max int) {
	p.max = max
	p.cond = sync.NewCond(mu)
}

// waiting counts the queued jobs that no free worker can take now: the
// probes waiting for a slot.
func (p *probePool) waiting() int {
	return max(0, p.queued()-(p.max-p.running))
}

// queued counts the jobs waiting for a worker.
func (p *probePool) queued() int { return p.queue.len() + p.urgent.len() + p.hung.len() }

// release frees the slot of j's probe, which ended at now (on the
// scheduler's frame).
func (p *probePool) release(j job, now int64) {
	if p.running == p.max {
		p.fullEnd = now
	}
	p.running--
	if j.hung {
		p.hungRun--
	}
}

// push queues j: a reprobe's job in the urgent queue, which workers take
// from first. A reprobe is of a target that most likely just died; behind
// a backlog of scheduled probes, its fall would wait for the backlog
// (fall) times over. A probe of a target whose last probe timed out goes
// in the hung queue (see pop).
func (p *probePool) push(j job) {
	switch {
	case j.reprobe:
		p.urgent.push(j)
	case j.hung:
		p.hung.push(j)
	default:
		p.queue.push(j)
	}
}

// pop takes the next job: an urgent one first; then one of a target whose
// last probe timed out while such probes hold fewer than half the slots
// (rounded down: none of a single slot); then any other; then one of a
// timed-out target's anyway. A hung target
// holds its slot for its whole timeout, so a rack of them that went dark
// would fill every slot, and the probes of the targets that answer would
// wait behind theirs: 1,500 hung targets on 256 slots had 500 answering
// ones probed every 5 to 9s instead of 2. Half the slots keep the hung
// targets probed (they must still go down), and all of them when nothing
// else waits.
func (p *probePool) pop() (job, bool) {
	if j, ok := p.urgent.pop(); ok {
		return j, true
	}
	if p.hungRun < p.max/2 {
		if j, ok := p.hung.pop(); ok {
			return j, true
		}
	}
	if j, ok := p.queue.pop(); ok {
		return j, true
	}
	return p.hung.pop()
}

// job is one probe to run, queued until a worker takes it. It holds the
// target rather than a copy of its spec: the worker reads what it needs
// under the registry's lock when it takes the job.
type job struct {
	t        *target
	gen      uint32        // t.gen when the probe was scheduled: a job outlived by its probe spec (or, shared, its ownership) is not run
	due      time.Time     // when the probe should start
	startNs  int64         // when the scheduler meant to start it, batched by the tick (on the scheduler's frame); 0: at due
	interval time.Duration // the interval it was scheduled at
	round    *round        // the RunRound the job belongs to; nil for a scheduled probe
	i        int           // the job's index in round.out
	reprobe  bool          // brought forward by a lost connection, or following one
	hung     bool          // a scheduled probe of a target whose last probe timed out
}

// round collects the results of one RunRound.
type round struct {
	ctx  context.Context
	out  []outcome
	left int           // jobs not done; guarded by the registry's lock
	done chan struct{} // closed when left reaches 0
}

// outcome is what became of one job of a round.
type outcome struct {
	r        Result
	timedOut bool
	skipped  bool // never probed: target gone or changed, round cancelled, or checker closed
}

// jobQueue is a FIFO of jobs in a slice that is reused once drained (up to
// maxKeptQueue jobs) and compacted when it would otherwise grow.
type jobQueue struct {
	buf  []job
	head int
}

const maxKeptQueue = 1024

func (q *jobQueue) len() int { return len(q.buf) - q.head }

func (q *jobQueue) push(j job) {
	if q.head > 0 && len(q.buf) == cap(q.buf) {
		n := copy(q.buf, q.buf[q.head:])
		clear(q.buf[n:])
		q.buf, q.head = q.buf[:n], 0
	}
	q.buf = append(q.buf, j)
}

func (q *jobQueue) pop() (job, bool) {
	if q.head == len(q.buf) {
		return job{}, false
	}
	j := q.buf[q.head]
	q.buf[q.head] = job{}
	q.head++
	if q.head == len(q.buf) {
		// Drained: keep a small buffer for the next jobs, but let a
		// burst's (a round of thousands of targets) go.
		q.buf, q.head = q.buf[:0], 0
		if cap(q.buf) > maxKeptQueue {
			q.buf = nil
		}
	}
	return j, true
}

// jobLocked marks t as having a probe in flight and returns its job.
func (s *scheduler) jobLocked(t *target, due time.Time) job {
	t.inFlight = true
	return job{t: t, gen: t.gen, due: due, interval: s.intervalLocked(t), reprobe: t.reprobing, hung: t.timedOut && !t.reprobing}
}

// enqueueLocked queues j for a worker. Once the checker is stopping, a
// scheduled job is dropped and a round's job is done unprobed. Call
// dispatchLocked after queueing.
func (s *scheduler) enqueueLocked(j job) {
	if s.ctx.Err() != nil {
		s.finishSkippedLocked(j)
		return
	}
	s.pool.push(j)
}

// dispatchLocked wakes a worker for the queued jobs and takes a queue
// longer than the free workers as a sign of overload. Reprobes do not
// count toward the sign: a rack that dies resets a thousand connections at
// once, and its burst of reprobes is work the checker chose, not a
// schedule it cannot keep.
func (s *scheduler) dispatchLocked() {
	p := &s.pool
	n := p.queued()
	if n == 0 {
		return
	}
	s.spreadLocked()
	waiting := p.waiting()
	s.waiting.Store(int64(waiting))
	if max := s.overload.MaxWaiting; !s.overload.Disabled && max > 0 && waiting-p.urgent.len() >= max {
		waiting -= p.urgent.len()
		s.signLocked(s.clock.Now(), fmt.Sprintf("%d %s waiting for a slot (threshold %d)", waiting, plural(waiting, "probe"), max))
	}
}

// maxIdleWorkers is how many idle workers wait for jobs; a worker that
// finds no job when as many wait ends. Synchronous probes (and dials to
// keep a connection) hold a worker each, so a burst of them (the first
// probes of a fleet, a rack that goes dark) starts workers up to
// MaxConcurrentProbes; kept for good, their stacks cost 25 MiB at 2,500.
const maxIdleWorkers = 16

// spreadLocked wakes one idle worker, or starts one up to the bound, when
// jobs are queued. Workers wake one another in a chain: one takes a job
// and, before it blocks on a probe, calls spreadLocked for the rest; an
// asynchronous probe does not block, so a single worker starts a whole
// batch of them without waking the others.
func (s *scheduler) spreadLocked() {
	p := &s.pool
	switch {
	case p.queued() == 0:
	case p.idle > 0:
		p.cond.Signal()
	case p.workers < p.max && s.ctx.Err() == nil: // no worker starts once Close waits for them
		p.workers++
		s.wg.Go(s.work)
	}
}

// stopWorkers cancels the checker's context and the asynchronous probes
// in flight, and wakes every idle worker so that it sees it. Workers finish the queue (dropping what is queued) and
// stop; no worker starts afterwards.
func (s *scheduler) stopWorkers() {
	s.reg.lock()
	s.cancel()
	s.pool.cond.Broadcast()
	var async []AsyncProber
	s.reg.eachLocked(func(t *target) {
		if ap, ok := t.prober.(AsyncProber); ok && t.inFlight {
			async = append(async, ap)
		}
	})
	s.reg.unlock()
	for _, ap := range async { // not under the lock: their results take it
		ap.CancelAsync()
	}
}

// stop stops the scheduler and its workers and waits for them and for the
// asynchronous probes in flight.
func (s *scheduler) stop() {
	s.stopWorkers()
	s.wg.Wait()
}

// work is one worker: it takes jobs until the checker stops and the queue
// is empty.
func (s *scheduler) work() {
	var (
		spec Spec // the target's spec for the Observer, copied under mu
		a    probeArgs
	)
	s.reg.lock()
	for {
		var (
			j  job
			ok bool
		)
		// Asynchronous probes count against the bound too; once stopping,
		// the queue is drained whatever runs.
		if s.pool.running < s.pool.max || s.ctx.Err() != nil {
			j, ok = s.pool.pop()
		}
		if !ok {
			if s.ctx.Err() != nil {
				s.pool.workers--
				s.reg.unlockAndReport()
				return
			}
			if s.reg.hasReportsLocked() { // tell of what the last result did before waiting
				s.reg.unlockAndReport()
				s.reg.lock()
				continue
			}
			if s.pool.idle >= maxIdleWorkers { // enough wait already: a burst's extra workers end
				s.pool.workers--
				s.reg.unlockAndReport()
				return
			}
			s.pool.idle++
			s.pool.cond.Wait()
			s.pool.idle--
			continue
		}
		ctx := s.ctx
		if j.round != nil {
			ctx = j.round.ctx
		}
		if s.ctx.Err() != nil || ctx.Err() != nil || !s.reg.currentLocked(j.t) || j.t.gen != j.gen {
			s.finishSkippedLocked(j)
			continue
		}
		s.startLocked(j, &a)
		if s.observer != nil {
			spec = j.t.spec
			a.spec = &spec
		}
		s.waiting.Store(int64(s.pool.waiting()))
		ap, async := a.prober.(AsyncProber)
		async = async && j.round == nil
		if !async {
			s.spreadLocked() // this worker blocks on the probe
		}
		s.reg.unlockAndReport()

		if async {
			if s.startAsync(j, a, ap) {
				s.reg.lock()
				continue
			}
			s.reg.lock()
			s.spreadLocked()
			s.reg.unlock()
		}
		r, timedOut := s.probe(ctx, a)

		s.reg.lock()
		s.pool.release(j, s.frame.ns(s.clock.Now()))
		s.waiting.Store(int64(s.pool.waiting()))
		if j.round != nil {
			j.round.out[j.i] = outcome{r: r, timedOut: timedOut, skipped: ctx.Err() != nil} // cut short: says nothing of the target
			s.roundDoneLocked(j.round)
			continue
		}
		s.applyLocked(ctx, j.t, j.gen, j.due, r, timedOut)
	}
}

// startAsync starts j's probe without waiting for it when its prober can
// (see AsyncProber), and reports whether it did; asyncDone applies the
// result. The probe holds a slot and s.wg until then.
func (s *scheduler) startAsync(j job, a probeArgs, ap AsyncProber) bool {
	start := s.clock.Now()
	deadline := addDur(start, a.timeout)
	s.wg.Add(1) // this worker's own count is held: Close is not past wg.Wait
	c := newAsyncCall()
	c.s, c.j, c.a, c.start, c.deadline = s, j, a, start, deadline
	// c is not touched after a true return: done may have run already.
	if ap.ProbeAsync(deadline, c.done) {
		return true
	}
	c.release()
	s.wg.Done()
	return false
}

// asyncCall is a probe startAsync started: what asyncDone needs, and done,
// its finish bound once. Calls are pooled, so that starting a probe
// allocates no closure (one of 192 bytes a probe, at 10,000 probes a
// second a fifth of pulsed's garbage); ProbeAsync calls done exactly once,
// after which the call is free for the next probe.
type asyncCall struct {
	s               *scheduler
	j               job
	a               probeArgs
	start, deadline time.Time
	done            func(error)
}

var asyncCalls sync.Pool // of *asyncCall

func newAsyncCall() *asyncCall {
	if c, ok := asyncCalls.Get().(*asyncCall); ok {
		return c
	}
	c := new(asyncCall)
	c.done = c.finish
	return c
}

// finish takes what c holds, frees c and applies the result.
func (c *asyncCall) finish(err error) {
	s, j, a, start, deadline := c.s, c.j, c.a, c.start, c.deadline
	c.release()
	s.asyncDone(j, a, start, deadline, err)
}

// release clears c, holding on to no target or scheduler, and pools it.
func (c *asyncCall) release() {
	*c = asyncCall{done: c.done}
	asyncCalls.Put(c)
}

// asyncDone applies the result of a probe startAsync started, as a worker
// applies the result of one it ran.
func (s *scheduler) asyncDone(j job, a probeArgs, start, deadline time.Time, err error) {
	defer s.wg.Done()
	end := s.clock.Now()
	r, timedOut := s.result(a, start, end, err, !end.Before(deadline))
	s.reg.lock()
	s.pool.release(j, s.frame.ns(end))
	s.waiting.Store(int64(s.pool.waiting()))
	if s.pool.queued() > 0 && s.pool.idle > 0 {
		s.pool.cond.Signal() // a job may have waited for this slot
	}
	var spec Spec
	observe := s.observer != nil && s.ctx.Err() == nil && s.reg.currentLocked(j.t) && j.t.gen == j.gen
	if observe {
		spec = j.t.spec
	}
	s.applyLocked(s.ctx, j.t, j.gen, j.due, r, timedOut)
	s.reg.unlockAndReport()
	if observe {
		s.observer.ObserveProbe(spec, r)
	}
}

// startLocked starts j's probe: it fills a with what the probe needs,
// counts it running and notes how late it starts (a sign of overload when
// later than the policy allows, counted from when a slot was free for it).
func (s *scheduler) startLocked(j job, a *probeArgs) {
	t := j.t
	*a = probeArgs{prober: t.prober, timeout: t.spec.Timeout, maxLatency: t.spec.MaxLatency}
	s.pool.running++
	if j.hung {
		s.pool.hungRun++
	}
	now := s.clock.Now()
	planned := j.due
	if j.startNs > s.frame.ns(planned) {
		planned = s.frame.at(j.startNs) // a tick's batching is not lateness, whatever the tick is now
	}
	lag := max(now.Sub(planned), 0)
	s.lastLag.Store(int64(lag))
	if s.pool.fullEnd > s.frame.ns(planned) {
		// Waiting for a slot is not the checker's slowness: the probe's
		// timeout starts now, and hung targets holding every slot must
		// not keep the checker degraded.
		lag = max(now.Sub(s.frame.at(s.pool.fullEnd)), 0)
	}
	maxLag := s.overload.MaxLag
	if maxLag == 0 {
		maxLag = max(j.interval, DefaultOverloadLagFloor)
	}
	if !s.overload.Disabled && !j.reprobe && !j.hung && maxLag > 0 && lag > maxLag { // a hung target's probe may wait by design (see pop)
		s.signLocked(now, fmt.Sprintf("a probe of %s started %v late (threshold %v)", t.spec.Name, lag, maxLag))
	}
}

// finishSkippedLocked ends a job that will not be probed: a round's is
// done, a scheduled one releases its target.
func (s *scheduler) finishSkippedLocked(j job) {
	if j.round != nil {
		j.round.out[j.i] = outcome{skipped: true}
		s.roundDoneLocked(j.round)
		return
	}
	if s.reg.currentLocked(j.t) {
		j.t.inFlight = false
	}
}

func (s *scheduler) roundDoneLocked(r *round) {
	r.left--
	if r.left == 0 {
		close(r.done)
	}
}

// runRound is RunRound: the round of every target (see round).
func (s *scheduler) runRound(ctx context.Context) []Transition {
	rd, _ := s.round(ctx, func() ([]*target, error) {
		var ts []*target
		s.reg.eachLocked(func(t *target) { ts = append(ts, t) })
		return ts, nil
	}, false)
	return rd.Transitions
}

// probeArgs is what a probe needs from its target, read under the
// registry's lock when the probe starts.
type probeArgs struct {
	prober     Prober
	timeout    time.Duration
	maxLatency time.Duration
	spec       *Spec // the target's spec for the Observer; nil without one
}

// probe runs one probe under its own timeout and turns the outcome into a
// Result; timedOut says the probe ran into its own timeout. A panicking
// prober is a failed probe.
func (s *scheduler) probe(ctx context.Context, a probeArgs) (r Result, timedOut bool) {
	start := s.clock.Now()
	pctx, cancel := s.clock.WithTimeout(ctx, a.timeout)
	err := safeProbe(pctx, a.prober)
	expired := errors.Is(pctx.Err(), context.DeadlineExceeded)
	cancel()
	r, timedOut = s.result(a, start, s.clock.Now(), err, expired)
	if a.spec != nil && ctx.Err() == nil {
		s.observer.ObserveProbe(*a.spec, r)
	}
	return r, timedOut
}

// result turns a probe's outcome into a Result: err is what the prober
// returned, expired whether the probe's deadline has passed.
func (s *scheduler) result(a probeArgs, start, end time.Time, err error, expired bool) (r Result, timedOut bool) {
	r = Result{Pass: err == nil, Latency: end.Sub(start), Time: end}
	panicked, _ := err.(*panicError) // safeProbe's own, never wrapped; As would allocate per probe
	switch {
	case panicked != nil:
		r.Err = panicked.Error()
	case err != nil && (expired || errors.Is(err, context.DeadlineExceeded)):
		timedOut = true
		r.Err = fmt.Sprintf("timeout after %v", a.timeout)
	case err != nil && probe.OwnFault(err):
		r.OwnFault = true
		r.Err = probe.Describe(err)
	case err != nil:
		r.Err = probe.Describe(err)
	case a.maxLatency > 0 && r.Latency > a.maxLatency:
		r.Pass = false
		r.Err = fmt.Sprintf("slow: %v > %v", r.Latency.Round(time.Millisecond), a.maxLatency)
	}
	return r, timedOut
}

func safeProbe(ctx context.Context, p Prober) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{v}
		}
	}()
	return p.Probe(ctx)
}

// panicError is a prober's panic, which is a failed probe, whatever the
// clock says by the time it is recovered.
type panicError struct{ v any }

func (e *panicError) Error() string { return fmt.Sprintf("probe panicked: %v", e.v) }

// applyLocked records the result of t's probe that was scheduled at probe
// generation gen and due at due. The result is discarded when the
// target was removed, its probe spec replaced, or the run cancelled (a
// probe cut short by shutdown says nothing about the target). A timeout of
// a probe that overlapped an overload is kept as the last result but does
// not count (stale is not down). A probe that failed for want of the
// checker's own file descriptors never counts, and is a sign of overload.
func (s *scheduler) applyLocked(ctx context.Context, t *target, gen uint32, due time.Time, r Result, timedOut bool) {
	if !s.reg.currentLocked(t) {
		return
	}
	t.inFlight = false
	if t.gen != gen || ctx.Err() != nil {
		return
	}
	t.timedOut = timedOut
	now := s.clock.Now()
	if r.OwnFault && !s.overload.Disabled {
		s.signLocked(now, "a probe found no file descriptor free (the open-file limit): raise it, or keep fewer probe connections")
	}
	s.checkRecoveryLocked(now)
	if r.OwnFault || (timedOut && s.overloadedSinceLocked(due)) {
		r.Ignored = true
		s.ov.ignored++
		s.reg.ignoreLocked(t, r)
	} else {
		s.reg.resultLocked(t, r, now)
	}
	settleReprobeLocked(t, r)
	s.rescheduleLocked(t, now)
}
