package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// registerOptions says how to measure registering a fleet.
type registerOptions struct {
	Targets  int
	Workers  int           // AddTarget calls in flight at once, for the one-at-a-time way
	Interval time.Duration // the targets' interval: their probes run during the registration
	Bin      string
	Extra    []string // more pulsed flags
	WorkDir  string
	Log      io.Writer
}

// registerResult is one way of registering the fleet, on a fresh pulsed
// with the embedded store.
type registerResult struct {
	Way      string
	Calls    int
	Elapsed  time.Duration
	Listed   int // targets ListTargets showed after the last call returned
	Restored int // targets a restart on the same data directory loaded
}

// runRegister registers o.Targets TCP targets of a loopback listener that
// accepts and closes, first one AddTarget call each (o.Workers at a time),
// then with AddTargets batches, each on a fresh pulsed with its own data
// directory; it counts the targets after the last call and after a
// restart.
func runRegister(ctx context.Context, o registerOptions) ([]registerResult, error) {
	ln, err := acceptAndClose()
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	targets := make([]*pb.Target, o.Targets)
	for i := range targets {
		targets[i] = &pb.Target{Name: targetName(i), Group: "g" + strconv.Itoa(i%100),
			Probe: &pb.Target_Tcp{Tcp: &pb.TcpProbe{Address: ln.Addr().String()}}}
	}
	var res []registerResult
	for _, way := range []string{"AddTarget", "AddTargets"} {
		r, err := registerOnce(ctx, o, way, targets)
		if err != nil {
			return res, fmt.Errorf("%s: %w", way, err)
		}
		res = append(res, r)
	}
	return res, nil
}

func registerOnce(ctx context.Context, o registerOptions, way string, targets []*pb.Target) (registerResult, error) {
	r := registerResult{Way: way}
	dir := filepath.Join(o.WorkDir, "register-"+way)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	args := append([]string{"-listen", "127.0.0.1:0", "-data-dir", dir, "-http-listen", "", "-rate-limit", "0",
		"-max-targets", "0", "-max-targets-per-group", "0", "-interval", o.Interval.String(), "-timeout", "1s"}, o.Extra...)
	p, err := startPulsed(ctx, o.Bin, args)
	if err != nil {
		return r, err
	}
	fmt.Fprintf(o.Log, "registering %d targets with %s\n", len(targets), way)
	start := time.Now()
	if way == "AddTarget" {
		r.Calls, err = addOneByOne(ctx, p.api, targets, o.Workers)
	} else {
		r.Calls, err = addInBatches(ctx, p.api, targets)
	}
	r.Elapsed = time.Since(start)
	if err == nil {
		r.Listed, err = countTargets(ctx, p.api)
	}
	p.Close()
	if err != nil {
		return r, err
	}
	// Durable when acknowledged: a restart on the same directory has them.
	if p, err = startPulsed(ctx, o.Bin, args); err != nil {
		return r, err
	}
	defer p.Close()
	r.Restored, err = countTargets(ctx, p.api)
	return r, err
}

func addOneByOne(ctx context.Context, api pb.HealthCheckerClient, targets []*pb.Target, workers int) (int, error) {
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(targets) || ctx.Err() != nil {
					return
				}
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_, err := api.AddTarget(cctx, &pb.AddTargetRequest{Target: targets[i]})
				cancel()
				if err != nil {
					once.Do(func() { firstErr = fmt.Errorf("AddTarget %s: %w", targets[i].GetName(), err) })
					return
				}
			}
		})
	}
	wg.Wait()
	return len(targets), firstErr
}

// addInBatches sends the targets in AddTargets calls as the Go client's
// AddMany does: at most 10,000 targets and 512 KiB a call.
func addInBatches(ctx context.Context, api pb.HealthCheckerClient, targets []*pb.Target) (int, error) {
	calls := 0
	req, size := &pb.AddTargetsRequest{}, 0
	send := func() error {
		calls++
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		resp, err := api.AddTargets(cctx, req)
		if err != nil {
			return err
		}
		if resp.GetRefused() > 0 {
			for _, r := range resp.GetResults() {
				if r.GetCode() != "" {
					return fmt.Errorf("%s refused: %s", r.GetName(), r.GetError())
				}
			}
		}
		req, size = &pb.AddTargetsRequest{}, 0
		return nil
	}
	for _, t := range targets {
		n := proto.Size(t) + 4
		if len(req.Targets) == 10000 || (len(req.Targets) > 0 && size+n > 512<<10) {
			if err := send(); err != nil {
				return calls, err
			}
		}
		req.Targets = append(req.Targets, t)
		size += n
	}
	return calls, send()
}

func countTargets(ctx context.Context, api pb.HealthCheckerClient) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	l, err := api.ListTargets(cctx, &pb.ListTargetsRequest{}, grpc.MaxCallRecvMsgSize(1<<30))
	if err != nil {
		return 0, err
	}
	return len(l.GetTargets()), nil
}

// writeRegister prints the registration figures as Markdown.
func writeRegister(w io.Writer, command string, o registerOptions, res []registerResult) {
	fmt.Fprintf(w, "`%s`\n\n", command)
	fmt.Fprintf(w, "%d TCP targets at %v, embedded store (bbolt), one pulsed each way; AddTarget with %d calls in flight.\n\n", o.Targets, o.Interval, o.Workers)
	fmt.Fprintln(w, "| way | calls | time | targets per second | listed after | after a restart |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
	for _, r := range res {
		fmt.Fprintf(w, "| %s | %d | %.2f s | %.0f | %d | %d |\n", r.Way, r.Calls, r.Elapsed.Seconds(),
			float64(o.Targets)/r.Elapsed.Seconds(), r.Listed, r.Restored)
	}
	if len(res) == 2 && res[1].Elapsed > 0 {
		fmt.Fprintf(w, "\nAddTargets took %.3fx the time of one AddTarget each.\n", res[1].Elapsed.Seconds()/res[0].Elapsed.Seconds())
	}
}

// acceptAndClose returns a loopback listener that accepts every connection
// and closes it, a live backend for TCP checks, until it is closed.
func acceptAndClose() (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln, nil
}
