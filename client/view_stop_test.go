package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/client"
)

// A view whose filter pulsed refuses stops at once: WaitSynced, Err and
// Done say so, rather than leaving the caller to wait for its deadline.
func TestViewStopsOnARefusedFilter(t *testing.T) {
	e := newEnv(t, 1, checker.Config{})
	c := e.client(t)
	v := c.View(t.Context(), client.Filter{Names: []string{"bad name!"}})
	defer v.Close()
	err := v.WaitSynced(within(t))
	if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "stopped before its first snapshot") {
		t.Fatalf("WaitSynced = %v, want the view stopped with ErrInvalidArgument", err)
	}
	select {
	case <-v.Done():
	default:
		t.Fatal("Done is not closed after the view stopped")
	}
	if !errors.Is(v.Err(), client.ErrInvalidArgument) {
		t.Errorf("Err = %v, want ErrInvalidArgument", v.Err())
	}
}

// A view follows as long as its context: when it ends the view stops, and
// Done and Err say so; until then Err is nil.
func TestViewStopsWithItsContext(t *testing.T) {
	e := newEnv(t, 1, checker.Config{})
	c := e.client(t)
	ctx, cancel := context.WithCancel(t.Context())
	v := c.View(ctx, client.Filter{Group: "edge"})
	defer v.Close()
	if err := v.WaitSynced(within(t)); err != nil {
		t.Fatal(err)
	}
	if v.Err() != nil {
		t.Fatalf("Err = %v while the view follows, want nil", v.Err())
	}
	cancel()
	select {
	case <-v.Done():
	case <-within(t).Done():
		t.Fatal("the view did not stop when its context ended")
	}
	if !errors.Is(v.Err(), context.Canceled) {
		t.Errorf("Err = %v, want context.Canceled", v.Err())
	}
}

// While pulsed cannot be reached, WaitSynced's deadline comes with the
// stream's last error, so that the caller learns why.
func TestWaitSyncedSaysWhyItWaited(t *testing.T) {
	e := newEnv(t, 1, checker.Config{})
	c := e.client(t)
	e.cuts.cut(true)
	defer e.cuts.heal()
	v := c.View(t.Context(), client.Filter{Group: "edge"})
	defer v.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	err := v.WaitSynced(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), "the stream's last error") {
		t.Errorf("WaitSynced = %v, want the deadline with the stream's last error (unavailable)", err)
	}
}

// After Close, calls and views say the client is closed, not that the
// caller's context was cancelled.
func TestClosedClient(t *testing.T) {
	e := newEnv(t, 1, checker.Config{})
	c := e.client(t)
	c.Close()
	_, err := c.State(t.Context(), "web-1")
	if !errors.Is(err, client.ErrClosed) || errors.Is(err, context.Canceled) {
		t.Errorf("State after Close = %v, want ErrClosed and not context.Canceled", err)
	}
	v := c.View(t.Context(), client.Filter{Group: "edge"})
	defer v.Close()
	if err := v.WaitSynced(within(t)); !errors.Is(err, client.ErrClosed) {
		t.Errorf("WaitSynced of a view of a closed client = %v, want ErrClosed", err)
	}
}
