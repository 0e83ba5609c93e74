package server

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pulsehealth/pulse/checker"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// MaxWatchNames bounds WatchTransitionsRequest.names: a watcher keeps its
// names in a set for as long as it lives.
const MaxWatchNames = 10000

// validator rejects malformed requests before they reach a handler, with
// INVALID_ARGUMENT and a message that starts with the field to fix. The
// generated types carry no validation methods (protovalidate's annotations
// cannot be fetched here), so the rules are the checker's own, applied to
// the converted request.
type validator struct {
	defaults checker.Defaults
}

func (v validator) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := v.check(req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (v validator) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &validatingStream{ServerStream: ss, v: v})
}

// validatingStream checks each message the client sends.
type validatingStream struct {
	grpc.ServerStream
	v validator
}

func (s *validatingStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.v.check(m)
}

func (v validator) check(req any) error {
	var err error
	switch r := req.(type) {
	case *pb.AddTargetRequest:
		err = v.checkTarget(r.GetTarget())
	case *pb.AddTargetsRequest:
		// Each target is validated alone, and refused alone, by AddTargets.
		if n := len(r.GetTargets()); n > checker.MaxAddMany {
			err = fmt.Errorf("targets: must be at most %d per call, got %d; send them in several calls", checker.MaxAddMany, n)
		}
	case *pb.RemoveTargetRequest:
		err = field("name", checker.ValidateName(r.GetName()))
		if d := r.GetDrainFor(); err == nil && d != nil {
			_, err = positiveDuration("drain_for", d)
		}
	case *pb.StateRequest:
		err = field("name", checker.ValidateName(r.GetName()))
	case *pb.HealthyRequest:
		err = field("group", checker.ValidateGroup(r.GetGroup()))
	case *pb.ListTargetsRequest:
		err = field("group", checker.ValidateGroup(r.GetGroup()))
	case *pb.SetGroupPolicyRequest:
		err = v.checkGroupPolicy(r)
	case *pb.ReportOutcomeRequest:
		err = field("target", checker.ValidateName(r.GetTarget()))
		if err == nil {
			_, err = outcomeFromProto(r)
		}
	case *pb.UpdateTargetRequest:
		err = checkUpdate(r)
	case *pb.ProbeNowRequest:
		err = field("group", checker.ValidateGroup(r.GetGroup()))
		if n := len(r.GetNames()); err == nil && n > checker.MaxProbeNowNames {
			err = fmt.Errorf("names: must list at most %d targets, got %d; select a group instead", checker.MaxProbeNowNames, n)
		}
		for i, n := range r.GetNames() {
			if err == nil {
				err = field(fmt.Sprintf("names[%d]", i), checker.ValidateName(n))
			}
		}
	case *pb.WatchTransitionsRequest:
		err = field("group", checker.ValidateGroup(r.GetGroup()))
		if n := len(r.GetNames()); err == nil && n > MaxWatchNames {
			err = fmt.Errorf("names: must list at most %d targets, got %d; filter by group instead", MaxWatchNames, n)
		}
		for i, n := range r.GetNames() {
			if err == nil {
				err = field(fmt.Sprintf("names[%d]", i), checker.ValidateName(n))
			}
		}
	}
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return nil
}

func (v validator) checkTarget(t *pb.Target) error {
	if t == nil {
		return fmt.Errorf("target: is required, e.g. {\"target\": {\"name\": \"web-1\", \"http\": {\"url\": \"http://127.0.0.1:8080/healthz\"}}}")
	}
	spec, err := SpecFromProto(t)
	if err == nil {
		// A Redacted header value stands for a stored one, which AddTarget
		// fills in and the checker validates.
		err = withoutRedacted(spec).WithDefaults(v.defaults).Validate()
	}
	if err != nil {
		return fmt.Errorf("target.%w", err) // a *checker.FieldError: "rise: must be ..."
	}
	return nil
}

func (v validator) checkGroupPolicy(r *pb.SetGroupPolicyRequest) error {
	if r.GetGroup() == "" {
		return fmt.Errorf("group: is required: targets without a group are not a pool")
	}
	if err := field("group", checker.ValidateGroup(r.GetGroup())); err != nil {
		return err
	}
	if p := r.GetPolicy(); p != nil && p.MaxUnhealthyFraction != nil {
		f := p.GetMaxUnhealthyFraction()
		if f == 0 {
			return fmt.Errorf("policy.max_unhealthy_fraction: must be in (0, 1] (1 disables the threshold), got 0; leave it unset for the server default")
		}
		return field("policy.max_unhealthy_fraction", checker.ValidateFraction(f))
	}
	return nil
}

// field prefixes err's message with the field it is about.
func field(name string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", name, err)
}

// checkUpdate checks an UpdateTarget request's name and mask; the result
// is validated once applied to the stored spec.
func checkUpdate(r *pb.UpdateTargetRequest) error {
	if r.GetTarget() == nil {
		return fmt.Errorf("target: is required, e.g. {\"target\": {\"name\": \"web-1\", \"interval\": \"5s\"}, \"update_mask\": \"interval\"}")
	}
	if err := field("target.name", checker.ValidateName(r.GetTarget().GetName())); err != nil {
		return err
	}
	_, err := maskPaths(r)
	return err
}
