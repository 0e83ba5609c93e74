package checker

import (
	"sync/atomic"
	"time"
)

// target is one registered target; the fields are guarded by the
// registry's lock. The scheduling fields (inFlight, slot, next, startNs,
// seq, index) are the scheduler's; the others the registry's.
type target struct {
	spec   Spec
	prober Prober
	gen    uint64  // bumped when the probe spec is replaced
	m      Machine // the verdict
	state  State   // the published state: the verdict unless a policy holds it
	flaps  flapLog // the verdict's recent changes
	last   Result  // the last result, by value: no allocation per result; valid when hasLast
	lastTr time.Time

	// The flags, together so that they take one word: with the last result
	// by value the target stays within a 512-byte allocation.
	held      bool // held routable by its group's panic threshold
	flapping  bool // held unhealthy by flap damping
	inFlight  bool
	hasLast   bool
	carried   bool // the state was loaded from the store; no fresh result yet
	owned     bool // with a shared registry: this replica owns the target: it probes it and stores its state
	vantage   bool // probed from several vantages: this replica probes it, another owns it (see vantage.go)
	proposing bool // with a shared registry: a state write is on its way
	reprobing bool // a lost connection brought a probe forward, and its results lead down; see reprobe.go
	flapShown bool // flapping, as the last state record applied said (FLAPPING events follow it)
	gone      bool // removed, or replaced by a target of its name: a job for it is stale
	timedOut  bool // its last scheduled probe ran into its timeout: its next waits in the hung queue (see probePool.pop)

	slot time.Time // the scheduled start of the last scheduled probe; zero before the first
	next time.Time // when the next probe is due
	// startNs is when the next probe starts, in nanoseconds since the
	// epoch: next, batched by the schedule tick (see startBy). seq is the
	// target's number. Both order the due heap.
	startNs int64
	seq     uint64
	index   int // position in the due heap

	active, passive, limited, ignored uint64 // result counts, see Status
	// What few targets need, made when first needed: by value it would
	// take the target past 512 bytes (see targetMore).
	more *targetMore
}

// targetSeq numbers targets as they are made: the due heap's order among
// targets that start at the same time.
var targetSeq atomic.Uint64

func newTarget(spec Spec, p Prober, state State) *target {
	return &target{
		seq:    targetSeq.Add(1),
		spec:   spec,
		prober: p,
		m:      Machine{Model: spec.Model, Rise: spec.Rise, Fall: spec.Fall, State: state},
		state:  state,
	}
}

// targetMore is a target's state that most targets never need: the
// the slow
// start and unhealthy streak (see lifecycle.go), and the last reprobe (see
// reprobe.go).
type targetMore struct {
	life     lifeState
	shared   *sharedPolicy   // with a shared registry; see flap.go
	vant     *vantageSet     // probed from several vantages; see vantage.go
	samp     *outlierSampler // its group's outlier detection samples it; see outlier.go
	outlier  *OutlierState   // an outlier of its group, as the judge's record says
	reprobed time.Time       // the last probe a lost connection brought forward
}

// moreLocked returns t's targetMore, making it.
func (t *target) moreLocked() *targetMore {
	if t.more == nil {
		t.more = &targetMore{}
	}
	return t.more
}

// lifeOrNil returns t's lifeState, or nil if it has none yet (all zero).
func (t *target) lifeOrNil() *lifeState {
	if t.more == nil {
		return nil
	}
	return &t.more.life
}
