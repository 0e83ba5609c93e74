package checker

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// The probe pool: a FIFO queue of jobs and at most MaxConcurrentProbes
// workers that take jobs from it, probe, and apply the result. A due target
// costs one small queue entry, not a goroutine parked on a semaphore, so a
// checker that falls behind holds its backlog in a slice (about 64 bytes a
// target) rather than in goroutine stacks. Workers wake one another, or
// start, one at a time as jobs need them (see spreadLocked), up to the
// bound, and stay until Close; an idle worker waits on a condition of c.mu.
//
// A worker takes c.mu once per probe: to apply the result of the probe it
// just ran and, in the same critical section, to take its next job. An
// asynchronous probe (AsyncProber) holds no worker while it waits: the
// worker takes its next job at once, and asyncDone takes c.mu to apply the
// result when it comes. The queue and the counts below are guarded by c.mu.

// probePool is the Checker's pool state; guarded by Checker.mu.
type probePool struct {
	max     int        // the bound: MaxConcurrentProbes
	queue   jobQueue   // jobs waiting for a worker
	workers int        // workers started and not yet stopped
	idle    int        // workers waiting for a job
	running int        // jobs taken by a worker and not yet applied
	cond    *sync.Cond // on Checker.mu: signalled when a job is queued or the pool stops
}

func (p *probePool) init(mu *sync.Mutex, max int) {
	p.max = max
	p.cond = sync.NewCond(mu)
}

// waiting counts the queued jobs that no free worker can take now: the
// probes waiting for a slot.
func (p *probePool) waiting() int {
	return max(0, p.queue.len()-(p.max-p.running))
}

// job is one probe to run, queued until a worker takes it. It holds the
// target rather than a copy of its spec: the worker reads what it needs
// under c.mu when it takes the job.
type job struct {
	t        *target
	gen      uint64        // t.gen when the probe was scheduled: a job outlived by its probe spec (or, shared, its ownership) is not run
	due      time.Time     // when the probe should start
	interval time.Duration // the interval it was scheduled at
	round    *round        // the RunRound the job belongs to; nil for a scheduled probe
	i        int           // the job's index in round.out
}

