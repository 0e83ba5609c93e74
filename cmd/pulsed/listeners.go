package main

import (
	"fmt"
	"net"

	pulsedns "github.com/pulsehealth/pulse/server/dns"
)

// listeners are pulsed's sockets. They are bound once the files are read
// and before the store is opened: an address in use stops pulsed before it
// creates a store or joins a fleet on etcd, and names its flag. Each is
// served later by its server, which closes it when it stops.
type listeners struct {
	grpc   net.Listener
	http   net.Listener   // nil: -http-listen is empty
	dnsUDP net.PacketConn // nil: -dns-listen is empty
	dnsTCP net.Listener   // nil: -dns-listen is empty
}

// listen binds the addresses of -listen, -http-listen and -dns-listen.
// On an error, it closes what it bound.
func listen(cfg config) (_ *listeners, err error) {
	ls := &listeners{}
	defer func() {
		if err != nil {
			ls.close()
		}
	}()
	if ls.grpc, err = net.Listen("tcp", cfg.listen); err != nil {
		return nil, fmt.Errorf("-listen: %w", err)
	}
	if cfg.httpListen != "" {
		if ls.http, err = net.Listen("tcp", cfg.httpListen); err != nil {
			return nil, fmt.Errorf("-http-listen: %w", err)
		}
	}
	if cfg.dns.listen != "" {
		if ls.dnsUDP, ls.dnsTCP, err = pulsedns.Listen(cfg.dns.listen); err != nil {
			return nil, fmt.Errorf("-dns-listen: %w", err)
		}
	}
	return ls, nil
}

// close closes every socket. Closing one its server has closed already
// does nothing, so it may run after the servers stop.
func (ls *listeners) close() {
	for _, l := range []net.Listener{ls.grpc, ls.http, ls.dnsTCP} {
		if l != nil {
			l.Close()
		}
	}
	if ls.dnsUDP != nil {
		ls.dnsUDP.Close()
	}
}
