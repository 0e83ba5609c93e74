// Package resolver is a grpc-go name resolver that follows a group of
// targets in pulsed: a gRPC client dialing "pulse:///edge" sends its RPCs
// to the routable targets of group edge, and stops sending to one as soon
// as pulsed's transition reaches it.
//
//	c, _ := client.New(ctx, []string{"127.0.0.1:50051"})
//	conn, _ := grpc.NewClient("pulse:///edge",
//		grpc.WithResolvers(resolver.NewBuilder(c)),
//		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"round_robin": {}}]}`),
//		grpc.WithTransportCredentials(insecure.NewCredentials()))
//
// Targets:
//
//   - pulse:///GROUP follows GROUP through the builder's client;
//   - pulse://HOST:PORT,HOST:PORT/GROUP names the pulsed addresses (replicas,
//     comma-separated): the resolver makes its own client of them, with the
//     builder's options, and closes it with the resolver.
//
// The addresses are those of the group's routable targets: the address of
// a tcp or grpc probe, the host:port of an http URL (the scheme's port when
// it has none). A target without one is left out, and of two targets with
// the same address the first by name is kept. Each address carries the
// target's name, group and state (Info reads them); the address of a
// degraded outlier (client.Status.Outlier) also carries, as a balancer
// attribute, its reason and lowered weight (OutlierOf reads them). A new list is sent to
// gRPC after every change of the group that changes it (a transition in or
// out of rotation or between healthy and suspect, a routable target added,
// updated, moved or removed, a snapshot), once per revision. While pulsed
// is unreachable the resolver keeps the last list and reports the error to
// the ClientConn (the balancer keeps using the list); once the stream is
// back it sends the current list again. A group pulsed refuses to follow
// (a malformed name) is reported as an error, which fails the RPCs.
package resolver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc/attributes"
	grpcresolver "google.golang.org/grpc/resolver"

	"github.com/pulsehealth/pulse/client"
)

// Scheme is the scheme of the resolver's targets.
const Scheme = "pulse"

// Info is what an address says of its target.
type Info struct {
	Name  string
	Group string
	State client.State
}

// infoKey is the attribute key of an address's Info.
type infoKey struct{}

// InfoOf returns the Info of an address the resolver made, and whether it
// has one.
func InfoOf(addr grpcresolver.Address) (Info, bool) {
	info, ok := addr.Attributes.Value(infoKey{}).(Info)
	return info, ok
}

// Outlier marks the address of a degraded outlier of its group: routable,
// but a balancer that weighs its addresses should give it Weight percent
// of a healthy address's share. An ejected outlier is not routable, so not
// in the list.
type Outlier struct {
	Reason string
	Weight uint32
}

// outlierKey is the balancer attribute key of an address's Outlier.
type outlierKey struct{}

// OutlierOf returns the Outlier of an address the resolver made, and
// whether it is one. It is a balancer attribute (BalancerAttributes): a
// target that becomes or stops being an outlier keeps its connection.
func OutlierOf(addr grpcresolver.Address) (Outlier, bool) {
	o, ok := addr.BalancerAttributes.Value(outlierKey{}).(Outlier)
	return o, ok
}

// Builder builds resolvers for the "pulse" scheme. It is safe for
// concurrent use. Create it with NewBuilder.
type Builder struct {
	c    *client.Client
	opts []client.Option
}

// NewBuilder returns a builder whose resolvers follow pulse:///GROUP
// through c, and make a client of the addresses of pulse://ADDRS/GROUP with
// opts. c may be nil when every target names its pulsed; the caller keeps
// ownership of c and closes it after the ClientConns that use it.
func NewBuilder(c *client.Client, opts ...client.Option) *Builder {
	return &Builder{c: c, opts: slices.Clone(opts)}
}

// Register registers NewBuilder(c, opts...) with gRPC for the "pulse"
// scheme, so that every grpc.NewClient("pulse:///...") uses it. Like
// grpc's resolver.Register, call it only at initialization.
func Register(c *client.Client, opts ...client.Option) {
	grpcresolver.Register(NewBuilder(c, opts...))
}

