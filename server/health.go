package server

import (
	"context"
	"sync"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/pulsehealth/pulse/checker"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// Health serves grpc.health.v1 for pulsed and for every group of targets,
// so any gRPC health client (a Kubernetes gRPC probe, grpc-health-probe)
// can read a group's health without knowing Pulse's API:
//
//   - service "" and "pulse.v1.HealthChecker": pulsed itself, SERVING
//     while it is live, NOT_SERVING while SetLive says it is not (its
//     watchdog found a part of it stalled) and from Shutdown on;
//   - any other service name is a group: SERVING while at least one of its
//     targets is routable, NOT_SERVING while none is, and NOT_FOUND from
//     Check (SERVICE_UNKNOWN from Watch) while no target has that group.
//
// Its methods are safe for concurrent use.
type Health struct {
	healthpb.UnimplementedHealthServer
	c *checker.Checker

	mu      sync.Mutex    // protects down, notLive and changed
	down    bool          // Shutdown was called
	notLive error         // why pulsed is not live; nil while it is
	changed chan struct{} // closed and replaced when pulsed's own status changes
}

func newHealth(c *checker.Checker) *Health {
	return &Health{c: c, changed: make(chan struct{})}
}

// Shutdown makes pulsed's own service answer NOT_SERVING for good. It is
// idempotent.
func (h *Health) Shutdown() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down {
		h.down = true
		h.changedLocked()
	}
}

// SetLive says whether pulsed is live: nil while it is, an error saying
// what stalled while it is not. pulsed's own service answers NOT_SERVING
// while it is not, and SERVING again once it is (until Shutdown).
func (h *Health) SetLive(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	was := h.notLive != nil
	h.notLive = err
	if was != (err != nil) {
		h.changedLocked()
	}
}

func (h *Health) changedLocked() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// self returns pulsed's own status and a channel closed when it changes.
func (h *Health) self() (healthpb.HealthCheckResponse_ServingStatus, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.down || h.notLive != nil {
		return healthpb.HealthCheckResponse_NOT_SERVING, h.changed
	}
	return healthpb.HealthCheckResponse_SERVING, h.changed
}

func isSelf(service string) bool {
	return service == "" || service == pb.HealthChecker_ServiceDesc.ServiceName
}

// status returns the health of a service, and for pulsed's own a channel
// closed when it changes; known is false for an unknown group.
func (h *Health) status(service string) (st healthpb.HealthCheckResponse_ServingStatus, changed <-chan struct{}, known bool) {
	if isSelf(service) {
		st, changed = h.self()
		return st, changed, true
	}
	routable, total := h.c.GroupHealth(service)
	switch {
	case total == 0:
		return healthpb.HealthCheckResponse_SERVICE_UNKNOWN, nil, false
	case routable == 0:
		return healthpb.HealthCheckResponse_NOT_SERVING, nil, true
	default:
		return healthpb.HealthCheckResponse_SERVING, nil, true
	}
}

// Check answers the health of pulsed or of a group.
func (h *Health) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	st, _, known := h.status(req.GetService())
	if !known {
		return nil, status.Errorf(codes.NotFound, "unknown service or group %s: no target has that group", Quote(req.GetService()))
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
		if w, err = h.c.Watch(checker.Filter{Group: svc, Source: peerHost(stream.Context())}, h.c.Revision()); err != nil {
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
		st, changed, _ := h.status(svc)
		if st != last {
			if err := stream.Send(&healthpb.HealthCheckResponse{Status: st}); err != nil {
				return err
			}
			last = st
		}
		var ready <-chan struct{}
		if w != nil {
			ready = w.Ready()
		}
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-ready:
		case <-changed:
		}
	}
}