// round collects the results of one RunRound.
type round struct {
	ctx  context.Context
	out  []outcome
	left int           // jobs not done; guarded by c.mu
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
func (c *Checker) jobLocked(t *target, due time.Time) job {
	t.inFlight = true
	return job{t: t, gen: t.gen, due: due, interval: t.spec.IntervalFor(t.m)}
}

// enqueueLocked queues j for a worker. Once the checker is stopping, a
// scheduled job is dropped and a round's job is done unprobed. Call
// dispatchLocked after queueing.
func (c *Checker) enqueueLocked(j job) {
	if c.ctx.Err() != nil {
		c.finishSkippedLocked(j)
		return
	}
	c.pool.queue.push(j)
}

// dispatchLocked wakes a worker for the queued jobs and takes a queue
// longer than the free workers as a sign of overload.
func (c *Checker) dispatchLocked() {
	p := &c.pool
	n := p.queue.len()
	if n == 0 {
		return
	}
	c.spreadLocked()
	waiting := p.waiting()
	c.waiting.Store(int64(waiting))
	if max := c.overload.MaxWaiting; !c.overload.Disabled && max > 0 && waiting >= max {
		c.signLocked(c.clock.Now(), fmt.Sprintf("%d %s waiting for a slot (threshold %d)", waiting, plural(waiting, "probe"), max))
	}
}

// spreadLocked wakes one idle worker, or starts one up to the bound, when
// jobs are queued. Workers wake one another in a chain: one takes a job
// and, before it blocks on a probe, calls spreadLocked for the rest; an
// asynchronous probe does not block, so a single worker starts a whole
// batch of them without waking the others.
func (c *Checker) spreadLocked() {
	p := &c.pool
	switch {
	case p.queue.len() == 0:
	case p.idle > 0:
		p.cond.Signal()
	case p.workers < p.max && c.ctx.Err() == nil: // no worker starts once Close waits for them
		p.workers++
		c.wg.Go(c.work)
	}
}

// stopWorkers cancels the checker's context and the asynchronous probes
// in flight, and wakes every idle worker so that it sees it. Workers finish the queue (dropping what is queued) and
// stop; no worker starts afterwards.
func (c *Checker) stopWorkers() {
	c.mu.Lock()
	c.cancel()
	c.pool.cond.Broadcast()
	var async []AsyncProber
	for _, t := range c.targets {
		if ap, ok := t.prober.(AsyncProber); ok && t.inFlight {
			async = append(async, ap)
		}
	}
	c.mu.Unlock()
	for _, ap := range async { // not under c.mu: their results take it
		ap.CancelAsync()
	}
}

// work is one worker: it takes jobs until the checker stops and the queue
// is empty.
func (c *Checker) work() {
	var (
		spec Spec // the target's spec for the Observer, copied under mu
		a    probeArgs
	)
	c.mu.Lock()
	for {
		var (
			j  job
			ok bool
		)
		// Asynchronous probes count against the bound too; once stopping,
		// the queue is drained whatever runs.
		if c.pool.running < c.pool.max || c.ctx.Err() != nil {
			j, ok = c.pool.queue.pop()
		}
		if !ok {
			if c.ctx.Err() != nil {
				c.pool.workers--
				c.unlockAndReport()
				return
			}
			if len(c.reports) > 0 { // tell of what the last result did before waiting
				c.unlockAndReport()
				c.mu.Lock()
				continue
			}
			c.pool.idle++
			c.pool.cond.Wait()
			c.pool.idle--
			continue
		}
		ctx := c.ctx
		if j.round != nil {
			ctx = j.round.ctx
		}
		if c.ctx.Err() != nil || ctx.Err() != nil || c.targets[j.t.spec.Name] != j.t || j.t.gen != j.gen {
			c.finishSkippedLocked(j)
			continue
		}
		c.startLocked(j, &a)
		if c.observer != nil {
			spec = j.t.spec
			a.spec = &spec
		}
		c.waiting.Store(int64(c.pool.waiting()))
		ap, async := a.prober.(AsyncProber)
		async = async && j.round == nil
		if !async {
			c.spreadLocked() // this worker blocks on the probe
		}
		c.unlockAndReport()

		if async {
			if c.startAsync(j, a, ap) {
				c.mu.Lock()
				continue
			}
			c.mu.Lock()
			c.spreadLocked()
			c.mu.Unlock()
		}
		r, timedOut := c.probe(ctx, a)

		c.mu.Lock()
		c.pool.running--
		c.waiting.Store(int64(c.pool.waiting()))
		if j.round != nil {
			j.round.out[j.i] = outcome{r: r, timedOut: timedOut}
			c.roundDoneLocked(j.round)
			continue
		}
		c.applyLocked(ctx, j.t, j.gen, j.due, r, timedOut)
	}
}

// startAsync starts j's probe without waiting for it when its prober can
// (see AsyncProber), and reports whether it did; asyncDone applies the
// result. The probe holds a slot and c.wg until then.
func (c *Checker) startAsync(j job, a probeArgs, ap AsyncProber) bool {
	start := c.clock.Now()
	deadline := addDur(start, a.timeout)
	c.wg.Add(1) // this worker's own count is held: Close is not past wg.Wait
	if ap.ProbeAsync(deadline, func(err error) { c.asyncDone(j, a, start, deadline, err) }) {
		return true
	}
	c.wg.Done()
	return false
}

// asyncDone applies the result of a probe startAsync started, as a worker
// applies the result of one it ran.
func (c *Checker) asyncDone(j job, a probeArgs, start, deadline time.Time, err error) {
	defer c.wg.Done()
	end := c.clock.Now()
	r, timedOut := c.result(a, start, end, err, !end.Before(deadline))
	c.mu.Lock()
	c.pool.running--
	c.waiting.Store(int64(c.pool.waiting()))
	if c.pool.queue.len() > 0 && c.pool.idle > 0 {
		c.pool.cond.Signal() // a job may have waited for this slot
	}
	var spec Spec
	observe := c.observer != nil && c.ctx.Err() == nil && c.targets[j.t.spec.Name] == j.t && j.t.gen == j.gen
	if observe {
		spec = j.t.spec
	}
	c.applyLocked(c.ctx, j.t, j.gen, j.due, r, timedOut)
	c.unlockAndReport()
	if observe {
		c.observer.ObserveProbe(spec, r)
	}
}

// startLocked starts j's probe: it fills a with what the probe needs,
// counts it running and notes how late it starts (a sign of overload when
// later than the policy allows).
func (c *Checker) startLocked(j job, a *probeArgs) {
	t := j.t
	*a = probeArgs{prober: t.prober, timeout: t.spec.Timeout, maxLatency: t.spec.MaxLatency}
	c.pool.running++
	now := c.clock.Now()
	lag := max(now.Sub(c.startBy(j.due, j.interval)), 0) // a tick's batching is not lateness
	c.lastLag.Store(int64(lag))
	maxLag := c.overload.MaxLag
	if maxLag == 0 {
		maxLag = j.interval
	}
	if !c.overload.Disabled && maxLag > 0 && lag > maxLag {
		c.signLocked(now, fmt.Sprintf("a probe of %s started %v late (threshold %v)", t.spec.Name, lag, maxLag))
	}
}

// finishSkippedLocked ends a job that will not be probed: a round's is
// done, a scheduled one releases its target.
func (c *Checker) finishSkippedLocked(j job) {
	if j.round != nil {
		j.round.out[j.i] = outcome{skipped: true}
		c.roundDoneLocked(j.round)
		return
	}
	if c.targets[j.t.spec.Name] == j.t {
		j.t.inFlight = false
	}
}

func (c *Checker) roundDoneLocked(r *round) {
	r.left--
	if r.left == 0 {
		close(r.done)
	}
}
