package client

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestBackoff(t *testing.T) {
	f := &follower{c: &Client{opts: options{minBackoff: DefaultMinBackoff, maxBackoff: DefaultMaxBackoff}}}
	for n := range 40 {
		seen := map[time.Duration]bool{}
		for range 20 {
			d := f.backoff(n)
			hi := min(DefaultMaxBackoff, DefaultMinBackoff<<min(n, 20))
			if d > hi || d < hi/2 {
				t.Fatalf("backoff(%d) = %v; want in [%v, %v]", n, d, hi/2, hi)
			}
			seen[d] = true
		}
		// Every attempt is jittered, the first included: clients that lost
		// pulsed together do not come back in step.
		if len(seen) < 2 {
			t.Fatalf("backoff(%d) gave %v 20 times: not jittered", n, seen)
		}
	}
}

func TestNamedRevision(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want uint64
		ok   bool
	}{
		{status.Error(codes.ResourceExhausted, "watcher fell behind: the last revision delivered is 42; watch again with start_revision 42"), 42, true},
		{status.Error(codes.ResourceExhausted, "the last revision delivered is 7"), 7, true},
		{status.Error(codes.ResourceExhausted, "watch again"), 0, false},
		{context.Canceled, 0, false},
	} {
		if got, ok := namedRevision(tc.err); got != tc.want || ok != tc.ok {
			t.Errorf("namedRevision(%v) = %d, %v; want %d, %v", tc.err, got, ok, tc.want, tc.ok)
		}
	}
}

func TestShutdownRevision(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want uint64
		ok   bool
	}{
		{status.Error(codes.Unavailable, "pulsed is shutting down; reconnect and resume with start_revision 42"), 42, true},
		{status.Error(codes.Unavailable, "pulsed is shutting down; retry against a running instance"), 0, false},
		{status.Error(codes.Unavailable, "no message from pulsed for 1m30s (idle timeout): watch again with start_revision 7"), 0, false},
		{context.Canceled, 0, false},
	} {
		if got, ok := shutdownRevision(tc.err); got != tc.want || ok != tc.ok {
			t.Errorf("shutdownRevision(%v) = %d, %v; want %d, %v", tc.err, got, ok, tc.want, tc.ok)
		}
	}
}
