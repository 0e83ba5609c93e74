package main

import (
	"flag"
	"fmt"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/pulsehealth/pulse/server"
)

// connFlags bound the connections pulsed's listeners keep open.
type connFlags struct {
	limits server.ConnLimits
}

func (f *connFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.limits.Max, "max-connections", 10000, "most client connections open at once on each listener (gRPC and HTTP); past it a new connection is closed at once (counted in pulse_connections_rejected_total); 0: no limit")
	fs.IntVar(&f.limits.PerSource, "max-connections-per-source", 1024, "most connections open at once from one source IP address (all local clients share 127.0.0.1); 0: no limit")
}

// handshakeTimeout bounds how long a new connection may take to finish its
// TLS and HTTP/2 handshakes. gRPC's default, 120s, lets a client that opens
// TCP connections and sends nothing hold a slot, and hold up shutdown, for
// two minutes each.
const handshakeTimeout = 5 * time.Second

// serverOptions are the gRPC server's options that go with the limits.
func (f *connFlags) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ConnectionTimeout(handshakeTimeout)}
}

func (f *connFlags) check() error {
	if err := f.limits.Validate(); err != nil {
		return fmt.Errorf("-max-connections and -max-connections-per-source must not be negative (0: no limit), got %d and %d", f.limits.Max, f.limits.PerSource)
	}
	return nil
}

// limit wraps a listener with the limits and exports its counts as
// pulse_connections_open and pulse_connections_rejected_total, labelled
// with the listener's name.
func (f *connFlags) limit(l net.Listener, name string, reg prometheus.Registerer) net.Listener {
	cl := server.LimitConns(l, f.limits)
	labels := prometheus.Labels{"listener": name}
	rejected := func(limit string, pick func(total, perSource uint64) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "pulse_connections_rejected_total",
			Help:        "Connections closed at accept because a limit was reached (-max-connections: limit=\"total\", -max-connections-per-source: limit=\"per_source\").",
			ConstLabels: prometheus.Labels{"listener": name, "limit": limit},
		}, func() float64 { return float64(pick(cl.Rejected())) })
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "pulse_connections_open",
			Help:        "Client connections open now.",
			ConstLabels: labels,
		}, func() float64 { return float64(cl.Open()) }),
		rejected("total", func(total, _ uint64) uint64 { return total }),
		rejected("per_source", func(_, perSource uint64) uint64 { return perSource }),
	)
	return cl
}
