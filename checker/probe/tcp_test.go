package probe

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestTCPConnectsAndCloses shows a probe passes on connect and closes the
// connection: the server reads EOF, not data.
func TestTCPConnectsAndCloses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	read := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			read <- err
			return
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = c.Read(make([]byte, 1))
		read <- err
	}()
	p := newProber(t, newTestFactory(t), Spec{TCP: &TCPSpec{Address: ln.Addr().String()}})
	if err := p.Probe(timeoutCtx(t, 10*time.Second)); err != nil {
		t.Fatalf("Probe() = %v, want nil", err)
	}
	if err := <-read; err != io.EOF {
		t.Errorf("server read %v, want io.EOF (the probe closed its connection)", err)
	}
}

// TestTCPSilentServerPasses: a TCP probe only asks whether the port accepts
// connections, so a server that never says anything passes.
func TestTCPSilentServerPasses(t *testing.T) {
	p := newProber(t, newTestFactory(t), Spec{TCP: &TCPSpec{Address: silentAddr(t)}})
	if err := p.Probe(timeoutCtx(t, 10*time.Second)); err != nil {
		t.Errorf("Probe() = %v, want nil", err)
	}
}

func TestTCPRefused(t *testing.T) {
	p := newProber(t, newTestFactory(t), Spec{TCP: &TCPSpec{Address: refusedAddr(t)}})
	err := p.Probe(timeoutCtx(t, 10*time.Second))
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Probe() = %v, want connection refused", err)
	}
	if d := Describe(err); d != "connection refused" {
		t.Errorf("Describe = %q, want %q", d, "connection refused")
	}
}

// TestTCPContextEnded: a connect on loopback cannot be made to hang, so the
// deadline and cancellation are shown with contexts that have already ended;
// the dial must not start, and the error must say why.
func TestTCPContextEnded(t *testing.T) {
	p := newProber(t, newTestFactory(t), Spec{TCP: &TCPSpec{Address: silentAddr(t)}})

	err := probeWithin(t, timeoutCtx(t, -time.Second), p)
	if !errors.Is(err, context.DeadlineExceeded) || Describe(err) != "timeout" {
		t.Errorf("Probe(expired) = %v (Describe %q), want a timeout", err, Describe(err))
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := p.Probe(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Probe(cancelled) = %v, want it to wrap context.Canceled", err)
	}
}
