package checker

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// ProbeNow's rate is per client, under a cap for all clients together; a
// refused round takes nothing from either bucket.
func TestDemandLimiterPerClientAndTotal(t *testing.T) {
	d := newDemandLimiter()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for i := range ProbeNowBurst {
		if err := d.takeLocked("a", now); err != nil {
			t.Fatalf("a's round %d: %v", i+1, err)
		}
	}
	var re *RateError
	if err := d.takeLocked("a", now); !errors.As(err, &re) || re.Scope != "per client" || re.RetryAfter != time.Second {
		t.Fatalf("a over its burst: %v, want the per-client rate error", err)
	}
	if err := d.takeLocked("b", now); err != nil {
		t.Errorf("b after a spent its budget: %v", err)
	}
	// Every client together: ProbeNowTotalBurst rounds in all.
	for i := ProbeNowBurst + 1; i < ProbeNowTotalBurst; i++ {
		if err := d.takeLocked(fmt.Sprint("c", i), now); err != nil {
			t.Fatalf("round %d in all: %v", i+1, err)
		}
	}
	err := d.takeLocked("late", now)
	if !errors.As(err, &re) || re.Scope != "for all clients together" || re.PerSecond != ProbeNowTotalRate {
		t.Fatalf("a round over the total: %v, want the total rate error", err)
	}
	if got := err.Error(); got != "rate limit exceeded: at most 5 probe-now rounds a second for all clients together (burst 20); retry in 200ms" {
		t.Errorf("the total's error reads %q", got)
	}
	if tokens := d.clients["late"].TokensAt(now); tokens != ProbeNowBurst {
		t.Errorf("a round refused by the total took from its client: %g tokens left", tokens)
	}
	now = now.Add(time.Second / ProbeNowTotalRate)
	if err := d.takeLocked("late", now); err != nil {
		t.Errorf("late, once the total refilled one round: %v", err)
	}
}

// The limiter remembers at most MaxProbeNowClients clients: a new one past
// that forgets the clients whose budget has refilled, and keeps the rest.
func TestDemandLimiterIsBounded(t *testing.T) {
	d := newDemandLimiter()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	step := time.Second / ProbeNowTotalRate // the total's rate
	for i := range MaxProbeNowClients {
		if err := d.takeLocked(fmt.Sprint("client-", i), now); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		now = now.Add(step)
	}
	if n := len(d.clients); n != MaxProbeNowClients {
		t.Fatalf("%d clients remembered, want %d", n, MaxProbeNowClients)
	}
	if err := d.takeLocked("one-more", now); err != nil {
		t.Fatal(err)
	}
	// Within the last second (5 rounds at the total's rate) the clients
	// have not refilled; all older ones have and are forgotten.
	if n := len(d.clients); n > 10 {
		t.Errorf("%d clients remembered after making room, want the few not refilled", n)
	}
	last := fmt.Sprint("client-", MaxProbeNowClients-1)
	if err := d.takeLocked(last, now); err != nil {
		t.Fatal(err)
	}
	if tokens := d.clients[last].TokensAt(now); tokens >= ProbeNowBurst-1 {
		t.Errorf("the latest client was forgotten: %g tokens, want its spent budget kept", tokens)
	}

	// Should every bucket still be spent, the bound holds all the same.
	d = newDemandLimiter()
	for i := range MaxProbeNowClients {
		b := rate.NewLimiter(ProbeNowRate, ProbeNowBurst)
		b.AllowN(now, 1)
		d.clients[fmt.Sprint("busy-", i)] = b
	}
	if err := d.takeLocked("new", now); err != nil {
		t.Fatal(err)
	}
	if n := len(d.clients); n != MaxProbeNowClients {
		t.Errorf("%d clients remembered with every bucket spent, want %d", n, MaxProbeNowClients)
	}
}
