package server

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/probe"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// SpecFromProto converts a wire Target into a checker.Spec. It rejects what
// only the wire form can express wrongly (an explicit zero, an unknown enum
// value, a malformed duration) with a *checker.FieldError; the checker
// validates the rest.
func SpecFromProto(t *pb.Target) (checker.Spec, error) {
	s := checker.Spec{Name: t.GetName(), Group: t.GetGroup()}
	var err error
	if s.Interval, err = positiveDuration("interval", t.GetInterval()); err != nil {
		return s, err
	}
	if s.Timeout, err = positiveDuration("timeout", t.GetTimeout()); err != nil {
		return s, err
	}
	if s.MaxLatency, err = positiveDuration("max_latency", t.GetMaxLatency()); err != nil {
		return s, err
	}
	if s.FastInterval, err = positiveDuration("fast_interval", t.GetFastInterval()); err != nil {
		return s, err
	}
	if s.DownInterval, err = positiveDuration("down_interval", t.GetDownInterval()); err != nil {
		return s, err
	}
	if s.FlapWindow, err = positiveDuration("flap_window", t.GetFlapWindow()); err != nil {
		return s, err
	}
	if s.FlapStableFor, err = positiveDuration("flap_stable_for", t.GetFlapStableFor()); err != nil {
		return s, err
	}
	if n := t.GetFlapThreshold(); n < 0 {
		return s, &checker.FieldError{Field: "flap_threshold", Reason: fmt.Sprintf("must be 0 (no damping) or at least %d, got %d", checker.MinFlapThreshold, n)}
	}
	s.FlapThreshold = int(t.GetFlapThreshold())
	if n := t.GetPassiveRate(); n < 0 {
		return s, &checker.FieldError{Field: "passive_rate", Reason: fmt.Sprintf("must be positive when set, got %d", n)}
	}
	s.PassiveRate = int(t.GetPassiveRate())
	s.PassiveOutcomes = t.GetPassiveOutcomes()
	if t.Rise != nil {
		if t.GetRise() < 1 {
			return s, &checker.FieldError{Field: "rise", Reason: fmt.Sprintf("must be at least 1, got %d", t.GetRise())}
		}
		s.Rise = int(t.GetRise())
	}
	if t.Fall != nil {
		if t.GetFall() < 1 {
			return s, &checker.FieldError{Field: "fall", Reason: fmt.Sprintf("must be at least 1, got %d", t.GetFall())}
		}
		s.Fall = int(t.GetFall())
	}
	switch t.GetInitialState() {
	case pb.State_STATE_UNSPECIFIED:
	case pb.State_STATE_HEALTHY:
		s.InitialState = checker.StateHealthy
	case pb.State_STATE_UNHEALTHY:
		s.InitialState = checker.StateUnhealthy
	default:
		return s, &checker.FieldError{Field: "initial_state", Reason: fmt.Sprintf("must be STATE_HEALTHY or STATE_UNHEALTHY, got %v", t.GetInitialState())}
	}
	switch t.GetModel() {
	case pb.Model_MODEL_UNSPECIFIED, pb.Model_MODEL_RISE_FALL:
		s.Model = checker.ModelRiseFall
	case pb.Model_MODEL_THREE_STATE:
		s.Model = checker.ModelThreeState
	default:
		return s, &checker.FieldError{Field: "model", Reason: fmt.Sprintf("must be MODEL_RISE_FALL or MODEL_THREE_STATE, got %v", t.GetModel())}
	}
	if err := vantagesFromProto(t, &s); err != nil {
		return s, err
	}
	if err := probeFromProto(t, &s); err != nil {
		return s, err
	}
	return s, lifecycleFromProto(t, &s)
}

// positiveDuration returns 0 for an unset duration and rejects a set one
// that is malformed or not positive: an explicit 0s never silently means
// "default".
func positiveDuration(field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, &checker.FieldError{Field: field, Reason: "is not a valid duration: " + err.Error()}
	}
	v := d.AsDuration()
	if v <= 0 {
		return 0, &checker.FieldError{Field: field, Reason: fmt.Sprintf("must be positive when set, got %v", v)}
	}
	return v, nil
}

