package server

import (
	"context"
	"sync"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"pulse/checker"
	pb "pulse/gen/pulse/v1"
)

// Health serves grpc.health.v1 for pulsed and for every group of targets,
// so any gRPC health client (a Kubernetes gRPC probe, grpc-health-probe)
// can read a group's health without knowing Pulse's API:
//
//   - service "" and "pulse.v1.HealthChecker": pulsed itself, SERVING
//     until Shutdown, then NOT_SERVING;
//   - any other service name is a group: SERVING while at least one of its
//     targets is routable, NOT_SERVING while none is, and NOT_FOUND from
//     Check (SERVICE_UNKNOWN from Watch) while no target has that group.
//
// Its methods are safe for concurrent use.
type Health struct {
	healthpb.UnimplementedHealthServer
	c *checker.Checker

	once sync.Once
	down chan struct{} // closed by Shutdown
}

func newHealth(c *checker.Checker) *Health {
	return &Health{c: c, down: make(chan struct{})}
}

// Shutdown makes pulsed's own service answer NOT_SERVING. It is idempotent.
func (h *Health) Shutdown() { h.once.Do(func() { close(h.down) }) }

func (h *Health) shuttingDown() bool {
	select {
	case <-h.down:
		return true
	default:
		return false
	}
}

func isSelf(service string) bool {
	return service == "" || service == pb.HealthChecker_ServiceDesc.ServiceName
}

// status returns the health of a service; known is false for an unknown
// group.
func (h *Health) status(service string) (st healthpb.HealthCheckResponse_ServingStatus, known bool) {
	if isSelf(service) {
		if h.shuttingDown() {
			return healthpb.HealthCheckResponse_NOT_SERVING, true
		}
		return healthpb.HealthCheckResponse_SERVING, true
	}
	routable, total := h.c.GroupHealth(service)
	switch {
	case total == 0:
		return healthpb.HealthCheckResponse_SERVICE_UNKNOWN, false
	case routable == 0:
		return healthpb.HealthCheckResponse_NOT_SERVING, true
	default:
		return healthpb.HealthCheckResponse_SERVING, true
	}
}

// Check answers the health of pulsed or of a group.
func (h *Health) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	st, known := h.status(req.GetService())
	if !known {
		return nil, status.Errorf(codes.NotFound, "unknown service or group %q: no target has that group", req.GetService())
	}
	return &healthpb.HealthCheckResponse{Status: st}, nil
}

// Watch sends the health of pulsed or of a group now and whenever it
// changes.
func (h *Health) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	svc := req.GetService()
	var w *checker.Watcher
	if !isSelf(svc) {
		var err error
		if w, err = h.c.Watch(checker.Filter{Group: svc}, h.c.Revision()); err != nil {
			return toStatus(err, "")
		}
		defer w.Close()
	}
	ctx := stream.Context()
	last := healthpb.HealthCheckResponse_ServingStatus(-1)
	for {
		if w != nil {
			if _, err := w.Next(watchBatch); err != nil {
				return toStatus(err, "")
			}
		}
		if st, _ := h.status(svc); st != last {
			if err := stream.Send(&healthpb.HealthCheckResponse{Status: st}); err != nil {
				return err
			}
			last = st
		}
		var ready <-chan struct{}
		if w != nil {
			ready = w.Ready()
		}
		down := h.down
		if !isSelf(svc) || last == healthpb.HealthCheckResponse_NOT_SERVING {
			down = nil
		}
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-ready:
		case <-down:
		}
	}
}
