package main

import (
	"context"
	"fmt"
	"net"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pulsehealth/pulse/cmd/internal/dial"
)

// With replicas on etcd, only the replica that probes a target keeps its
// history, streak and last probe; another, asked for them, says which
// replica that is and where it says its clients reach it. pulsectl then
// asks it, once: a target whose owner moved meanwhile is the next
// command's.

// askOwner asks replica owner, at addr, with call, saying on stderr that
// owner probes what ("web-1 and keeps its history"). ok is false, said on
// stderr, when it was not asked (addr is not a host:port, or the token
// would cross the network in clear) or could not answer (unreachable,
// credentials refused): then the first answer stands. Otherwise the caller
// closes the client returned.
func askOwner[R any](ctx context.Context, e *env, cf *clientFlags, owner, addr, what string, call func(context.Context, *client) (R, error)) (_ *client, _ R, _ error, ok bool) {
	var zero R
	who := fmt.Sprintf("replica %s at %s", escape(owner), escape(addr))
	if why := followRefusal(cf.conn, addr); why != "" {
		e.errorf("not asking %s: %s", who, why)
		return nil, zero, nil, false
	}
	fmt.Fprintf(e.stderr, "replica %s probes %s: asking it at %s\n", escape(owner), escape(what), escape(addr))
	other, ok := cf.at(ctx, e, addr, "replica "+escape(owner)+"'s advertised address (its pulsed -advertise-host, or -listen)")
	if !ok {
		return nil, zero, nil, false
	}
	octx, cancel := other.callCtx(ctx)
	defer cancel()
	resp, err := call(octx, other)
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Unauthenticated, codes.PermissionDenied:
		e.errorf("could not ask %s: %s", who, escape(status.Convert(err).Message()))
		other.Close()
		return nil, zero, nil, false
	}
	return other, resp, err, true
}

// followRefusal says why pulsectl, connecting with conn, does not follow
// pulsed to addr; "" when it does. A replica's address is a host:port (a
// scheme or a list would make pulsectl dial more than one replica), and a
// token goes to another machine only over TLS.
func followRefusal(conn dial.Flags, addr string) string {
	host, _, err := net.SplitHostPort(addr)
	switch {
	case err != nil || host == "" || strings.ContainsAny(addr, ",/"):
		return "not a host:port"
	case !conn.TLSOn() && conn.HasToken() && !isLoopbackHost(host):
		return "pulsectl sends its token to another machine only over TLS (--tls)"
	}
	return ""
}

// isLoopbackHost reports whether host names this machine only.
func isLoopbackHost(host string) bool {
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	return host == "localhost"
}
