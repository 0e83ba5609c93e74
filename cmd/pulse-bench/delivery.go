package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// subscribers are many WatchTransitions streams, each recording how long
// each transition took from its own timestamp to reach it.
//
// They stand for as many separate subscribers, so they share nothing while
// they receive: each records into its own subscriber, and its stack is
// grown before its first message and kept (see follow).
type subscribers struct {
	conns     []*grpc.ClientConn
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	subs      []subscriber
	failed    atomic.Int64 // streams that ended with an error
	lastErr   atomic.Pointer[error]
	closeOnce sync.Once
}

// subscriber is one stream's record.
type subscriber struct {
	got     atomic.Int64    // len(samples), stored after each append
	samples []time.Duration // written by the stream's goroutine; read after Close
}

// subscribe opens n streams resuming after rev, perConn on each client
// connection. Only transitions to healthy stamped at or after since are
// recorded: a resumed stream may first replay older events.
func subscribe(ctx context.Context, addr string, n, perConn int, rev uint64, since time.Time) (*subscribers, error) {
	ctx, cancel := context.WithCancel(ctx)
	s := &subscribers{cancel: cancel, subs: make([]subscriber, n)}
	var conn *grpc.ClientConn
	for i := range n {
		if i%perConn == 0 {
			c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				s.Close()
				return nil, err
			}
			s.conns = append(s.conns, c)
			conn = c
		}
		stream, err := pb.NewHealthCheckerClient(conn).WatchTransitions(ctx, &pb.WatchTransitionsRequest{StartRevision: rev})
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("subscriber %d: %w", i, err)
		}
		s.wg.Go(func() { s.follow(ctx, &s.subs[i], stream, since) })
	}
	return s, nil
}

// follow receives stream's events until it ends, recording into sub.
//
// Its frame holds a pad, so that the stack grows once, here, on entry, to
// what receiving and decoding a message needs, and the GC, which halves an
// idle goroutine's stack when it uses less than a quarter of it, leaves it
// so. Without it, 1,000 subscribers in one process grew their stacks deep
// in the decoding of the same event, all at once, and the first event after
// subscribing reached the last of them in 30-49 ms against 9-31 ms for the
// events after it: an effect of hosting many subscribers in one process,
// which separate subscribers do not share. A pad of 4 KiB, or growing the
// stack without a pad, changed nothing (BENCHMARKS.md, "Delivery without
// the harness's own costs").
//
//go:noinline
func (s *subscribers) follow(ctx context.Context, sub *subscriber, stream grpc.ServerStreamingClient[pb.WatchTransitionsResponse], since time.Time) {
	var pad [8 << 10]byte
	keep(pad[:])
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() == nil {
				s.failed.Add(1)
				s.lastErr.Store(&err)
			}
			return
		}
		now := time.Now()
		if tr := resp.GetTransition(); tr != nil && tr.GetTo() == pb.State_STATE_HEALTHY && !tr.GetTime().AsTime().Before(since) {
			sub.samples = append(sub.samples, now.Sub(tr.GetTime().AsTime()))
			sub.got.Store(int64(len(sub.samples)))
		}
	}
}

// keep makes its argument's array a part of its caller's frame.
//
//go:noinline
func keep([]byte) {}

// minReceived returns the fewest transitions any subscriber has received.
func (s *subscribers) minReceived() int {
	least := -1
	for i := range s.subs {
		if n := int(s.subs[i].got.Load()); least < 0 || n < least {
			least = n
		}
	}
	return max(least, 0)
}

// Close ends every stream and connection and waits for the readers. It is
// idempotent.
func (s *subscribers) Close() {
	s.closeOnce.Do(func() {
		s.cancel()
		for _, c := range s.conns {
			_ = c.Close()
		}
		s.wg.Wait()
	})
}

// all returns every sample of every subscriber; only after Close.
func (s *subscribers) all() []time.Duration {
	var out []time.Duration
	for i := range s.subs {
		out = append(out, s.subs[i].samples...)
	}
	return out
}

// spread returns, for each of the first n recoveries, its first and last
// receipt over every subscriber; only after Close. Recoveries delivered
// one at a time arrive in the same order on every stream, so a
// subscriber's k-th sample is the k-th recovery.
func (s *subscribers) spread(n int) (first, last []time.Duration) {
	first, last = make([]time.Duration, n), make([]time.Duration, n)
	for i := range s.subs {
		x := s.subs[i].samples
		for k := range min(n, len(x)) {
			if first[k] == 0 || x[k] < first[k] {
				first[k] = x[k]
			}
			last[k] = max(last[k], x[k])
		}
	}
	return first, last
}

// healAndWait heals the targets heal and waits until every subscriber has
// received their recoveries, or a bound on the time that takes. With
// o.DeliverySerial it heals them one at a time, each once every subscriber
// has received the one before, so that each transition is delivered alone;
// otherwise all at once. all is false when the bound passed first.
func healAndWait(ctx context.Context, o Options, farm *Farm, subs *subscribers, heal []int, interval time.Duration) (all bool, err error) {
	bound := time.Duration(o.Rise+2)*interval + 10*time.Second // the rise, a probe's phase and a margin
	if !o.DeliverySerial {
		if _, err := farm.SetMode(heal, ModeOK); err != nil {
			return false, err
		}
		return waitUntil(ctx, time.Now().Add(bound), func() bool { return subs.minReceived() >= len(heal) })
	}
	for k := range heal {
		if _, err := farm.SetMode(heal[k:k+1], ModeOK); err != nil {
			return false, err
		}
		all, err := waitUntil(ctx, time.Now().Add(bound), func() bool { return subs.minReceived() > k })
		if err != nil || !all {
			return all, err
		}
	}
	return true, nil
}

// fmtSpreads formats each recovery's first and last receipt as
// "first-last", comma-separated.
func fmtSpreads(first, last []time.Duration) string {
	parts := make([]string, len(first))
	for i := range first {
		parts[i] = fmtDur(first[i]) + "-" + fmtDur(last[i])
	}
	return strings.Join(parts, ", ")
}
