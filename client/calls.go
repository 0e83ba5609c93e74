package client

import (
	"context"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// Every call below is one RPC, bounded by ctx and nothing else: give ctx a
// deadline (a few seconds) so that an unreachable pulsed is an error rather
// than a wait. A failed call returns an *Error.

// Add registers t, or replaces the spec of the target of that name (which
// keeps its state and streaks). It returns the target's status after the
// call and whether it was created.
func (c *Client) Add(ctx context.Context, t Target) (st Status, created bool, err error) {
	if err := checkProbes("AddTarget", "target", t); err != nil {
		return Status{}, false, err
	}
	resp, err := c.api.AddTarget(ctx, &pb.AddTargetRequest{Target: targetToProto(t)})
	if err != nil {
		return Status{}, false, c.wrap("AddTarget", err)
	}
	return statusFromProto(resp.GetStatus()), resp.GetCreated(), nil
}

// Remove unregisters the target called name at once. removed is false
// when there was none (not an error). Drain removes it after a drain.
func (c *Client) Remove(ctx context.Context, name string) (removed bool, err error) {
	resp, err := c.api.RemoveTarget(ctx, &pb.RemoveTargetRequest{Name: name})
	if err != nil {
		return false, c.wrap("RemoveTarget", err)
	}
	return resp.GetRemoved(), nil
}

// State returns the status of the target called name; ErrNotFound when
// there is none.
func (c *Client) State(ctx context.Context, name string) (Status, error) {
	resp, err := c.api.State(ctx, &pb.StateRequest{Name: name})
	if err != nil {
		return Status{}, c.wrap("State", err)
	}
	return statusFromProto(resp.GetStatus()), nil
}

// Healthy returns the sorted names of the routable targets of group (of
// every group when group is empty).
func (c *Client) Healthy(ctx context.Context, group string) ([]string, error) {
	resp, err := c.api.Healthy(ctx, &pb.HealthyRequest{Group: group})
	if err != nil {
		return nil, c.wrap("Healthy", err)
	}
	return resp.GetNames(), nil
}

// List returns the status of every target of group (every group when
// empty), sorted by name, at one revision, with the groups' pool states and
// pulsed's own.
func (c *Client) List(ctx context.Context, group string) (List, error) {
	resp, err := c.api.ListTargets(ctx, &pb.ListTargetsRequest{Group: group})
	if err != nil {
		return List{}, c.wrap("ListTargets", err)
	}
	l := List{Revision: resp.GetRevision(), Checker: checkerFromProto(resp.GetChecker())}
	l.Targets = make([]Status, len(resp.GetTargets()))
	for i, st := range resp.GetTargets() {
		l.Targets[i] = statusFromProto(st)
	}
	for _, g := range resp.GetGroups() {
		l.Groups = append(l.Groups, groupFromProto(g))
	}
	return l, nil
}

// SetGroupPolicy sets group's pool policy; a zero field goes back to the
// server default. It returns the group's status after the call.
func (c *Client) SetGroupPolicy(ctx context.Context, group string, p GroupPolicy) (GroupStatus, error) {
	resp, err := c.api.SetGroupPolicy(ctx, &pb.SetGroupPolicyRequest{Group: group, Policy: groupPolicyToProto(p)})
	if err != nil {
		return GroupStatus{}, c.wrap("SetGroupPolicy", err)
	}
	return groupFromProto(resp.GetGroup()), nil
}

// ReportOutcome reports one real request's outcome (a passive check).
// counted is false when the target's passive_rate dropped it.
// ErrFailedPrecondition: the target does not accept passive outcomes.
func (c *Client) ReportOutcome(ctx context.Context, o Outcome) (counted bool, st Status, err error) {
	req := &pb.ReportOutcomeRequest{Target: o.Target, Ok: o.OK, Error: o.Error}
	if o.Latency != 0 {
		req.Latency = durationpb.New(o.Latency)
	}
	resp, err := c.api.ReportOutcome(ctx, req)
	if err != nil {
		return false, Status{}, c.wrap("ReportOutcome", err)
	}
	return resp.GetCounted(), statusFromProto(resp.GetStatus()), nil
}

// Drain removes the target called name after d (1s to 24h) rather than at
// once: until then it is DRAINING, still probed but not routable, so that
// requests in flight can finish. It returns when the drain is stored, with
// when the target will be removed; ok is false when there is no target of
// that name (not an error), as Remove's removed. A watch sees an EventMode
// now and, at removeAt, a PolicyTargetExpired event and EventRemoved.
//
// Drain is its own call rather than an option of Remove because its answer
// is not Remove's: the target stays until removeAt, which only a drain
// has, and Remove's signature stays what its callers compile against.
func (c *Client) Drain(ctx context.Context, name string, d time.Duration) (removeAt time.Time, ok bool, err error) {
	if d <= 0 { // on the wire, no drain_for means no drain: Remove
		return time.Time{}, false, errInvalid("RemoveTarget", "drain_for: must be positive (1s to 24h), got %v; Remove removes a target at once", d)
	}
	resp, err := c.api.RemoveTarget(ctx, &pb.RemoveTargetRequest{Name: name, DrainFor: durationpb.New(d)})
	if err != nil {
		return time.Time{}, false, c.wrap("RemoveTarget", err)
	}
	return optTime(resp.GetRemoveTime()), resp.GetRemoved(), nil
}

// Update changes the fields of the existing target t.Name that paths
// name, and only those: the rest of its spec, its state and its streaks
// stay as they are. It returns the spec before the change and the status
// after it.
//
// Paths are the fields' names in pulse.proto's Target (AIP-134 field
// masks): "group", "interval", "rise", "http" (the whole probe),
// "http.url" or "grpc.tls_options.server_name" (one field of it), and so
// on. A named field that t leaves zero goes back to pulsed's default. With
// no paths, every field t sets (non-zero, but Name) is changed; "*" alone
// replaces the whole spec, as Add does. Secrets written back as
// "<redacted>" keep the stored value, so t may come from State or List.
//
// The result is validated as Add validates a spec. ErrInvalidArgument: an
// unknown path (the message names it and lists the fields), "name" in
// paths, or a result Add would refuse; ErrNotFound: no target t.Name.
// Nothing changes when the call fails.
func (c *Client) Update(ctx context.Context, t Target, paths ...string) (previous Target, st Status, err error) {
	if err := checkProbes("UpdateTarget", "target", t); err != nil {
		return Target{}, Status{}, err
	}
	req := &pb.UpdateTargetRequest{Target: targetToProto(t)}
	if len(paths) > 0 {
		req.UpdateMask = &fieldmaskpb.FieldMask{Paths: paths}
	}
	resp, err := c.api.UpdateTarget(ctx, req)
	if err != nil {
		return Target{}, Status{}, c.wrap("UpdateTarget", err)
	}
	return targetFromProto(resp.GetPrevious()), statusFromProto(resp.GetStatus()), nil
}

// ProbeRound is what ProbeNow did.
type ProbeRound struct {
	// Transitions are the round's transitions in target name order, with
	// those its results caused in other targets (a panic hold released).
	Transitions []Transition
	// Results has one entry per selected target, in name order.
	Results []ProbeNowResult
}

// ProbeNowResult is what a ProbeNow round did with one target.
type ProbeNowResult struct {
	Name string
	// Result is the probe's result; nil when Skipped says why the target
	// was not probed (a probe already in flight, quarantined, in
	// maintenance, or probed by another replica).
	Result  *Result
	Skipped string
	// State is the target's state after the round.
	State State
}

// ProbeNow probes targets once, now, and waits for their results (no
// longer than their longest timeout, and the waves pulsed's probe slots
// need): the targets of group, or those called names, or with both only
// those of names in group, or with neither every target. Scheduled probes
// keep their places.
//
// ErrNotFound: one of names is not registered (nothing is probed);
// ErrInvalidArgument: a malformed name or group; ErrResourceExhausted:
// over pulsed's rate of rounds (1 a second, bursts of 5), the message says
// when to retry.
func (c *Client) ProbeNow(ctx context.Context, group string, names ...string) (ProbeRound, error) {
	resp, err := c.api.ProbeNow(ctx, &pb.ProbeNowRequest{Group: group, Names: names})
	if err != nil {
		return ProbeRound{}, c.wrap("ProbeNow", err)
	}
	var r ProbeRound
	for _, tr := range resp.GetTransitions() {
		r.Transitions = append(r.Transitions, transitionFromProto(tr))
	}
	for _, pr := range resp.GetResults() {
		r.Results = append(r.Results, probeNowResultFromProto(pr))
	}
	return r, nil
}

// ModeRequest is what SetMode sets: the mode of one Target, or of every
// target of a Group now (exactly one of the two).
type ModeRequest struct {
	Target string
	Group  string
	// Mode is required: ModeActive, ModeDraining or ModeMaintenance.
	Mode Mode
	// Reason says why (at most 256 bytes), e.g. "deploy 4711": shown in
	// the status and the transition ("draining: deploy 4711").
	Reason string
	// Until, when set, returns the targets to ACTIVE by themselves then:
	// in the future, at most 30 days ahead, and only with ModeDraining or
	// ModeMaintenance.
	Until time.Time
}

// SetMode sets the administrative mode of a target or a group and returns
// the statuses of the targets it named, sorted by name, once the mode is
// stored. A draining target is still probed but never routable; one in
// maintenance is neither probed nor routable. Each target whose mode
// changes makes an EventMode on a watch, and a transition when its
// routability changes.
//
// ErrInvalidArgument names the field (both or neither of Target and
// Group, no Mode, an Until in the past or too far ahead, a Reason too
// long); ErrNotFound: an unknown target, or a group without targets;
// ErrUnavailable: pulsed could not store it (nothing changed).
func (c *Client) SetMode(ctx context.Context, m ModeRequest) ([]Status, error) {
	req := &pb.SetModeRequest{Target: m.Target, Group: m.Group, Mode: pb.Mode(m.Mode), Reason: m.Reason}
	if !m.Until.IsZero() {
		req.Until = timestamppb.New(m.Until)
	}
	resp, err := c.api.SetMode(ctx, req)
	if err != nil {
		return nil, c.wrap("SetMode", err)
	}
	out := make([]Status, len(resp.GetTargets()))
	for i, st := range resp.GetTargets() {
		out[i] = statusFromProto(st)
	}
	return out, nil
}

// AddResult is what AddMany did with one target.
type AddResult struct {
	Name    string
	Created bool
	// Err is why the target was refused: an *Error with the code and
	// message AddTarget would have answered ("targets[i]." before the field
	// path, i counting in the call that carried it). Nil when registered.
	Err error
}

// addBatchBytes bounds the encoded targets of one AddTargets call, well
// under pulsed's default -max-request-bytes (1 MiB).
const addBatchBytes = 512 << 10

// maxAddBatch is the most targets pulsed takes in one AddTargets call.
const maxAddBatch = 10000

// AddMany registers or replaces many targets, each as Add would, in as few
// AddTargets calls as their number and size allow (at most 10,000 targets
// and about 512 KiB a call). A target refused is refused alone: its
// result's Err says why and the others are registered. The targets of each
// call are durable when it returns. It returns one result per target, in
// order; when a call fails as a whole (pulsed unreachable, ctx done) it
// returns the error and the results of the calls before it, whose targets
// are registered. A target with several probes (ts[i]) refuses the whole
// AddMany before anything is sent, with ErrInvalidArgument on
// "targets[i].probe".
func (c *Client) AddMany(ctx context.Context, ts []Target) ([]AddResult, error) {
	for i, t := range ts {
		if err := checkProbes("AddTargets", "targets["+strconv.Itoa(i)+"]", t); err != nil {
			return nil, err
		}
	}
	out := make([]AddResult, 0, len(ts))
	req := &pb.AddTargetsRequest{}
	size := 0
	send := func() error {
		if len(req.Targets) == 0 {
			return nil
		}
		resp, err := c.api.AddTargets(ctx, req)
		if err != nil {
			return c.wrap("AddTargets", err)
		}
		for _, r := range resp.GetResults() {
			res := AddResult{Name: r.GetName(), Created: r.GetCreated()}
			if r.GetCode() != "" {
				var code codes.Code
				if err := code.UnmarshalJSON([]byte(strconv.Quote(r.GetCode()))); err != nil {
					code = codes.Unknown
				}
				res.Err = &Error{Code: code, Message: r.GetError(), Method: "AddTargets"}
			}
			out = append(out, res)
		}
		req, size = &pb.AddTargetsRequest{}, 0
		return nil
	}
	for _, t := range ts {
		pt := targetToProto(t)
		n := proto.Size(pt) + 4 // and the field's tag and length
		if len(req.Targets) == maxAddBatch || (len(req.Targets) > 0 && size+n > addBatchBytes) {
			if err := send(); err != nil {
				return out, err
			}
		}
		req.Targets = append(req.Targets, pt)
		size += n
	}
	return out, send()
}

// Discovery returns the discovery groups pulsed runs (-discovery-config),
// sorted by name, with each source's last refresh, targets and error; none
// without discovery.
func (c *Client) Discovery(ctx context.Context) ([]DiscoveryGroup, error) {
	resp, err := c.api.ListDiscovery(ctx, &pb.ListDiscoveryRequest{})
	if err != nil {
		return nil, c.wrap("ListDiscovery", err)
	}
	out := make([]DiscoveryGroup, 0, len(resp.GetGroups()))
	for _, g := range resp.GetGroups() {
		out = append(out, discoveryFromProto(g))
	}
	return out, nil
}
