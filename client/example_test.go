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
	"github.com/pulsehealth/pulse/checker/fakeprobe"
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
			return fakeprobe.Func(func(context.Context) error {
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

func ExampleClient_Update() {
	addr, _, stop := examplePulsed()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, []string{addr})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	c.Add(ctx, client.Target{Name: "web-1", Group: "edge", Interval: 2 * time.Second, HTTP: &client.HTTPProbe{
		URL: "http://10.0.0.1:8080/healthz", Headers: map[string]string{"Authorization": "Bearer s3cret"},
	}})

	// One field, by its name in pulse.proto: the rest of the spec, the
	// state and the streaks stay.
	prev, st, err := c.Update(ctx, client.Target{Name: "web-1", Interval: 5 * time.Second}, "interval")
	if err != nil {
		panic(err)
	}
	fmt.Println(prev.Interval, "->", st.Target.Interval)

	// Read, modify, write back: the secret reads as "<redacted>", and
	// writing that back keeps the stored one.
	st, _ = c.State(ctx, "web-1")
	t := st.Target
	t.HTTP.BodyContains = "ready"
	if _, st, err = c.Update(ctx, t, "http"); err != nil {
		panic(err)
	}
	fmt.Println(st.Target.HTTP.BodyContains, st.Target.HTTP.Headers["Authorization"], st.Target.Group)

	_, _, err = c.Update(ctx, client.Target{Name: "web-1"}, "intreval")
	fmt.Println(errors.Is(err, client.ErrInvalidArgument))
	// Output:
	// 2s -> 5s
	// ready <redacted> edge
	// true
}

func ExampleClient_SetMode() {
	addr, probe, stop := examplePulsed()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, []string{addr})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	for _, name := range []string{"web-1", "web-2", "web-3"} {
		c.Add(ctx, client.Target{Name: name, Group: "edge", TCP: &client.TCPProbe{Address: name + ":80"}})
	}
	probe(true) // all healthy

	// Drain web-1 for a deploy: still probed, routed no new requests,
	// back to active by itself in an hour at the latest.
	sts, err := c.SetMode(ctx, client.ModeRequest{Target: "web-1", Mode: client.ModeDraining, Reason: "deploy 4711", Until: time.Now().Add(time.Hour)})
	if err != nil {
		panic(err)
	}
	fmt.Println(sts[0].Target.Name, sts[0].Mode, sts[0].ModeReason, "routable:", sts[0].Routable)

	// Take web-3 away for good: drained for 5 minutes, then removed.
	removeAt, ok, err := c.Drain(ctx, "web-3", 5*time.Minute)
	if err != nil {
		panic(err)
	}
	fmt.Println(ok, time.Until(removeAt).Round(time.Minute))

	names, _ := c.Healthy(ctx, "edge")
	fmt.Println(names)
	// Output:
	// web-1 draining deploy 4711 routable: false
	// true 5m0s
	// [web-2]
}

func ExampleClient_ProbeNow() {
	addr, _, stop := examplePulsed()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, []string{addr})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	c.Add(ctx, client.Target{Name: "web-1", Group: "edge", TCP: &client.TCPProbe{Address: "10.0.0.1:80"}})

	r, err := c.ProbeNow(ctx, "edge")
	if errors.Is(err, client.ErrResourceExhausted) {
		return // over pulsed's rate of rounds: the message says when to retry
	} else if err != nil {
		panic(err)
	}
	for _, res := range r.Results {
		fmt.Println(res.Name, res.State, res.Result.Error)
	}
	// Output:
	// web-1 unhealthy connection refused
}

func ExampleClient_AddMany() {
	addr, _, stop := examplePulsed()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, []string{addr})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	ts := []client.Target{
		{Name: "web-1", Group: "edge", TCP: &client.TCPProbe{Address: "10.0.0.1:80"}},
		{Name: "web-2", Group: "edge", TCP: &client.TCPProbe{Address: "10.0.0.2:80"}},
		{Name: "web-3", Group: "edge", TCP: &client.TCPProbe{Address: "10.0.0.3:80"}, Fall: 5000},
	}
	res, err := c.AddMany(ctx, ts)
	if err != nil {
		panic(err) // a call failed whole; res holds the results of those before it
	}
	// A target refused is refused alone: the others are registered.
	for _, r := range res {
		if r.Err != nil {
			fmt.Println(r.Name, "refused:", r.Err)
			continue
		}
		fmt.Println(r.Name, "created:", r.Created)
	}
	// Output:
	// web-1 created: true
	// web-2 created: true
	// web-3 refused: pulse: AddTargets: InvalidArgument: targets[2].fall: must be between 1 and 1000, got 5000
}

func ExampleClient_View() {
	addr, probe, stop := examplePulsed()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, []string{addr})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	for _, name := range []string{"web-1", "web-2"} {
		c.Add(ctx, client.Target{Name: name, Group: "edge", TCP: &client.TCPProbe{Address: name + ":80"}})
	}
	c.Add(ctx, client.Target{Name: "db-1", Group: "store", TCP: &client.TCPProbe{Address: "db-1:5432"}})
	probe(true) // all healthy

	// The view follows group edge until ctx ends or Close; once synced,
	// Get, List and Routable answer from memory, without a call.
	v := c.View(ctx, client.Filter{Group: "edge"})
	defer v.Close()
	if err := v.WaitSynced(ctx); err != nil {
		panic(err)
	}
	st, ok := v.Get("web-1")
	fmt.Println(st.Target.Name, st.State, ok)
	_, ok = v.Get("db-1")
	fmt.Println("db-1 in the view:", ok)
	for _, st := range v.Routable("edge") {
		fmt.Println("route to", st.Target.Name)
	}
	// Output:
	// web-1 healthy true
	// db-1 in the view: false
	// route to web-1
	// route to web-2
}