// Redacted stands for every probe header's value in what the API answers
// (ListTargets, State, WatchTransitions, and AddTarget's and ReportOutcome's
// statuses): header values often are credentials ("Authorization: Bearer
// ..."), and a read token must not reveal them. Header names stay visible.
// Only the store keeps the values (and so pulsed's /backup, which copies
// it).
//
// AddTarget takes Redacted back as "keep the stored value" for a header the
// target already has, so that a client that reads a spec, changes it and
// writes it back does not replace a secret with this placeholder.
const Redacted = "<redacted>"

// redactURL returns u with the password of its user info, if it has one,
// replaced by Redacted (which reads "%3Credacted%3E" once escaped in the
// URL). A URL that does not parse is returned as is: validation refused it.
func redactURL(u string) string {
	if !strings.Contains(u, "@") { // no user info: most URLs, parsed for nothing
		return u
	}
	pu, err := url.Parse(u)
	if err != nil || pu.User == nil {
		return u
	}
	if _, ok := pu.User.Password(); !ok {
		return u
	}
	pu.User = url.UserPassword(pu.User.Username(), Redacted)
	return pu.String()
}

// urlHasRedacted reports whether u's password is Redacted.
func urlHasRedacted(u string) bool {
	pu, err := url.Parse(u)
	if err != nil || pu.User == nil {
		return false
	}
	pw, ok := pu.User.Password()
	return ok && pw == Redacted
}

// unredactURL puts back the stored URL's password where u's is Redacted.
func unredactURL(spec *checker.Spec, old *probe.HTTPSpec) error {
	h := spec.Probe.HTTP
	if !urlHasRedacted(h.URL) {
		return nil
	}
	pu, _ := url.Parse(h.URL)
	var stored string
	var ok bool
	if old != nil {
		if ou, err := url.Parse(old.URL); err == nil && ou.User != nil {
			stored, ok = ou.User.Password()
		}
	}
	if !ok {
		return &checker.FieldError{
			Field:  "http.url",
			Reason: fmt.Sprintf("has the password %q, which keeps the stored one, but target %q has no stored URL password: send the password itself", Redacted, spec.Name),
		}
	}
	pu.User = url.UserPassword(pu.User.Username(), stored)
	hc := *h
	hc.URL = pu.String()
	spec.Probe.HTTP = &hc
	return nil
}

// redactHeaders returns h with every value replaced by Redacted.
func redactHeaders(h map[string]string) map[string]string {
	if len(h) == 0 {
		return nil
	}
	out := make(map[string]string, len(h))
	for k := range h {
		out[k] = Redacted
	}
	return out
}

// unredact replaces each header value of spec that is Redacted with the
// value the stored target of the same name has for that header (names
// compared as HTTP does, case-insensitively). stored looks the target up.
// A Redacted value with nothing stored to stand for is a *checker.FieldError:
// the placeholder is never written as a real value. spec's header map is
// copied before it is changed, since it may be the request's.
func unredact(spec *checker.Spec, stored func(name string) (checker.Status, error)) error {
	h := spec.Probe.HTTP
	secrets := hasRedactedSecrets(spec.Probe)
	if !secrets && (h == nil || !hasRedacted(h.Headers) && !urlHasRedacted(h.URL)) {
		return nil
	}
	var old map[string]string
	var oldHTTP *probe.HTTPSpec
	st, err := stored(spec.Name)
	switch {
	case err == nil && st.Spec.Probe.HTTP != nil:
		oldHTTP = st.Spec.Probe.HTTP
		old = oldHTTP.Headers
	case err != nil && !errors.Is(err, checker.ErrUnknownTarget):
		return err
	}
	if secrets {
		if err := unredactSecrets(spec, st.Spec.Probe); err != nil {
			return err
		}
	}
	if h == nil {
		return nil
	}
	if err := unredactURL(spec, oldHTTP); err != nil {
		return err
	}
	h = spec.Probe.HTTP
	if !hasRedacted(h.Headers) {
		return nil
	}
	headers := maps.Clone(h.Headers)
	for _, name := range slices.Sorted(maps.Keys(headers)) {
		if headers[name] != Redacted {
			continue
		}
		v, ok := lookupHeader(old, name)
		if !ok {
			return &checker.FieldError{
				Field:  fmt.Sprintf("http.headers[%s]", Quote(name)),
				Reason: fmt.Sprintf("is %q, which keeps the stored value, but target %s has no stored header %s: send the value itself", Redacted, Quote(spec.Name), name),
			}
		}
		headers[name] = v
	}
	hc := *h
	hc.Headers = headers
	spec.Probe.HTTP = &hc
	return nil
}

