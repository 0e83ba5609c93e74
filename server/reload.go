package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// ReloadResult is what a reload did with one file.
type ReloadResult struct {
	Kind string // "targets" or "discovery"
	Path string
	Err  error // nil: applied
}

// WithReload makes Reload call reload, which re-reads pulsed's files as
// SIGHUP does and says what it did with each; without it Reload answers
// FAILED_PRECONDITION.
func WithReload(reload func() []ReloadResult) Option {
	return func(s *Server) { s.reload = reload }
}

// Reload re-reads pulsed's files.
func (s *Server) Reload(context.Context, *pb.ReloadRequest) (*pb.ReloadResponse, error) {
	var res []ReloadResult
	if s.reload != nil {
		res = s.reload()
	}
	if len(res) == 0 {
		return nil, status.Error(codes.FailedPrecondition, "pulsed runs without -targets and -discovery-config: there is no file to reload")
	}
	out := &pb.ReloadResponse{}
	for _, r := range res {
		f := &pb.ReloadedFile{Kind: r.Kind, Path: r.Path}
		if r.Err != nil {
			f.Error = r.Err.Error()
		}
		out.Files = append(out.Files, f)
	}
	return out, nil
}
