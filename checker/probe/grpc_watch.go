package probe

import (
	"context"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// grpcWatch follows a gRPC prober's channel for WatchConn: one goroutine
// per watched prober, waiting for the channel's state to change.
type grpcWatch struct {
	lost atomic.Pointer[func(string)]
	// up: the channel has been ready since the last report. Set when the
	// watcher sees READY and when a probe gets an answer: a channel can go
	// READY and leave it again before the watcher reads its state, and the
	// loss must be told all the same.
	up atomic.Bool

	mu      sync.Mutex // protects the fields below
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{} // closed when the goroutine returns; nil before it starts
}

// WatchConn makes p call lost with LostChannel, from a goroutine of its
// own, each time its channel leaves READY (the connection was closed,
// reset or sent away by the server), a probe running or not. Reconnect
// attempts that fail (CONNECTING, TRANSIENT_FAILURE) tell nothing more:
// only the loss of a ready connection does. gRPC also idles a channel
// unused for 30 minutes, which is told too: at most one extra probe for a
// target probed that rarely. The goroutine ends with Close. A second call
// replaces lost; lost must not block.
func (p *grpcProber) WatchConn(lost func(reason string)) {
	p.watch.lost.Store(&lost)
	w := &p.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped || w.done != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel, w.done = cancel, make(chan struct{})
	go w.run(ctx, p.conn)
}

// run reports each time conn leaves READY, until ctx ends.
func (w *grpcWatch) run(ctx context.Context, conn *grpc.ClientConn) {
	defer close(w.done)
	last := conn.GetState()
	if last == connectivity.Ready {
		w.up.Store(true)
	}
	for conn.WaitForStateChange(ctx, last) {
		st := conn.GetState()
		switch st {
		case connectivity.Ready:
			w.up.Store(true)
		case connectivity.Shutdown:
		default:
			if w.up.Swap(false) {
				if lost := w.lost.Load(); lost != nil {
					(*lost)(LostChannel)
				}
			}
		}
		last = st
	}
}

// stop ends the goroutine, if it runs, and waits for it; no WatchConn
// starts one afterwards.
func (w *grpcWatch) stop() {
	w.mu.Lock()
	w.stopped = true
	cancel, done := w.cancel, w.done
	w.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}
