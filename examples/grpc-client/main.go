// Command grpc-client sends grpc.health.v1 Check RPCs to the routable
// targets of a pulsed group, round robin, through the pulse:/// resolver:
// a target that pulsed marks unhealthy stops getting RPCs as soon as the
// transition arrives, and the last good set keeps getting them while
// pulsed is away.
//
//	go run ./grpc-client -pulse 127.0.0.1:50051 -group backends
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/pulsehealth/pulse/client"
	"github.com/pulsehealth/pulse/client/resolver"
)

func main() {
	addrs := flag.String("pulse", "127.0.0.1:50051", "pulsed `addresses`, comma-separated (replicas)")
	group := flag.String("group", "backends", "the `group` whose targets serve the RPCs")
	every := flag.Duration("every", 500*time.Millisecond, "time between two RPCs")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	c, err := client.New(ctx, strings.Split(*addrs, ","))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	conn, err := grpc.NewClient("pulse:///"+*group,
		grpc.WithResolvers(resolver.NewBuilder(c)),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"round_robin": {}}]}`),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	health := healthpb.NewHealthClient(conn)
	tick := time.NewTicker(*every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var p peer.Peer
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := health.Check(rctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p))
		cancel()
		if err != nil {
			log.Printf("RPC failed: %v", err)
			continue
		}
		log.Printf("answered by %v: %v", p.Addr, resp.GetStatus())
	}
}