func hasRedacted(h map[string]string) bool {
	for _, v := range h {
		if v == Redacted {
			return true
		}
	}
	return false
}

// withoutRedacted returns spec without the headers whose value is
// Redacted, for checks made before the stored values are known.
func withoutRedacted(spec checker.Spec) checker.Spec {
	spec.Probe = withoutRedactedSecrets(spec.Probe)
	h := spec.Probe.HTTP
	if h == nil || !hasRedacted(h.Headers) {
		return spec
	}
	hc := *h
	hc.Headers = maps.Clone(h.Headers)
	maps.DeleteFunc(hc.Headers, func(_, v string) bool { return v == Redacted })
	spec.Probe.HTTP = &hc
	return spec
}

// lookupHeader finds name in h as HTTP does: case-insensitively.
func lookupHeader(h map[string]string, name string) (string, bool) {
	if v, ok := h[name]; ok {
		return v, true
	}
	want := http.CanonicalHeaderKey(name)
	for k, v := range h {
		if http.CanonicalHeaderKey(k) == want {
			return v, true
		}
	}
	return "", false
}

// specToProto converts a spec for an answer of the API; header values are
// Redacted.
func specToProto(s checker.Spec) *pb.Target {
	t := &pb.Target{
		Name:         s.Name,
		Group:        s.Group,
		Interval:     durationpb.New(s.Interval),
		Timeout:      durationpb.New(s.Timeout),
		Rise:         ptr(int32(s.Rise)),
		Fall:         ptr(int32(s.Fall)),
		InitialState: stateToProto(s.InitialState),
		Model:        modelToProto(s.Model),
	}
	if s.MaxLatency > 0 {
		t.MaxLatency = durationpb.New(s.MaxLatency)
	}
	if s.FastInterval > 0 {
		t.FastInterval = durationpb.New(s.FastInterval)
	}
	if s.DownInterval > 0 {
		t.DownInterval = durationpb.New(s.DownInterval)
	}
	if s.FlapWindow > 0 {
		t.FlapWindow = durationpb.New(s.FlapWindow)
	}
	t.FlapThreshold = int32(s.FlapThreshold)
	if s.FlapStableFor > 0 {
		t.FlapStableFor = durationpb.New(s.FlapStableFor)
	}
	t.PassiveOutcomes = s.PassiveOutcomes
	t.PassiveRate = int32(s.PassiveRate)
	lifecycleToProto(s, t)
	vantagesToProto(s, t)
	probeToProto(s.Probe, t)
	return t
}

func ptr[T any](v T) *T { return &v }

func stateToProto(s checker.State) pb.State {
	switch s {
	case checker.StateHealthy:
		return pb.State_STATE_HEALTHY
	case checker.StateUnhealthy:
		return pb.State_STATE_UNHEALTHY
	case checker.StateSuspect:
		return pb.State_STATE_SUSPECT
	default:
		return pb.State_STATE_UNSPECIFIED
	}
}

func modelToProto(m checker.Model) pb.Model {
	if m == checker.ModelThreeState {
		return pb.Model_MODEL_THREE_STATE
	}
	return pb.Model_MODEL_RISE_FALL
}

func resultToProto(r checker.Result) *pb.ProbeResult {
	return &pb.ProbeResult{
		Pass:    r.Pass,
		Latency: durationpb.New(r.Latency),
		Error:   r.Err,
		Time:    timestamp(r.Time),
		Passive: r.Passive,
		Ignored: r.Ignored,
	}
}

// timestamp returns nil for the zero time, so "never" is unset on the wire.
func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func statusToProto(st checker.Status) *pb.TargetStatus {
	out := &pb.TargetStatus{
		Spec:                specToProto(st.Spec),
		State:               stateToProto(st.State),
		Routable:            st.Routable,
		PassStreak:          int32(st.PassStreak),
		FailStreak:          int32(st.FailStreak),
		LastTransitionTime:  timestamp(st.LastTransition),
		CarriedOver:         st.CarriedOver,
		Source:              "api",
		Verdict:             stateToProto(st.Verdict),
		PanicHeld:           st.PanicHeld,
		Flapping:            st.Flapping,
		TransitionsInWindow: int32(st.Transitions),
		NextProbeTime:       timestamp(st.NextProbe),
		ActiveResults:       st.ActiveResults,
		PassiveResults:      st.PassiveResults,
		PassiveRateLimited:  st.PassiveLimited,
		IgnoredTimeouts:     st.IgnoredTimeouts,
		Quarantined:         st.Quarantined,
		Warnings:            st.Spec.Probe.Warnings(),
		CertExpiryWarning:   st.CertWarning,
		CertNotAfter:        timestamp(st.CertNotAfter),
		Vantages:            verdictsToProto(st.Vantages),
		Outlier:             outlierStateToProto(st.Outlier),
		Owner:               st.Owner,
	}
	if st.ProbeInterval > 0 {
		out.ProbeInterval = durationpb.New(st.ProbeInterval)
	}
	if st.Spec.Source != "" {
		out.Source = st.Spec.Source
	}
	if st.LastResult != nil {
		out.LastResult = resultToProto(*st.LastResult)
	}
	modeStatusToProto(st, out)
	return out
}

