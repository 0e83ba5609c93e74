// Command follow prints a group's targets as pulsed's transitions reach
// it, and the addresses to route to after each change: the client
// package's View, the way a Go service keeps its own routing table.
//
//	go run ./follow -pulse 127.0.0.1:50051 -group edge
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"

	"github.com/pulsehealth/pulse/client"
)

func main() {
	addrs := flag.String("pulse", "127.0.0.1:50051", "pulsed `addresses`, comma-separated (replicas)")
	group := flag.String("group", "edge", "the `group` to follow")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	c, err := client.New(ctx, strings.Split(*addrs, ",")) // token: PULSE_TOKEN
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	v := c.View(ctx, client.Filter{Group: *group})
	defer v.Close()
	v.Subscribe(func(ch client.Change) {
		fmt.Printf("%d %s (%s)\n", ch.Revision, ch, ch.Reason)
		if ch.More {
			return
		}
		var route []string
		for _, st := range v.Routable(*group) {
			if addr, ok := st.Target.Address(); ok {
				route = append(route, addr)
			}
		}
		fmt.Printf("  route to: %v\n", route)
	})
	<-ctx.Done()
}
