package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/pulsehealth/pulse/checker"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// UpdateTarget changes the fields of a target its update mask names.
func (s *Server) UpdateTarget(_ context.Context, req *pb.UpdateTargetRequest) (*pb.UpdateTargetResponse, error) {
	paths, err := maskPaths(req)
	if err != nil {
		return nil, toStatus(err, "")
	}
	src := req.GetTarget()
	old, st, err := s.c.Update(src.GetName(), func(cur checker.Spec) (checker.Spec, error) {
		if group, ok := DiscoveryGroup(cur.Source); ok {
			return cur, &discoveredError{name: cur.Name, group: group}
		}
		t := specToProto(cur) // redacted: unredact below puts the stored secrets back
		applyMask(t, src, paths)
		spec, err := SpecFromProto(t)
		if err != nil {
			return spec, err
		}
		err = unredact(&spec, func(string) (checker.Status, error) { return checker.Status{Spec: cur}, nil })
		return spec, err
	})
	var de *discoveredError
	if errors.As(err, &de) {
		return nil, status.Error(codes.FailedPrecondition, de.Error())
	}
	if err != nil {
		return nil, toStatus(err, "target.")
	}
	return &pb.UpdateTargetResponse{Previous: specToProto(old), Status: statusToProto(st)}, nil
}

// maskPaths returns the paths of req's update mask, checked against
// Target's fields, or, for an unset or empty mask, the fields set in
// req.target (but name), as AIP-134 asks. "*" stands alone for every
// field.
func maskPaths(req *pb.UpdateTargetRequest) ([]string, error) {
	paths := req.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		req.GetTarget().ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
			if fd.Name() != "name" {
				paths = append(paths, string(fd.Name()))
			}
			return true
		})
		return paths, nil
	}
	td := (&pb.Target{}).ProtoReflect().Descriptor()
	for i, p := range paths {
		at := fmt.Sprintf("update_mask.paths[%d]", i)
		if p == "*" {
			if len(paths) > 1 {
				return nil, &checker.FieldError{Field: at, Reason: `"*" replaces the whole spec and must be the only path`}
			}
			continue
		}
		md := td
		segs := strings.Split(p, ".")
		for k, seg := range segs {
			fd := md.Fields().ByName(protoreflect.Name(seg))
			if fd == nil {
				return nil, &checker.FieldError{Field: at, Reason: fmt.Sprintf("%s: %s has no field %s; its fields are %s", Quote(p), md.Name(), Quote(seg), fieldNames(md))}
			}
			if k == 0 && seg == "name" {
				return nil, &checker.FieldError{Field: at, Reason: `"name" cannot change: add a target of the new name and remove the old one`}
			}
			if k == len(segs)-1 {
				break
			}
			if fd.Message() == nil || fd.IsList() || fd.IsMap() || fd.Message().ParentFile().Package() != td.ParentFile().Package() {
				return nil, &checker.FieldError{Field: at, Reason: fmt.Sprintf("%s: %s.%s has no fields to name; name it whole", Quote(p), md.Name(), seg)}
			}
			md = fd.Message()
		}
	}
	return paths, nil
}

// fieldNames lists md's fields by name, sorted.
func fieldNames(md protoreflect.MessageDescriptor) string {
	var names []string
	for i := range md.Fields().Len() {
		names = append(names, string(md.Fields().Get(i).Name()))
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// applyMask copies the fields paths name from src to dst; a named field
// unset in src is cleared in dst. Paths are valid (see maskPaths).
func applyMask(dst, src *pb.Target, paths []string) {
	src = proto.Clone(src).(*pb.Target) // dst shares none of the request's values
	if slices.Equal(paths, []string{"*"}) {
		name := dst.GetName()
		proto.Reset(dst)
		proto.Merge(dst, src)
		dst.Name = name
		return
	}
	for _, p := range paths {
		d, s := dst.ProtoReflect(), src.ProtoReflect()
		segs := strings.Split(p, ".")
		for _, seg := range segs[:len(segs)-1] {
			fd := d.Descriptor().Fields().ByName(protoreflect.Name(seg))
			s = s.Get(fd).Message()
			d = d.Mutable(fd).Message()
		}
		fd := d.Descriptor().Fields().ByName(protoreflect.Name(segs[len(segs)-1]))
		if s.Has(fd) {
			d.Set(fd, s.Get(fd))
		} else {
			d.Clear(fd)
		}
	}
}

// ProbeNow probes the selected targets once, now, and returns the round.
// Its rate is limited per client (see clientID) and for all together.
func (s *Server) ProbeNow(ctx context.Context, req *pb.ProbeNowRequest) (*pb.ProbeNowResponse, error) {
	r, err := s.c.ProbeNow(ctx, checker.Selection{Group: req.GetGroup(), Names: req.GetNames(), Client: clientID(ctx)})
	if err != nil {
		return nil, toStatus(err, "")
	}
	out := &pb.ProbeNowResponse{}
	for _, tr := range r.Transitions {
		out.Transitions = append(out.Transitions, transitionToProto(tr).GetTransition())
	}
	for _, rr := range r.Results {
		pr := &pb.ProbeNowResult{Name: rr.Name, Skipped: rr.Skipped, State: stateToProto(rr.State)}
		if rr.Probed {
			pr.Result = resultToProto(rr.Result)
		}
		out.Results = append(out.Results, pr)
	}
	return out, nil
}

// discoverySource prefixes the source of the targets a discovery group
// found: "discovery:GROUP".
const discoverySource = "discovery:"

// DiscoverySource returns the source of the targets discovery group found.
func DiscoverySource(group string) string { return discoverySource + group }

// DiscoveryGroup returns the discovery group a target's source names, and
// whether it names one.
func DiscoveryGroup(source string) (string, bool) {
	return strings.CutPrefix(source, discoverySource)
}

// discoveredError refuses UpdateTarget on a target a discovery group
// found: its spec is the group's template, put back by every answer.
type discoveredError struct{ name, group string }

func (e *discoveredError) Error() string {
	return fmt.Sprintf("target %s was found by discovery group %s: its spec is the group's template; change the template in pulsed's -discovery-config (SetMode and RemoveTarget apply as to any target)", Quote(e.name), Quote(e.group))
}
