package checker

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/pulsehealth/pulse/checker/outlier"
)

// target is one registered target; the fields are guarded by the
// registry's lock. The scheduling fields (inFlight, slot, next, startNs,
// seq, index) are the scheduler's; the others the registry's.
//
// There is one per target, so its size counts: it fits the runtime's
// 448-byte size class (TestTargetSize). The times the scheduler keeps are
// nanoseconds since the Unix epoch (8 bytes, not a time.Time's 24), and
// what few targets need is behind more.
type target struct {
	spec   Spec
	prober Prober
	gen    uint32     // bumped when the probe spec is replaced
	seq    uint32     // the target's number (see targetSeq)
	m      Machine    // the verdict
	state  State      // the published state: the verdict unless a policy holds it
	fs     *flapState // its flap log and the state record last stored (flap.go); nil before either
	last   Result     // the last result, by value: no allocation per result; valid when hasLast
	lastTr time.Time

	// The flags, together with index so that they take two words: with the
	// last result by value the target stays within 448 bytes.
	held      bool // held routable by its group's panic threshold
	flapping  bool // held unhealthy by flap damping
	inFlight  bool
	hasLast   bool
	carried   bool  // the state was loaded from the store; no fresh result yet
	owned     bool  // with a shared registry: this replica owns the target: it probes it and stores its state
	vantage   bool  // probed from several vantages: this replica probes it, another owns it (see vantage.go)
	proposing bool  // with a shared registry: a state write is on its way
	reprobing bool  // a lost connection brought a probe forward, and its results lead down; see reprobe.go
	flapShown bool  // flapping, as the last state record applied said (FLAPPING events follow it)
	gone      bool  // removed, or replaced by a target of its name: a job for it is stale
	timedOut  bool  // its last scheduled probe ran into its timeout: its next waits in the hung queue (see probePool.pop)
	index     int32 // position in the due heap; -1 in none (in the flags' padding)

	slot int64 // the scheduled start of the last scheduled probe (on the scheduler's frame); noTime before the first
	next int64 // when the next probe is due (on the scheduler's frame); noTime before it is scheduled
	// startNs is when the next probe starts (on the scheduler's frame):
	// next, batched by the schedule tick (see startBy). It and seq order
	// the due heap.
	startNs int64

	active, ignored uint64 // result counts, see Status (the passive ones are in more)
	// What few targets need, made when first needed: by value it would
	// take the target past 448 bytes (see targetMore).
	more *targetMore
}

// noTime is a target's slot or next when it has none. The scheduler's
// frame never gives a time this value (see frame.ns).
const noTime = math.MinInt64

// targetSeq numbers targets as they are made: the due heap's order among
// targets that start at the same time. Past 2^32 targets made it wraps,
// which changes only that order.
var targetSeq atomic.Uint32

func newTarget(spec Spec, p Prober, state State) *target {
	return &target{
		seq:    targetSeq.Add(1),
		spec:   spec,
		prober: p,
		m:      Machine{Model: spec.Model, Rise: spec.Rise, Fall: spec.Fall, State: state},
		state:  state,
		slot:   noTime,
		next:   noTime,
	}
}

// targetMore is a target's state that most targets never need: the slow
// start and unhealthy streak (see lifecycle.go), the vantages and outlier
// samples, the last reprobe (see reprobe.go) and the passive outcomes'
// bucket and counts.
type targetMore struct {
	life     lifeState
	bucket   *outcomeBucket   // its passive outcomes' bucket, as last stored; see passive.go
	vant     *vantageSet      // probed from several vantages; see vantage.go
	samp     *outlier.Sampler // its group's outlier detection samples it; see outlier.go
	outlier  *outlier.State   // an outlier of its group, as the judge's record says
	reprobed time.Time        // the last probe a lost connection brought forward

	passive, limited uint64 // passive outcomes counted and refused over the rate, see Status
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
