//go:build unix

package server_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeprobe"
	"github.com/pulsehealth/pulse/checker/probe"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/server"
)

// BenchmarkWatchTransitionsFanOut: one transition delivered to 1,000
// WatchTransitions streams over one bufconn connection, as pulsed's
// subscribers get it: each op flips one target (a RunRound) and ends when
// every stream has received the transition. Client and server share the process, so the
// figures include the clients' Recv; "ns/delivery" is ns/op / 1,000, and
// "cpu-ns/delivery" the process's CPU time (user and system, both sides)
// per delivery, which varies less than wall time on a shared machine.
// "groups=2" has half the streams watch another group: they receive
// nothing, and the op waits for the 500 that match. "tcp,conns=10" puts
// the 1,000 streams on 10 loopback TCP connections, as pulse-bench's
// subscribers are, so its figures include the system calls.
func BenchmarkWatchTransitionsFanOut(b *testing.B) {
	for _, groups := range []int{1, 2} {
		b.Run(fmt.Sprintf("groups=%d", groups), func(b *testing.B) { benchFanOut(b, groups, 0) })
	}
	b.Run("tcp,conns=10", func(b *testing.B) { benchFanOut(b, 1, 10) })
}

// benchFanOut delivers one transition per op to 1,000 streams: over one
// bufconn connection when conns is 0, otherwise over conns loopback TCP
// connections.
func benchFanOut(b *testing.B, groups, conns int) {
	const streams = 1000
	var up atomic.Bool
	c, err := checker.New(checker.Config{
		Defaults:             checker.Defaults{Interval: 2 * time.Second, Timeout: time.Second, Rise: 1, Fall: 1},
		MaxUnhealthyFraction: 1,
		NewProber: func(probe.Spec) (checker.Prober, error) {
			return fakeprobe.Func(func(context.Context) error {
				if up.Load() {
					return nil
				}
				return errBenchDown
			}), nil
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	gs, _ := server.NewGRPCServer(server.New(c), server.Options{Logger: nilLogger()})
	var (
		lis    net.Listener
		target string
		opts   = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	)
	if conns == 0 {
		bl := bufconn.Listen(1 << 20)
		lis, target, conns = bl, "passthrough:///bufnet", 1
		opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return bl.DialContext(ctx) }))
	} else {
		if lis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			b.Fatal(err)
		}
		target = lis.Addr().String()
	}
	go gs.Serve(lis)
	clients := make([]pb.HealthCheckerClient, conns)
	for i := range clients {
		conn, err := grpc.NewClient(target, opts...)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		clients[i] = pb.NewHealthCheckerClient(conn)
	}
	defer func() {
		c.Close()
		gs.GracefulStop()
	}()
	if _, err := clients[0].AddTarget(b.Context(), &pb.AddTargetRequest{Target: tcpTarget("web-1", "edge")}); err != nil {
		b.Fatal(err)
	}

	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	got := make(chan struct{}, streams)
	done := make(chan struct{}, streams)
	matching := 0
	for i := range streams {
		group := "edge"
		if i%groups != 0 {
			group = "other"
		} else {
			matching++
		}
		w, err := clients[i%conns].WatchTransitions(ctx, &pb.WatchTransitionsRequest{Group: group, StartRevision: c.Revision()})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := w.Header(); err != nil {
			b.Fatal(err)
		}
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				ev, err := w.Recv()
				if err != nil {
					return
				}
				if ev.GetTransition() != nil {
					got <- struct{}{}
				}
			}
		}()
	}
	defer func() {
		cancel()
		for range streams {
			<-done
		}
	}()

	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for i := 0; b.Loop(); i++ {
		up.Store(i%2 == 0)
		if trs := c.RunRound(b.Context()); len(trs) != 1 {
			b.Fatalf("round %d: %d transitions, want 1", i, len(trs))
		}
		for range matching {
			<-got
		}
	}
	cpu := cpuTime(b) - cpu0
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(matching), "ns/delivery")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/float64(matching), "cpu-ns/delivery")
}

var errBenchDown = fmt.Errorf("connection refused")

// cpuTime returns the CPU time the process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
