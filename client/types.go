package client

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// State is a target's health as pulsed decided it. Its zero value,
// StateUnknown, means no state: a target not (or no longer) known, or the
// server default in a Target's InitialState.
type State int

// The states pulsed decides. A value this package does not name (from a
// newer pulsed) keeps its number and prints as "State(N)".
const (
	StateUnknown   State = 0
	StateHealthy   State = 1
	StateUnhealthy State = 2
	// StateSuspect exists only in the three-state model: still routable,
	// on its way to a transition.
	StateSuspect State = 3
)

// String returns "healthy", "unhealthy", "suspect", or "absent" for
// StateUnknown (a target that is not in the view). A Target's InitialState
// of StateUnknown, pulsed's default (unhealthy), prints as "absent" too.
func (s State) String() string {
	switch s {
	case StateUnknown:
		return "absent"
	case StateHealthy:
		return "healthy"
	case StateUnhealthy:
		return "unhealthy"
	case StateSuspect:
		return "suspect"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Routable reports whether a target in state s receives traffic: HEALTHY,
// and SUSPECT of the three-state model.
func (s State) Routable() bool { return s == StateHealthy || s == StateSuspect }

// Model is the state machine that turns a target's probe results into its
// state. The zero value, ModelDefault, is the server's default, rise/fall.
type Model int

// The state machines of pulsed. A value this package does not name (from
// a newer pulsed) keeps its number and prints as "Model(N)".
const (
	ModelDefault Model = 0
	// ModelRiseFall: unhealthy to healthy after Rise consecutive passes,
	// healthy to unhealthy after Fall consecutive failures.
	ModelRiseFall Model = 1
	// ModelThreeState: one failure moves healthy to suspect, which falls
	// to unhealthy at Fall consecutive failures; one pass moves unhealthy
	// to suspect, which rises to healthy at Rise consecutive passes.
	ModelThreeState Model = 2
)

// String returns the model's name as pulsectl writes it: "rise_fall" (for
// ModelDefault too, which is rise/fall) or "three_state".
func (m Model) String() string {
	switch m {
	case ModelDefault, ModelRiseFall:
		return "rise_fall"
	case ModelThreeState:
		return "three_state"
	}
	return fmt.Sprintf("Model(%d)", int(m))
}

// Target is a target's spec: what to probe, how often, and the thresholds.
// Exactly one of HTTP, TCP, GRPC and DNS is set. A zero field takes pulsed's
// default (pulsed --help); a value past a bound, or past int32, is refused
// with ErrInvalidArgument, whose message names the field and the bound.
//
// Targets read back from pulsed have the defaults filled in and secrets
// (URL passwords, header and metadata values, TLS keys) shown as
// "<redacted>"; sending such a value back keeps the stored one, so a
// target read with State or List can be written back with Add or Update
// without losing anything.
type Target struct {
	// Name identifies the target: 1 to 128 characters from
	// [A-Za-z0-9._:-], starting with a letter or digit.
	Name string
	// Group is the pool the target belongs to, 0 to 64 characters from
	// [A-Za-z0-9._:-]; empty is none.
	Group string

	// HTTP, TCP, GRPC and DNS are the probe, exactly one of them.
	HTTP *HTTPProbe
	TCP  *TCPProbe
	GRPC *GRPCProbe
	DNS  *DNSProbe

	// Interval is the time between the starts of two probes, 1ms to 24h;
	// 0 is pulsed's -interval (2s unless set).
	Interval time.Duration
	// Timeout bounds one probe, 1ms to 1h and at most Interval; 0 is
	// pulsed's -timeout (1s unless set).
	Timeout time.Duration
	// Rise and Fall are the consecutive passes and failures a transition
	// needs, 1 to 1000; 0 is the server default (pulsed -rise, -fall).
	Rise, Fall int
	// InitialState is the state of a new target: StateUnknown (the server
	// default, unhealthy), StateUnhealthy or StateHealthy. It is ignored
	// when the target already exists.
	InitialState State
	// Model is the state machine; ModelDefault is ModelRiseFall.
	Model Model

	// MaxLatency, when set, fails a probe that answered correctly but
	// slower than this; at most Timeout. 0: no bound.
	MaxLatency time.Duration
	// FastInterval is the interval while the target is on its way to a
	// transition (healthy with a failure streak, unhealthy with a pass
	// streak, or suspect), from Timeout to 24h: a dead target is down in
	// its first failure plus (Fall-1) x FastInterval. 0 is pulsed's
	// -fast-interval, else Interval.
	FastInterval time.Duration
	// DownInterval is the interval while the target is unhealthy with no
	// pass streak, from Timeout to 24h; 0 is pulsed's -down-interval, else
	// Interval.
	DownInterval time.Duration
	// FlapWindow is the sliding window over which the target's
	// transitions are counted (Status.TransitionsInWindow) and flapping is
	// judged, at most 24h; 0 is a minute.
	FlapWindow time.Duration
	// FlapThreshold, 2 to 256, turns flap damping on: a target whose
	// results change its state FlapThreshold times within FlapWindow is
	// flapping, held unhealthy until they have not changed it for
	// FlapStableFor. 0: no damping.
	FlapThreshold int
	// FlapStableFor is how long a flapping target's results must leave
	// its state unchanged before it is released, at most 24h; 0 is
	// FlapWindow. Only with FlapThreshold.
	FlapStableFor time.Duration

	// PassiveOutcomes lets ReportOutcome feed the target's state machine;
	// off (the default), it is judged by its probes only.
	PassiveOutcomes bool
	// PassiveRate is how many passive outcomes a second are counted at
	// most, with a burst of as many (the rest are dropped), at most 10000;
	// 0 is 10. Only with PassiveOutcomes.
	PassiveRate int

	// SlowStart ramps the target's weight from 0 to 100% over this window
	// after it becomes routable; RemoveAfterUnhealthy removes it once
	// unhealthy this long. 0 takes the group's policy, else none.
	SlowStart            time.Duration
	RemoveAfterUnhealthy time.Duration

	// Vantages is how many replicas probe the target, each from its own
	// vantage, 0 to 9; 0 or 1 is its owner alone. Above 1 needs replicas
	// on etcd: a single pulsed refuses it. Quorum is how many vantages must
	// agree to change its state, at most Vantages; 0 is a majority.
	Vantages, Quorum int
}

// Address returns the host:port the target's probe connects to: the host
// of the HTTP URL with its port (or the scheme's, 80 or 443), the TCP or
// gRPC address, or the DNS server's. ok is false when there is none, or it
// is not host:port with a port from 1 to 65535. Of several probes it reads
// the one pulsed is sent: the first of HTTP, TCP, GRPC and DNS.
func (t Target) Address() (addr string, ok bool) {
	var hostPort string
	switch { // in probeToProto's order
	case t.HTTP != nil:
		u, err := url.Parse(t.HTTP.URL)
		if err != nil || u.Hostname() == "" {
			return "", false
		}
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[strings.ToLower(u.Scheme)]
		}
		hostPort = net.JoinHostPort(u.Hostname(), port)
	case t.TCP != nil:
		hostPort = t.TCP.Address
	case t.GRPC != nil:
		hostPort = t.GRPC.Address
	case t.DNS != nil:
		hostPort = t.DNS.Server
	default:
		return "", false
	}
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil || host == "" {
		return "", false
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return "", false
	}
	return hostPort, true
}

// Result is the outcome of one probe (or, Passive, of one reported
// request).
type Result struct {
	Pass    bool
	Latency time.Duration
	// Error says why it failed, e.g. "connection refused".
	Error   string
	Time    time.Time
	Passive bool
	// Ignored is a timeout that did not count because pulsed was
	// overloaded.
	Ignored bool
}

// Status is a target's spec and its health.
//
// In a Status from a View, Target, State, Routable, LastTransition, Mode,
// ModeReason, ModeSince, ModeUntil, RemoveTime and SlowStartEnd follow
// every event; the other fields are as
// of the target's last snapshot, added or updated event (the stream does not carry the streaks, the last result, the
// verdict, the policy flags, the counters or the schedule). Ask State or
// List for them.
type Status struct {
	// Target is the spec, with pulsed's defaults filled in but for
	// FastInterval and the fields after it, which stay zero when they were.
	Target Target
	// State is the current state; Routable says whether the target should
	// receive traffic.
	State    State
	Routable bool

	// PassStreak and FailStreak count the consecutive passes and failures
	// up to now.
	PassStreak, FailStreak int
	// LastResult is nil before the first result.
	LastResult *Result
	// LastTransition is zero if the state never changed.
	LastTransition time.Time
	// CarriedOver is true after a restart of pulsed until the target's
	// first fresh result: State is the one stored before the restart, and
	// the streaks start again from zero.
	CarriedOver bool
	// Source is "api" or "file" (pulsed -targets), or "discovery:GROUP".
	Source string

	// Verdict is the state the results alone give. It differs from State
	// while a policy holds the target: PanicHeld (verdict unhealthy, still
	// routable) or Flapping (unhealthy whatever the verdict).
	Verdict State
	// PanicHeld is true while the target's group is in panic and the
	// target, unhealthy by its results, is kept routable because marking it
	// would take more than the group's MaxUnhealthyFraction out.
	PanicHeld bool
	// Flapping is true while flap damping holds the target unhealthy.
	Flapping bool
	// TransitionsInWindow counts the state changes the target's results
	// made within Target.FlapWindow up to now (at most 256).
	TransitionsInWindow int
	// ProbeInterval is the interval the target is probed at now:
	// Interval, FastInterval or DownInterval. NextProbe is when the next
	// probe is due.
	ProbeInterval time.Duration
	NextProbe     time.Time

	// ActiveResults counts the probe results applied since the target was
	// added (or pulsed started), PassiveResults the ReportOutcome outcomes
	// applied, PassiveRateLimited those PassiveRate dropped, and
	// IgnoredTimeouts the probe timeouts that did not count because
	// pulsed was overloaded.
	ActiveResults, PassiveResults       uint64
	PassiveRateLimited, IgnoredTimeouts uint64
	// Quarantined, when set, says why pulsed does not probe this stored
	// target; it is never routable.
	Quarantined string

	// Mode is the target's administrative mode, with the operator's
	// reason; a DRAINING or MAINTENANCE target is never routable.
	Mode       Mode
	ModeReason string
	// ModeSince is when the mode was set (zero if never); ModeUntil, when
	// set, is when it returns to ACTIVE by itself; RemoveTime, when set, is
	// when a Drain removes the target.
	ModeSince, ModeUntil, RemoveTime time.Time
	// SlowStartEnd, when set, is when the slow start in progress ends (see
	// Weight, which gives the target's share of traffic at any time).
	SlowStartEnd time.Time
	// UnhealthySince, when set, is since when the probes have said
	// unhealthy without a break: RemoveAfterUnhealthy counts from it.
	UnhealthySince time.Time

	// Warnings are what a person should know about the target that does
	// not stop it being probed, each naming its field, e.g.
	// "http.tls.insecure_skip_verify: ...".
	Warnings []string
	// CertExpiryWarning, when set, says the last probe passed with a
	// server certificate within its CertExpiryWarn, e.g. "certificate
	// expires in 3d12h (2026-12-05)". CertNotAfter is when the
	// first-expiring certificate the last probe saw expires (only for
	// probes with CertExpiryWarn or CertExpiryFail).
	CertExpiryWarning string
	CertNotAfter      time.Time

	// Vantages are, for a target probed from several vantages
	// (Target.Vantages), their verdicts, its owner's first; Verdict is
	// then their quorum's. Nil otherwise.
	Vantages []VantageVerdict
	// Outlier, when set, says the target is an outlier of its group
	// (GroupPolicy.Outlier): degraded (Weight at most OutlierWeight) or
	// ejected (not routable).
	Outlier *OutlierState
	// Owner is, with replicas on etcd, the replica that probes the target
	// and stores its state (its -replica-id), as the replica that answered
	// sees the members; for a target probed from several vantages, the
	// first of Vantages. Empty from a single pulsed.
	Owner string
}

// OutlierState is a target its group's outlier detection caught.
type OutlierState struct {
	// Ejected: not routable until Until; else degraded: routable, its
	// weight at most OutlierWeight.
	Ejected bool
	// Reason gives the numbers, e.g. "p50 38ms vs group 4ms".
	Reason       string
	Since, Until time.Time
	// Ejections counts its ejections in a row.
	Ejections int
}

// OutlierWeight is a degraded outlier's weight, in percent.
const OutlierWeight = 10

// VantageVerdict is one vantage's verdict on a target probed from several.
type VantageVerdict struct {
	// Member is the replica's member ID, Label its vantage label
	// (pulsed -vantage).
	Member, Label string
	// State is its verdict: StateUnknown while it has stored none.
	State State
	// Error is the failure of the probe that made the verdict, when it
	// failed.
	Error string
	// Time is when it stored the verdict; zero while it has stored none.
	Time time.Time
}

// String returns "label=state", with the error in parentheses, e.g.
// "zone-b=unhealthy(connection refused)"; the state is "none" before the
// vantage stored one.
func (v VantageVerdict) String() string {
	st := "none"
	if v.State != StateUnknown {
		st = v.State.String()
	}
	s := v.Label + "=" + st
	if v.Error != "" {
		s += "(" + v.Error + ")"
	}
	return s
}

// GroupPolicy is a group's pool policy.
type GroupPolicy struct {
	// MaxUnhealthyFraction is the panic threshold, in (0, 1]; 0 is the
	// server default.
	MaxUnhealthyFraction float64
	// SlowStart and RemoveAfterUnhealthy apply to the group's targets that
	// set none of their own (Target.SlowStart, RemoveAfterUnhealthy); 0 is
	// none.
	SlowStart            time.Duration
	RemoveAfterUnhealthy time.Duration
	// Objective is the group's availability objective, the share of its
	// probes that should pass over ObjectiveWindow (whole hours, at most 30
	// days; 0 with an Objective: 30 days), in (0, 1); 0 is none. History
	// of the group then says where it stands (HistorySummary.SLO).
	Objective       float64
	ObjectiveWindow time.Duration
	// Vantages and Quorum are those of the group's targets that set none
	// of their own (Target.Vantages, Target.Quorum); 0 is one vantage.
	Vantages, Quorum int
	// Outlier is the group's outlier detection; the zero value is off.
	Outlier OutlierPolicy
}

// OutlierPolicy is a group's outlier detection (see the API's
// OutlierPolicy for bounds and defaults). A rule is on when its threshold
// is set: LatencyFactor, SuccessRateStdevFactor or FailurePercentage. An
// outlier is degraded, or with Enforce ejected for BaseEjectionTime x its
// ejections in a row. Zero fields take the defaults.
type OutlierPolicy struct {
	Interval time.Duration
	Samples  int
	// LatencyFactor: a member slower than LatencyFactor x the group's
	// median and than the median + LatencyMinDelta, Consecutive times in
	// a row, is an outlier.
	LatencyFactor   float64
	LatencyMinDelta time.Duration
	Consecutive     int
	// SuccessRateStdevFactor and FailurePercentage are Envoy's rules over
	// passive outcomes.
	SuccessRateStdevFactor         float64
	SuccessRateRequestVolume       int
	FailurePercentage              int
	FailurePercentageRequestVolume int
	MinMembers                     int
	Enforce                        bool
	MaxEjectionPercent             int
	BaseEjectionTime               time.Duration
}

// GroupStatus is a group's policy and its pool state.
type GroupStatus struct {
	Group string
	// Policy is the group's own policy; zero fields take the default.
	Policy GroupPolicy
	// MaxUnhealthyFraction is the threshold in force.
	MaxUnhealthyFraction float64
	Targets              int
	Unhealthy            int
	MaxUnhealthy         int
	Panic                bool
	// Held lists the targets held routable by the panic threshold.
	Held []string
}

// CheckerStatus is pulsed's own health.
type CheckerStatus struct {
	// Degraded is true while pulsed's checker is overloaded (pulsed
	// -overload-lag, -overload-stall, -overload-waiting): its own probe
	// timeouts then do not count toward Fall. DegradedSince is when it
	// became so, zero when it is not; Reason says why, e.g. "runnable
	// goroutines waited 610ms to run (threshold 500ms)".
	Degraded      bool
	DegradedSince time.Time
	Reason        string
	// Lag is how late the most recent probe started against its schedule.
	Lag time.Duration
	// Waiting is how many probes wait for a slot now, InFlight how many
	// run, and MaxConcurrent the bound on those in flight (pulsed
	// -max-concurrent-probes).
	Waiting       int
	InFlight      int
	MaxConcurrent int

	// IgnoredTimeouts counts every probe timeout not counted because the
	// checker was degraded.
	IgnoredTimeouts uint64
	// RegistryError says why pulsed cannot store changes; empty while it
	// can.
	RegistryError string
	// Replica is this pulsed's member ID on etcd and Replicas the live
	// members it sees; both empty with the embedded registry.
	Replica  string
	Replicas []string
	// DegradedReplicas lists, with replicas on etcd, the replicas whose
	// published state is degraded, sorted: the same on every replica.
	DegradedReplicas []string
}

// List is what List returns: every target's status, sorted by name, at
// one revision.
type List struct {
	Targets []Status
	// Revision is the registry's revision the list was taken at.
	Revision uint64
	Groups   []GroupStatus
	Checker  CheckerStatus
}

// Transition is one change of a target's state.
type Transition struct {
	Target   string
	Group    string
	From, To State
	Time     time.Time
	// Result is the probe result that tipped the state; nil when Reason
	// says why instead.
	Result *Result
	// Text is "<target>: <old> -> <new>".
	Text   string
	Reason string
	// Mode is the target's mode after the transition: a transition to
	// unhealthy in ModeDraining is a drain.
	Mode Mode
	// SlowStartEnd, on a transition to routable with a slow start, is when
	// the target's weight reaches 100% (see Status.Weight).
	SlowStartEnd time.Time
	// Vantages are, for a target probed from several vantages, their
	// verdicts when the transition was applied, its owner's first; Reason
	// then lists them ("vantages: zone-a=healthy zone-b=unhealthy(...)").
	Vantages []VantageVerdict
}

// PolicyKind says what a PolicyEvent is about.
type PolicyKind int

// The kinds of policy events. A kind this package does not name (from a
// newer pulsed) keeps its number.
const (
	PolicyUnknown          PolicyKind = 0
	PolicyPanicEntered     PolicyKind = 1
	PolicyPanicExited      PolicyKind = 2
	PolicyFlappingStarted  PolicyKind = 3
	PolicyFlappingEnded    PolicyKind = 4
	PolicyCheckerDegraded  PolicyKind = 5
	PolicyCheckerRecovered PolicyKind = 6
	// PolicyCertExpiring: a target's probe passed with a server
	// certificate within its TLSOptions.CertExpiryWarn (Text says when it
	// expires); sent once until a probe passes outside it again.
	PolicyCertExpiring PolicyKind = 20
	// PolicyTargetExpired: a target was removed by itself
	// (RemoveAfterUnhealthy reached, or a Drain ended); Text says which,
	// and an EventRemoved follows.
	PolicyTargetExpired PolicyKind = 30
	// PolicyDiscoveryFailed: a discovery source failed (or its group's
	// answer was refused) and keeps its last good set; Source, SDConfig
	// and Error say which and why. Sent once per failure.
	PolicyDiscoveryFailed PolicyKind = 40
	// PolicyDiscoveryRecovered: the source answers again.
	PolicyDiscoveryRecovered PolicyKind = 41
	// PolicyVantageSuspect: a vantage (Replica, Vantage) says unhealthy
	// of a share of the targets it probes with others (Disagree of
	// Judged) while most of the others see them healthy: its own path is
	// likely broken, and its verdicts are left out of every quorum until
	// it recovers.
	PolicyVantageSuspect PolicyKind = 50
	// PolicyVantageRecovered: the vantage agrees with the others again, or
	// left.
	PolicyVantageRecovered PolicyKind = 51
	// PolicyOutlierStarted: a target became an outlier of its group;
	// Outlier says how and why.
	PolicyOutlierStarted PolicyKind = 52
	// PolicyOutlierEnded: it is no longer one; Outlier is the state that
	// ended.
	PolicyOutlierEnded PolicyKind = 53
)

// String returns the kind's name in lower case, e.g. "panic_entered"; a
// kind this package does not name is "PolicyKind(N)".
func (k PolicyKind) String() string {
	switch k {
	case PolicyUnknown:
		return "unspecified"
	case PolicyPanicEntered:
		return "panic_entered"
	case PolicyPanicExited:
		return "panic_exited"
	case PolicyFlappingStarted:
		return "flapping_started"
	case PolicyFlappingEnded:
		return "flapping_ended"
	case PolicyCheckerDegraded:
		return "checker_degraded"
	case PolicyCheckerRecovered:
		return "checker_recovered"
	case PolicyCertExpiring:
		return "cert_expiring"
	case PolicyTargetExpired:
		return "target_expired"
	case PolicyDiscoveryFailed:
		return "discovery_failed"
	case PolicyDiscoveryRecovered:
		return "discovery_recovered"
	case PolicyVantageSuspect:
		return "vantage_suspect"
	case PolicyVantageRecovered:
		return "vantage_recovered"
	case PolicyOutlierStarted:
		return "outlier_started"
	case PolicyOutlierEnded:
		return "outlier_ended"
	}
	return fmt.Sprintf("PolicyKind(%d)", int(k))
}

// PolicyEvent is a change of a group's panic, a target's flapping,
// pulsed's overload, a certificate nearing expiry or a target removed by
// itself. It changes no state by itself: what follows from it
// comes as transitions.
type PolicyEvent struct {
	Kind   PolicyKind
	Group  string
	Target string
	Time   time.Time
	Text   string
	Held   []string
	// Replica is, for CHECKER_DEGRADED and CHECKER_RECOVERED with replicas
	// on etcd, the replica the event is about; empty otherwise.
	Replica string
	// Source ("discovery:api"), SDConfig ("http_sd 0") and Error say,
	// for a discovery event, which source failed or recovered and why.
	Source, SDConfig, Error string
	// Vantage is the label of the vantage a vantage event is about; of the
	// Judged targets it and another vantage both judge, it says Disagree
	// unhealthy while most of the others say healthy.
	Vantage          string
	Disagree, Judged int
	// Outlier is the state of an outlier event (the one that ended, for
	// PolicyOutlierEnded).
	Outlier *OutlierState
}

// DiscoveryGroup is one discovery group pulsed runs and its sources.
type DiscoveryGroup struct {
	// Name is the group's name; Source its targets' Status.Source
	// ("discovery:api").
	Name, Source string
	// Targets is how many targets the last applied answer held, applied
	// at LastApply (zero before the first).
	Targets   int
	LastApply time.Time
	// LastError is why the last answer was refused whole, or which of its
	// targets were left out, since ErrorSince; empty when it applied
	// whole.
	LastError  string
	ErrorSince time.Time
	// Sources are the group's SD configs, in the configuration's order.
	Sources []DiscoverySource
	// Leader is the replica that runs the group, with replicas on etcd;
	// a replica that does not lead it says only its name, sources and
	// leader.
	Leader string
}

// DiscoverySource is one SD config of a discovery group.
type DiscoverySource struct {
	// Name is "MECHANISM_sd N" ("http_sd 0"); Detail what it reads, with
	// no secret.
	Name, Detail string
	// LastRefresh is when it last answered (zero before its first
	// answer), and Targets how many targets its last good answer held.
	LastRefresh time.Time
	Targets     int
	// LastError is why it fails, since ErrorSince, while it does (its
	// last good set stays); empty when its last refresh succeeded.
	LastError  string
	ErrorSince time.Time
}

// Outcome is one real request's outcome, for ReportOutcome.
type Outcome struct {
	Target string
	OK     bool
	// Latency is optional; 0 is not reported.
	Latency time.Duration
	// Error says why the request failed; empty when OK.
	Error string
}