func transitionToProto(tr checker.Transition) *pb.WatchTransitionsResponse {
	t := &pb.Transition{
		Target:       tr.Target,
		Group:        tr.Group,
		From:         stateToProto(tr.From),
		To:           stateToProto(tr.To),
		Time:         timestamp(tr.Time),
		Text:         tr.String(),
		Reason:       tr.Reason,
		Mode:         ModeToProto(tr.Mode),
		SlowStartEnd: timestamp(tr.SlowStartEnd),
		Vantages:     verdictsToProto(tr.Vantages),
	}
	if tr.Reason == "" {
		t.Result = resultToProto(tr.Result)
	}
	return &pb.WatchTransitionsResponse{
		Revision: tr.Revision,
		Event:    &pb.WatchTransitionsResponse_Transition{Transition: t},
	}
}

// policyKinds maps the checker's policy events to the wire's.
var policyKinds = map[checker.EventKind]pb.PolicyEvent_Kind{
	checker.EventPanicEntered:       pb.PolicyEvent_KIND_PANIC_ENTERED,
	checker.EventPanicExited:        pb.PolicyEvent_KIND_PANIC_EXITED,
	checker.EventFlappingStarted:    pb.PolicyEvent_KIND_FLAPPING_STARTED,
	checker.EventFlappingEnded:      pb.PolicyEvent_KIND_FLAPPING_ENDED,
	checker.EventCheckerDegraded:    pb.PolicyEvent_KIND_CHECKER_DEGRADED,
	checker.EventCheckerRecovered:   pb.PolicyEvent_KIND_CHECKER_RECOVERED,
	checker.EventCertExpiring:       pb.PolicyEvent_KIND_CERT_EXPIRING,
	checker.EventTargetExpired:      pb.PolicyEvent_KIND_TARGET_EXPIRED,
	checker.EventDiscoveryFailed:    pb.PolicyEvent_KIND_DISCOVERY_FAILED,
	checker.EventDiscoveryRecovered: pb.PolicyEvent_KIND_DISCOVERY_RECOVERED,
	checker.EventVantageSuspect:     pb.PolicyEvent_KIND_VANTAGE_SUSPECT,
	checker.EventVantageRecovered:   pb.PolicyEvent_KIND_VANTAGE_RECOVERED,
	checker.EventOutlierStarted:     pb.PolicyEvent_KIND_OUTLIER_STARTED,
	checker.EventOutlierEnded:       pb.PolicyEvent_KIND_OUTLIER_ENDED,
}

func policyEventToProto(e checker.Event) *pb.WatchTransitionsResponse {
	return &pb.WatchTransitionsResponse{Revision: e.Revision, Event: &pb.WatchTransitionsResponse_Policy{Policy: &pb.PolicyEvent{
		Kind:     policyKinds[e.Kind],
		Group:    e.Policy.Group,
		Target:   e.Policy.Target,
		Time:     timestamp(e.Time),
		Text:     e.Policy.Text,
		Held:     e.Policy.Held,
		Replica:  e.Policy.Replica,
		Source:   e.Policy.Source,
		SdConfig: e.Policy.SDConfig,
		Error:    e.Policy.Error,
		Vantage:  e.Policy.Vantage,
		Disagree: int32(e.Policy.Disagree),
		Judged:   int32(e.Policy.Judged),
		Outlier:  outlierStateToProto(e.Policy.Outlier),
	}}}
}