// Scheme returns "pulse".
func (b *Builder) Scheme() string { return Scheme }

// Build starts following the target's group and returns its resolver.
func (b *Builder) Build(target grpcresolver.Target, cc grpcresolver.ClientConn, _ grpcresolver.BuildOptions) (grpcresolver.Resolver, error) {
	group := target.Endpoint()
	if group == "" || strings.Contains(group, "/") {
		return nil, fmt.Errorf("pulse resolver: %q: want pulse:///GROUP or pulse://HOST:PORT[,HOST:PORT...]/GROUP", target.String())
	}
	c, own := b.c, false
	if authority := target.URL.Host; authority != "" {
		var err error
		if c, err = client.New(context.Background(), strings.Split(authority, ","), b.opts...); err != nil {
			return nil, fmt.Errorf("pulse resolver: %w", err)
		}
		own = true
	}
	if c == nil {
		return nil, errors.New("pulse resolver: pulse:///" + group + " names no pulsed: give NewBuilder a client, or name pulsed in the target (pulse://HOST:PORT/" + group + ")")
	}
	r := &pulseResolver{cc: cc, group: group, done: make(chan struct{})}
	if own {
		r.own = c
	}
	r.view = c.NewView(client.Filter{Group: group}, client.OnStreamState(r.streamState))
	r.unsubscribe = r.view.Subscribe(r.changed)
	r.view.Start(context.Background())
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		// A first snapshot with no routable target changes nothing, yet
		// gRPC must hear of it.
		select {
		case <-r.view.Synced():
			r.push()
		case <-r.view.Done():
		case <-r.done:
			return
		}
		// A view that stops for good (pulsed refuses the group's name, or
		// the client was closed) fails the channel's RPCs with its reason,
		// rather than leaving them waiting for addresses.
		select {
		case <-r.view.Done():
			r.stopped(r.view.Err())
		case <-r.done:
		}
	}()
	return r, nil
}

// pulseResolver follows one group for one ClientConn.
type pulseResolver struct {
	cc          grpcresolver.ClientConn
	group       string
	view        *client.View
	own         *client.Client // the client this resolver made; nil: the builder's
	unsubscribe func()
	wg          sync.WaitGroup

	mu sync.Mutex // protects the fields below; held while calling cc, so that updates reach it in order
	// routable holds the address of each routable target with one, sorted
	// by name; kept up to date change by change, so that an update costs
	// one pass over the group, not a pass over the view and a parse of
	// every target's address.
	routable []named
	counts   map[string]int // how many of routable have each address
	repeated int            // how many addresses two or more of routable have
	dirty    bool           // routable changed since the last update sent
	sent     bool           // an update was sent
	failing  bool           // an error was reported since the last update
	closed   bool
	done     chan struct{} // closed by Close
}

// named is a target's name and address.
type named struct {
	name string
	addr grpcresolver.Address
}

// changed applies one change of the view and, after the last change of a
// revision, sends the list.
func (r *pulseResolver) changed(ch client.Change) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, found := slices.BinarySearchFunc(r.routable, ch.Name, func(n named, name string) int { return strings.Compare(n.name, name) })
	addr, ok := addressOf(ch.Status)
	in := ok && ch.Status.Routable
	if found {
		r.count(r.routable[i].addr.Addr, -1)
	}
	switch {
	case in && found:
		r.routable[i].addr = addr
	case in:
		r.routable = slices.Insert(r.routable, i, named{ch.Name, addr})
	case found:
		r.routable = slices.Delete(r.routable, i, i+1)
	}
	if in {
		r.count(addr.Addr, +1)
	}
	r.dirty = r.dirty || in || found
	if !ch.More {
		r.pushLocked()
	}
}

