package client_test

import (
	"context"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// fakePulse is a scripted pulsed, for what a real one does not do on
// demand: events of a kind this client does not know, a named
// RESOURCE_EXHAUSTED, an error with details, the metadata a call carries.
type fakePulse struct {
	pb.UnimplementedHealthCheckerServer
	// watch answers the n-th WatchTransitions call (from 0).
	watch func(n int, req *pb.WatchTransitionsRequest, stream grpc.ServerStreamingServer[pb.WatchTransitionsResponse]) error
	// history answers History.
	history func(*pb.HistoryRequest) (*pb.HistoryResponse, error)

	mu     sync.Mutex // protects the fields below
	auth   string
	starts []uint64
}

func (f *fakePulse) Healthy(ctx context.Context, _ *pb.HealthyRequest) (*pb.HealthyResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.auth = ""
	if v := md.Get("authorization"); len(v) > 0 {
		f.auth = v[0]
	}
	return &pb.HealthyResponse{}, nil
}

func (f *fakePulse) WatchTransitions(req *pb.WatchTransitionsRequest, stream grpc.ServerStreamingServer[pb.WatchTransitionsResponse]) error {
	f.mu.Lock()
	n := len(f.starts)
	f.starts = append(f.starts, req.GetStartRevision())
	f.mu.Unlock()
	return f.watch(n, req, stream)
}

func (f *fakePulse) History(_ context.Context, req *pb.HistoryRequest) (*pb.HistoryResponse, error) {
	return f.history(req)
}

func (f *fakePulse) lastAuth() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.auth
}

func (f *fakePulse) startRevisions() []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]uint64(nil), f.starts...)
}

// serve serves f on loopback until the test ends and returns its address.
func (f *fakePulse) serve(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	pb.RegisterHealthCheckerServer(gs, f)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}