func groupStatusToProto(g checker.GroupStatus) *pb.GroupStatus {
	out := &pb.GroupStatus{
		Group:                g.Group,
		Policy:               &pb.GroupPolicy{},
		MaxUnhealthyFraction: g.MaxUnhealthyFraction,
		Targets:              int32(g.Targets),
		Unhealthy:            int32(g.Unhealthy),
		MaxUnhealthy:         int32(g.MaxUnhealthy),
		Panic:                g.Panic,
		Held:                 g.Held,
	}
	if f := g.Policy.MaxUnhealthyFraction; f > 0 {
		out.Policy.MaxUnhealthyFraction = &f
	}
	if d := g.Policy.SlowStart; d > 0 {
		out.Policy.SlowStart = durationpb.New(d)
	}
	if d := g.Policy.RemoveAfterUnhealthy; d > 0 {
		out.Policy.RemoveAfterUnhealthy = durationpb.New(d)
	}
	if o := g.Policy.Objective; o > 0 {
		out.Policy.AvailabilityObjective = &o
		out.Policy.ObjectiveWindow = durationpb.New(g.Policy.ObjectiveWindow)
	}
	out.Policy.Vantages, out.Policy.Quorum = int32(g.Policy.Vantages), int32(g.Policy.Quorum)
	out.Policy.Outlier = outlierPolicyToProto(g.Policy.Outlier)
	return out
}

func overloadToProto(o checker.OverloadStatus) *pb.CheckerStatus {
	return &pb.CheckerStatus{
		Degraded:            o.Degraded,
		DegradedSince:       timestamp(o.Since),
		Reason:              o.Reason,
		Lag:                 durationpb.New(o.Lag),
		WaitingProbes:       int32(o.Waiting),
		InFlightProbes:      int32(o.InFlight),
		MaxConcurrentProbes: int32(o.MaxConcurrent),
		IgnoredTimeouts:     o.IgnoredTimeouts,
	}
}

func eventToProto(e checker.Event) *pb.WatchTransitionsResponse {
	if e.Kind.IsPolicy() {
		return policyEventToProto(e)
	}
	switch e.Kind {
	case checker.EventTransition:
		return transitionToProto(e.Transition)
	case checker.EventAdded:
		return &pb.WatchTransitionsResponse{Revision: e.Revision, Event: &pb.WatchTransitionsResponse_Added{Added: statusToProto(e.Status)}}
	case checker.EventUpdated:
		return &pb.WatchTransitionsResponse{Revision: e.Revision, Event: &pb.WatchTransitionsResponse_Updated{Updated: statusToProto(e.Status)}}
	case checker.EventModeChanged:
		return modeEventToProto(e)
	default:
		return &pb.WatchTransitionsResponse{Revision: e.Revision, Event: &pb.WatchTransitionsResponse_Removed{
			Removed: &pb.TargetRemoved{Name: e.Status.Spec.Name, Group: e.Status.Spec.Group},
		}}
	}
}

func groupPolicyFromProto(p *pb.GroupPolicy) (checker.GroupPolicy, error) {
	gp := checker.GroupPolicy{MaxUnhealthyFraction: p.GetMaxUnhealthyFraction(), Objective: p.GetAvailabilityObjective(),
		Vantages: int(p.GetVantages()), Quorum: int(p.GetQuorum())}
	if p != nil && p.AvailabilityObjective != nil && gp.Objective == 0 {
		return gp, &checker.FieldError{Field: "availability_objective", Reason: "must be in (0, 1), e.g. 0.999 for 99.9%, got 0; leave it unset for none"}
	}
	var err error
	if gp.ObjectiveWindow, err = positiveDuration("objective_window", p.GetObjectiveWindow()); err != nil {
		return gp, err
	}
	if gp.Outlier, err = outlierPolicyFromProto(p.GetOutlier()); err != nil {
		return gp, err
	}
	return gp, groupLifecycleFromProto(p, &gp)
}

// outcomeFromProto converts a ReportOutcome request into a
// checker.Outcome, rejecting a malformed latency with a *checker.FieldError.
func outcomeFromProto(req *pb.ReportOutcomeRequest) (checker.Outcome, error) {
	o := checker.Outcome{Pass: req.GetOk(), Err: req.GetError()}
	if d := req.GetLatency(); d != nil {
		if err := d.CheckValid(); err != nil {
			return o, &checker.FieldError{Field: "latency", Reason: "is not a valid duration: " + err.Error()}
		}
		o.Latency = d.AsDuration()
	}
	return o, o.Validate()
}
