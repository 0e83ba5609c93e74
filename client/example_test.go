package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/probe"
	"github.com/pulsehealth/pulse/client"
	"github.com/pulsehealth/pulse/server"
)

// examplePulsed starts an in-process pulsed on loopback whose probes pass
// while up says so, and probes every target once each time probe is called.
// stop stops it.
func examplePulsed() (addr string, probeAll func(up bool), stop func()) {
	var up atomic.Bool
	c, err := checker.New(checker.Config{
		NewProber: func(probe.Spec) (checker.Prober, error) {
			return proberFunc(func(context.Context) error {
				if up.Load() {
					return nil
				}
				return errors.New("connection refused")
			}), nil
		},
		Defaults: checker.Defaults{Interval: time.Hour, Timeout: time.Second, Rise: 1, Fall: 1},
	})
	if err != nil {
		panic(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	gs, _ := server.NewGRPCServer(server.New(c), server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	go gs.Serve(lis)
	return lis.Addr().String(),
		func(v bool) { up.Store(v); c.RunRound(context.Background()) },
		func() { c.Close(); gs.GracefulStop() }
}

func Example() {
	addr, probe, stop := examplePulsed()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := client.New(ctx, []string{addr}) // the token, if any, from PULSE_TOKEN
	if err != nil {
		panic(err)
	}
	defer c.Close()
	if _, _, err := c.Add(ctx, client.Target{Name: "web-1", Group: "edge", TCP: &client.TCPProbe{Address: "10.0.0.1:8080"}}); err != nil {
		panic(err)
	}

	v := c.View(ctx, client.Filter{Group: "edge"})
	defer v.Close()
	changed := make(chan client.Change, 10)
	v.Subscribe(func(ch client.Change) { changed <- ch })
	if err := v.WaitSynced(ctx); err != nil {
		panic(err)
	}
	fmt.Println(<-changed)

	probe(true) // web-1 passes its probe
	fmt.Println(<-changed)
	for _, st := range v.Routable("edge") {
		addr, _ := st.Target.Address()
		fmt.Println("route to", st.Target.Name, addr)
	}
	// Output:
	// web-1: absent -> unhealthy
	// web-1: unhealthy -> healthy
	// route to web-1 10.0.0.1:8080
}

func ExampleClient_State() {
	addr, _, stop := examplePulsed()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, []string{addr})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	_, err = c.State(ctx, "web-9")
	fmt.Println(errors.Is(err, client.ErrNotFound))
	_, _, err = c.Add(ctx, client.Target{Name: "web-9", TCP: &client.TCPProbe{Address: "10.0.0.9:80"}, Fall: 5000})
	var cerr *client.Error
	if errors.As(err, &cerr) {
		field, _, _ := strings.Cut(cerr.Message, ":")
		fmt.Println(errors.Is(err, client.ErrInvalidArgument), cerr.Code, field)
	}
	// Output:
	// true
	// true InvalidArgument target.fall
}

func ExampleClient_Watch() {
	addr, probe, stop := examplePulsed()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, []string{addr})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	c.Add(ctx, client.Target{Name: "web-1", TCP: &client.TCPProbe{Address: "10.0.0.1:80"}})

	for ev := range c.Watch(ctx, client.Filter{}) {
		switch ev.Kind {
		case client.EventSnapshot:
			fmt.Println("snapshot of", len(ev.Snapshot), "target(s), re-snapshot:", ev.Resnapshot)
			probe(true)
		case client.EventTransition:
			fmt.Println(ev.Transition.Text)
			cancel() // the channel closes
		case client.EventDisconnected:
			// The follower resumes by itself after ev.RetryIn.
		}
	}
	// Output:
	// snapshot of 1 target(s), re-snapshot: false
	// web-1: unhealthy -> healthy
}
