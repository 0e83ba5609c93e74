package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// Resolver looks up the IP addresses of a host name; network is "ip",
// "ip4" or "ip6". *net.Resolver implements it. A Resolver must be safe for
// concurrent use and obey ctx.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// fallbackDelay is how long a dial waits on the addresses of the first
// family before it tries the other family as well (RFC 8305), as
// net.Dialer does.
const fallbackDelay = 300 * time.Millisecond

// guardedDialer opens every connection a Factory's probes make: HTTP (as
// the transport's DialContext), TCP, and gRPC (as the channel's dialer).
// It looks host names up itself, drops the addresses its policy denies and
// connects only to addresses it has checked, so what is checked is what is
// reached. Its fields are set once; it is safe for concurrent use.
type guardedDialer struct {
	policy   *EgressPolicy
	resolver Resolver
	// dial connects to one checked "ip:port". Tests replace it to observe
	// or fake connection attempts.
	dial          func(ctx context.Context, network, address string) (net.Conn, error)
	fallbackDelay time.Duration
}

// newGuardedDialer returns a dialer that connects with a net.Dialer whose
// Control checks the policy once more on the socket's address, just before
// connect(2): a backstop should a later change ever hand it a name.
func newGuardedDialer(policy *EgressPolicy, resolver Resolver) *guardedDialer {
	d := &guardedDialer{policy: policy, resolver: resolver, fallbackDelay: fallbackDelay}
	nd := &net.Dialer{ControlContext: d.control}
	d.dial = nd.DialContext
	return d
}

// control is the net.Dialer's last check before connect(2).
func (d *guardedDialer) control(_ context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("egress check: cannot parse socket address %q", address)
	}
	return d.policy.Check(ap.Addr())
}

// DialContext connects to address ("host:port", numeric port) over network
// ("tcp", "tcp4" or "tcp6", or "udp", "udp4" or "udp6" for DNS probes). A host that is an IP address in any form
// hostAddr accepts is used as that address, without a lookup; a name is
// looked up with the resolver on every call. Addresses the policy denies
// are dropped; when none is left the error is an *EgressError and no
// connection is attempted. The rest are tried like net.Dialer does: in
// order, each with a share of ctx's deadline, racing the second address
// family against the first after fallbackDelay.
func (d *guardedDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var lookupNet string
	switch network {
	case "tcp", "udp":
		lookupNet = "ip"
	case "tcp4", "udp4":
		lookupNet = "ip4"
	case "tcp6", "udp6":
		lookupNet = "ip6"
	default:
		return nil, &net.OpError{Op: "dial", Net: network, Err: net.UnknownNetworkError(network)}
	}
	host, portText, err := net.SplitHostPort(address)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: &net.AddrError{Err: "invalid port", Addr: address}}
	}
	var addrs []netip.Addr
	if a, ok := hostAddr(host); ok {
		addrs = []netip.Addr{a}
	} else {
		addrs, err = d.resolver.LookupNetIP(ctx, lookupNet, host)
		if err != nil {
			return nil, withContext(ctx, err)
		}
		if len(addrs) == 0 {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		// The go resolver hands an A record back IPv4-mapped
		// (::ffff:127.0.0.1 for localhost): the address it names, and
		// what an error shows, is the IPv4 one.
		// A copy: the slice is the resolver's, which may keep it.
		if slices.ContainsFunc(addrs, netip.Addr.Is4In6) {
			unmapped := make([]netip.Addr, len(addrs))
			for i, a := range addrs {
				unmapped[i] = a.Unmap()
			}
			addrs = unmapped
		}
	}
	var (
		permitted []netip.AddrPort
		denied    error
	)
	for _, a := range addrs {
		if err := d.policy.Check(a); err != nil {
			if denied == nil {
				var ee *EgressError
				if errors.As(err, &ee) {
					ee.Host = host
				}
				denied = err
			}
			continue
		}
		if a.Is4In6() {
			a = a.Unmap()
		}
		permitted = append(permitted, netip.AddrPortFrom(a, uint16(port)))
	}
	if len(permitted) == 0 {
		return nil, denied
	}
	return d.dialParallel(ctx, network, permitted)
}

// dialParallel dials the addresses of the first one's family in order and,
// when that has not succeeded after fallbackDelay (or has failed), the
// other family's as well; the first connection wins and the other attempt is
// cancelled and waited for before dialParallel returns.
func (d *guardedDialer) dialParallel(ctx context.Context, network string, addrs []netip.AddrPort) (net.Conn, error) {
	var primaries, fallbacks []netip.AddrPort
	for _, ap := range addrs {
		if ap.Addr().Is4() == addrs[0].Addr().Is4() {
			primaries = append(primaries, ap)
		} else {
			fallbacks = append(fallbacks, ap)
		}
	}
	if len(fallbacks) == 0 {
		return d.dialSerial(ctx, network, primaries)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		conn net.Conn
		err  error
	}
	results := make(chan result, 2)
	start := func(addrs []netip.AddrPort) {
		go func() {
			c, err := d.dialSerial(ctx, network, addrs)
			results <- result{c, err}
		}()
	}
	start(primaries)
	running := 1
	timer := time.NewTimer(d.fallbackDelay)
	defer timer.Stop()
	fallback := timer.C // nil once the fallbacks have started
	var firstErr error
	for running > 0 {
		select {
		case <-fallback:
			start(fallbacks)
			running++
			fallback = nil
		case r := <-results:
			running--
			if r.err == nil {
				cancel()
				for ; running > 0; running-- {
					if late := <-results; late.conn != nil {
						_ = late.conn.Close()
					}
				}
				return r.conn, nil
			}
			if firstErr == nil {
				firstErr = r.err
			}
			if fallback != nil {
				start(fallbacks)
				running++
				fallback = nil
			}
		}
	}
	return nil, firstErr
}

// dialSerial tries addrs in order until one connects.
func (d *guardedDialer) dialSerial(ctx context.Context, network string, addrs []netip.AddrPort) (net.Conn, error) {
	var firstErr error
	for i, ap := range addrs {
		if ctx.Err() != nil {
			break
		}
		c, err := d.dialOne(ctx, network, ap, len(addrs)-i)
		if err == nil {
			return c, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return nil, withContext(ctx, firstErr)
}

// dialOne dials ap, the first of remaining addresses still to try. When ctx
// has a deadline and others remain, the attempt gets an equal share of the
// time left, but at least two seconds (as net.Dialer does), so one silent
// address does not use up the time of the others.
func (d *guardedDialer) dialOne(ctx context.Context, network string, ap netip.AddrPort, remaining int) (net.Conn, error) {
	if deadline, ok := ctx.Deadline(); ok && remaining > 1 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, partialDeadline(time.Now(), deadline, remaining))
		defer cancel() // a net.Conn outlives the context it was dialled with
	}
	return d.dial(ctx, network, ap.String())
}

// partialDeadline returns the deadline of one of the remaining attempts
// that share the time until deadline.
func partialDeadline(now, deadline time.Time, remaining int) time.Time {
	left := deadline.Sub(now)
	share := left / time.Duration(remaining)
	const minShare = 2 * time.Second
	if share < minShare {
		share = min(minShare, left)
	}
	return now.Add(share)
}
