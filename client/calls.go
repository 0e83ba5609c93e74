package client

import (
	"context"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// Every call below is one RPC, bounded by ctx and nothing else: give ctx a
// deadline (a few seconds) so that an unreachable pulsed is an error rather
// than a wait. A failed call returns an *Error.

// Add registers t, or replaces the spec of the target of that name (which
// keeps its state and streaks). It returns the target's status after the
// call and whether it was created.
func (c *Client) Add(ctx context.Context, t Target) (st Status, created bool, err error) {
	resp, err := c.api.AddTarget(ctx, &pb.AddTargetRequest{Target: targetToProto(t)})
	if err != nil {
		return Status{}, false, wrap("AddTarget", err)
	}
	return statusFromProto(resp.GetStatus()), resp.GetCreated(), nil
}

// Remove unregisters the target called name. removed is false when there
// was none (not an error).
func (c *Client) Remove(ctx context.Context, name string) (removed bool, err error) {
	resp, err := c.api.RemoveTarget(ctx, &pb.RemoveTargetRequest{Name: name})
	if err != nil {
		return false, wrap("RemoveTarget", err)
	}
	return resp.GetRemoved(), nil
}

// State returns the status of the target called name; ErrNotFound when
// there is none.
func (c *Client) State(ctx context.Context, name string) (Status, error) {
	resp, err := c.api.State(ctx, &pb.StateRequest{Name: name})
	if err != nil {
		return Status{}, wrap("State", err)
	}
	return statusFromProto(resp.GetStatus()), nil
}

// Healthy returns the sorted names of the routable targets of group (of
// every group when group is empty).
func (c *Client) Healthy(ctx context.Context, group string) ([]string, error) {
	resp, err := c.api.Healthy(ctx, &pb.HealthyRequest{Group: group})
	if err != nil {
		return nil, wrap("Healthy", err)
	}
	return resp.GetNames(), nil
}

// List returns the status of every target of group (every group when
// empty), sorted by name, at one revision, with the groups' pool states and
// pulsed's own.
func (c *Client) List(ctx context.Context, group string) (List, error) {
	resp, err := c.api.ListTargets(ctx, &pb.ListTargetsRequest{Group: group})
	if err != nil {
		return List{}, wrap("ListTargets", err)
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
	req := &pb.SetGroupPolicyRequest{Group: group, Policy: &pb.GroupPolicy{}}
	if p.MaxUnhealthyFraction != 0 {
		req.Policy.MaxUnhealthyFraction = proto.Float64(p.MaxUnhealthyFraction)
	}
	resp, err := c.api.SetGroupPolicy(ctx, req)
	if err != nil {
		return GroupStatus{}, wrap("SetGroupPolicy", err)
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
		return false, Status{}, wrap("ReportOutcome", err)
	}
	return resp.GetCounted(), statusFromProto(resp.GetStatus()), nil
}
