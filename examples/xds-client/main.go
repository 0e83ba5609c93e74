// Command xds-client is a proxyless gRPC client that routes by Pulse's
// verdicts over xDS: it dials xds:///GROUP, where pulsed -xds is the
// management server named in its bootstrap, and sends a grpc.health.v1
// Check to the group's routable endpoints every interval, printing who
// answered. grpc-go's own xDS client does the routing; this program holds
// no list of backends.
//
//	GRPC_XDS_BOOTSTRAP_CONFIG='{"xds_servers": [{"server_uri": "127.0.0.1:50051",
//	  "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
//	  "node": {"id": "xds-client"}}' go run ./xds-client -group self
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	_ "google.golang.org/grpc/xds" // registers the xds:/// resolver and its balancers
)

func main() {
	group := flag.String("group", "edge", "the pulsed `group` to route to")
	service := flag.String("service", "", "the grpc.health.v1 `service` to check on each endpoint")
	every := flag.Duration("interval", 500*time.Millisecond, "time between checks")
	flag.Parse()
	if os.Getenv("GRPC_XDS_BOOTSTRAP_CONFIG") == "" && os.Getenv("GRPC_XDS_BOOTSTRAP") == "" {
		log.Fatal("set GRPC_XDS_BOOTSTRAP_CONFIG (or GRPC_XDS_BOOTSTRAP) to a bootstrap naming pulsed as the xDS server")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	conn, err := grpc.NewClient("xds:///"+*group, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	t := time.NewTicker(*every)
	defer t.Stop()
	for {
		var p peer.Peer
		cctx, cancel := context.WithTimeout(ctx, *every)
		res, err := hc.Check(cctx, &healthpb.HealthCheckRequest{Service: *service}, grpc.Peer(&p))
		cancel()
		if err != nil {
			fmt.Println("check failed:", err)
		} else {
			fmt.Println(res.GetStatus(), "from", p.Addr)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