// count adds d to the number of routable targets at addr.
func (r *pulseResolver) count(addr string, d int) {
	if r.counts == nil {
		r.counts = make(map[string]int)
	}
	n := r.counts[addr] + d
	switch {
	case d > 0 && n == 2:
		r.repeated++
	case d < 0 && n == 1:
		r.repeated--
	}
	if n == 0 {
		delete(r.counts, addr)
	} else {
		r.counts[addr] = n
	}
}

// push sends the group's routable addresses to gRPC, unless they are what
// it has already and no error was reported since.
func (r *pulseResolver) push() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pushLocked()
}

func (r *pulseResolver) pushLocked() {
	if r.closed || r.sent && !r.dirty && !r.failing {
		return
	}
	addrs := make([]grpcresolver.Address, 0, len(r.routable))
	var seen map[string]bool // only when some address is repeated
	if r.repeated > 0 {
		seen = make(map[string]bool, len(r.routable))
	}
	for _, n := range r.routable {
		if seen != nil {
			if seen[n.addr.Addr] {
				continue
			}
			seen[n.addr.Addr] = true
		}
		addrs = append(addrs, n.addr)
	}
	r.dirty, r.sent, r.failing = false, true, false
	// An empty list is refused (ErrBadResolverState) and the channel fails
	// its RPCs: what a group with no routable target should get.
	r.cc.UpdateState(grpcresolver.State{Addresses: addrs})
}

// streamState reports a broken stream to gRPC, which keeps using the last
// addresses; once the stream delivers again the current list is sent.
func (r *pulseResolver) streamState(err error) {
	if err == nil {
		r.push()
		return
	}
	r.report(fmt.Errorf("pulse resolver: following group %q: %w", r.group, err))
}

// stopped reports to gRPC that the group is followed no more, and why.
// %v, not %w: gRPC refuses a picker error that carries the status of a
// call's own mistake (pulsed's InvalidArgument) and fails RPCs with
// Internal; without one they fail with Unavailable and this text.
func (r *pulseResolver) stopped(err error) {
	r.report(fmt.Errorf("pulse resolver: stopped following group %q: %v", r.group, err))
}

// report reports err to gRPC, unless the resolver is closed; the next
// list is sent even if it is unchanged, which clears the error.
func (r *pulseResolver) report(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.failing = true
	r.cc.ReportError(err)
}

// ResolveNow does nothing: the resolver follows a stream, it does not poll.
func (r *pulseResolver) ResolveNow(grpcresolver.ResolveNowOptions) {}

// Close stops following the group; nothing is sent to gRPC after it.
func (r *pulseResolver) Close() {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.done)
	}
	r.mu.Unlock()
	r.unsubscribe()
	r.view.Close()
	r.wg.Wait()
	if r.own != nil {
		r.own.Close()
	}
}

// Addresses returns the gRPC addresses of targets, in their order: the
// address of each target's probe (see client.Target.Address), with its
// Info. Targets without an address are left out, and a repeated address
// keeps its first target.
func Addresses(targets []client.Status) []grpcresolver.Address {
	out := make([]grpcresolver.Address, 0, len(targets))
	seen := make(map[string]bool, len(targets))
	for _, st := range targets {
		addr, ok := addressOf(st)
		if !ok || seen[addr.Addr] {
			continue
		}
		seen[addr.Addr] = true
		out = append(out, addr)
	}
	return out
}

// addressOf returns st's gRPC address with its Info; ok is false when its
// probe has no host:port.
func addressOf(st client.Status) (grpcresolver.Address, bool) {
	addr, ok := st.Target.Address()
	if !ok {
		return grpcresolver.Address{}, false
	}
	info := Info{Name: st.Target.Name, Group: st.Target.Group, State: st.State}
	out := grpcresolver.Address{Addr: addr, Attributes: attributes.New(infoKey{}, info)}
	if o := st.Outlier; o != nil && !o.Ejected {
		out.BalancerAttributes = attributes.New(outlierKey{}, Outlier{Reason: o.Reason, Weight: client.OutlierWeight})
	}
	return out, true
}
