package server

import (
	"context"
	"fmt"
	"strings"
	"unicode"

	"google.golang.org/grpc/status"

	"github.com/pulsehealth/pulse/checker"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// AddTargets registers or updates many targets, each as AddTarget would:
// one refused is named in its result and keeps none of the others from
// being registered. The request's size is checked by the validator.
func (s *Server) AddTargets(_ context.Context, req *pb.AddTargetsRequest) (*pb.AddTargetsResponse, error) {
	ts := req.GetTargets()
	out := &pb.AddTargetsResponse{Results: make([]*pb.AddTargetResult, len(ts))}
	specs := make([]checker.Spec, 0, len(ts))
	at := make([]int, 0, len(ts)) // specs[k] is ts[at[k]]
	for i, t := range ts {
		out.Results[i] = &pb.AddTargetResult{Name: t.GetName()}
		spec, err := SpecFromProto(t)
		if err == nil {
			err = unredact(&spec, s.c.Status) // a header sent back as read keeps its value
		}
		if err != nil {
			refuse(out, i, err)
			continue
		}
		specs = append(specs, spec)
		at = append(at, i)
	}
	res, err := s.c.AddMany(specs)
	if err != nil {
		return nil, toStatus(err, "")
	}
	for k, r := range res {
		if r.Err != nil {
			refuse(out, at[k], r.Err)
			continue
		}
		if r.Created {
			out.Results[at[k]].Created = true
			out.Created++
		}
	}
	return out, nil
}

// refuse records why the request's i-th target was refused: the code and
// message AddTarget would have answered, its field path under targets[i].
func refuse(out *pb.AddTargetsResponse, i int, err error) {
	st, _ := status.FromError(toStatus(err, fmt.Sprintf("targets[%d].", i)))
	r := out.Results[i]
	r.Code, r.Error = codeName(st.Code().String()), st.Message()
	out.Refused++
}

// codeName spells a gRPC code as the protocol does ("INVALID_ARGUMENT")
// from Go's name for it ("InvalidArgument").
func codeName(goName string) string {
	if goName == "OK" {
		return goName
	}
	var b strings.Builder
	for i, r := range goName {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}
