package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/pulsedproc"
)

// pulsedArgs are the flags the harness starts pulsed with: the registry
// flags (none: memory only, -data-dir ""), no HTTP listener, no API rate
// limit or target limits (the harness registers tens of thousands of
// targets as fast as it can), and the probe defaults of the run.
func pulsedArgs(o Options, interval time.Duration, registry ...string) []string {
	if len(registry) == 0 {
		registry = []string{"-data-dir", ""}
	}
	args := append([]string{"-listen", "127.0.0.1:0"}, registry...)
	args = append(args,
		"-http-listen", "",
		"-rate-limit", "0",
		"-max-targets", "0",
		"-max-targets-per-group", "0",
		"-max-watchers-per-source", "0", // every subscriber is on loopback
		"-interval", interval.String(),
		"-timeout", min(o.Timeout, interval).String(),
		"-rise", strconv.Itoa(o.Rise),
		"-fall", strconv.Itoa(o.Fall),
	)
	return append(args, o.PulsedArgs...)
}

// targetName is the name of farm target i, in Pulse and in HAProxy.
func targetName(i int) string { return fmt.Sprintf("t%06d", i) }

// targetIndex is targetName's inverse; -1 for another name.
func targetIndex(name string) int {
	if len(name) != 7 || name[0] != 't' {
		return -1
	}
	n, err := strconv.Atoi(name[1:])
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// pulsedProc is a running pulsed and a client of it.
type pulsedProc struct {
	*child
	addr string
	conn *grpc.ClientConn
	api  pb.HealthCheckerClient
}

func startPulsed(ctx context.Context, bin string, args []string) (*pulsedProc, error) {
	ready := make(chan string, 1)
	c, err := startChild("pulsed", exec.Command(bin, args...), func(line string) {
		if addr, ok := pulsedproc.ListeningAddr(line); ok {
			select {
			case ready <- addr:
			default:
			}
		}
	})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	addr, err := waitLine(wctx, c, ready, "its listening line")
	if err != nil {
		c.Stop(5 * time.Second)
		return nil, err
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		c.Stop(5 * time.Second)
		return nil, err
	}
	return &pulsedProc{child: c, addr: addr, conn: conn, api: pb.NewHealthCheckerClient(conn)}, nil
}

func (p *pulsedProc) Close() {
	_ = p.conn.Close()
	p.Stop(20 * time.Second)
}

// setOutliers turns on group bench's outlier detection, its latency rule
// at factor and every other setting at the policy's default.
func (p *pulsedProc) setOutliers(ctx context.Context, factor float64) error {
	_, err := p.api.SetGroupPolicy(ctx, &pb.SetGroupPolicyRequest{Group: "bench", Policy: &pb.GroupPolicy{
		Outlier: &pb.OutlierPolicy{LatencyFactor: factor},
	}})
	if err != nil {
		return fmt.Errorf("SetGroupPolicy(bench): %w", err)
	}
	return nil
}

// register adds every farm target to pulsed in AddTargets batches, as the
// Go client's AddMany sends them; the checker spreads their first probes
// over the interval.
func (p *pulsedProc) register(ctx context.Context, farm *Farm, bodyContains string) error {
	targets := make([]*pb.Target, farm.Len())
	for i := range targets {
		targets[i] = &pb.Target{
			Name:  targetName(i),
			Group: "bench",
			Probe: &pb.Target_Http{Http: &pb.HttpProbe{Url: farm.URL(i), BodyContains: bodyContains}},
		}
	}
	if _, err := addInBatches(ctx, p.api, targets); err != nil {
		return fmt.Errorf("AddTargets: %w", err)
	}
	return nil
}

// tracker follows one WatchTransitions stream from the start of the
// registry and keeps, per target, whether it is healthy and when the
// harness last received its transitions. Its fields are atomic.
type tracker struct {
	healthy  []atomic.Bool
	nHealthy atomic.Int64
	downAt   *stamps // receipt of the last transition to unhealthy
	upAt     *stamps // receipt of the last transition to healthy
	events   atomic.Int64
	rev      atomic.Uint64 // the revision of the last event received
	err      atomic.Pointer[error]
}

// watchAll opens one WatchTransitions stream on api and follows it into a
// tracker of n targets in the background; unwatch ends the stream and
// waits for the follower.
func watchAll(ctx context.Context, api pb.HealthCheckerClient, n int) (tr *tracker, unwatch func(), err error) {
	wctx, cancel := context.WithCancel(ctx)
	stream, err := api.WatchTransitions(wctx, &pb.WatchTransitionsRequest{})
	if err != nil {
		cancel()
		return nil, nil, err
	}
	tr = newTracker(n)
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		tr.follow(stream)
	}()
	return tr, func() {
		cancel()
		<-followed
	}, nil
}

func newTracker(n int) *tracker {
	return &tracker{healthy: make([]atomic.Bool, n), downAt: newStamps(n), upAt: newStamps(n)}
}

// apply records one transition received at now.
func (t *tracker) apply(tr *pb.Transition, now time.Time) {
	i := targetIndex(tr.GetTarget())
	if i < 0 || i >= len(t.healthy) {
		return
	}
	t.events.Add(1)
	switch tr.GetTo() {
	case pb.State_STATE_HEALTHY, pb.State_STATE_SUSPECT:
		t.upAt.set(i, now)
		if !t.healthy[i].Swap(true) {
			t.nHealthy.Add(1)
		}
	case pb.State_STATE_UNHEALTHY:
		t.downAt.set(i, now)
		if t.healthy[i].Swap(false) {
			t.nHealthy.Add(-1)
		}
	}
}

// follow reads the stream until it ends.
func (t *tracker) follow(stream grpc.ServerStreamingClient[pb.WatchTransitionsResponse]) {
	for {
		resp, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.err.Store(&err)
			}
			return
		}
		if tr := resp.GetTransition(); tr != nil {
			t.apply(tr, time.Now())
		}
		t.rev.Store(resp.GetRevision())
	}
}
