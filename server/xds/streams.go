package xds

import (
	"context"
	"fmt"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// served lists the type URLs Pulse serves; a type's index in it indexes
// the per-type counts.
var served = [...]string{resourcev3.EndpointType, resourcev3.ClusterType, resourcev3.RouteType, resourcev3.ListenerType}

// typeIndex returns typ's index in served, or -1.
func typeIndex(typ string) int {
	for i, t := range served {
		if t == typ {
			return i
		}
	}
	return -1
}

// maxEcho bounds how much of a client's input (a type URL, a node id, a
// NACK's error detail) an error message or a log line repeats: with its
// "... (N bytes)" it stays within the 128 bytes the server's error bound
// quotes whole, so the length it names survives.
const maxEcho = 100

// clip returns s whole when it is at most maxEcho bytes, else its first
// maxEcho bytes (cut on a character boundary) and its length.
func clip(s string) string { return clipN(s, maxEcho) }

// clipN is clip with a bound of max bytes.
func clipN(s string, max int) string {
	if len(s) <= max {
		return s
	}
	n := max
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return fmt.Sprintf("%s... (%d bytes)", s[:n], len(s))
}

// streamLimits admits ADS streams (State of the World and Delta alike)
// within a total and a per-source bound, and hands the memory of many
// streams back to the operating system once they have closed. Its methods
// are safe for concurrent use.
type streamLimits struct {
	max, perSource int // 0: no limit

	mu       sync.Mutex     // protects the fields below it
	open     int            // streams admitted and not yet released
	peak     int            // the most open since memory was last returned
	bySource map[string]int // open streams by source; a source with none has no entry
	pending  *time.Timer    // armed while a mass close settles; nil when none
	closed   bool           // the server closed: arm nothing more

	refusedTotal, refusedSource atomic.Uint64

	// returnMemory returns freed memory to the operating system
	// (debug.FreeOSMemory), settle after the last of a mass of streams
	// closed.
	returnMemory func()
	settle       time.Duration
	returns      atomic.Uint64 // how many times it ran
}

// returnAfter is how many streams must have closed since the peak, and
// at least half of it, for their memory to be handed back at once once
// they have all gone (returnSettle after the last closed: by then their
// goroutines, stacks and transport buffers are garbage). Without it the
// runtime returns the memory of tens of thousands of closed streams,
// hundreds of MB, only over minutes.
const (
	returnAfter  = 1000
	returnSettle = 2 * time.Second
)

func newStreamLimits(max, perSource int) *streamLimits {
	return &streamLimits{max: max, perSource: perSource, bySource: map[string]int{},
		returnMemory: debug.FreeOSMemory, settle: returnSettle}
}

// source names a stream's client for the per-source bound: its IP
// address, or its address when it has no IP (an in-process listener).
func source(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	if a, ok := p.Addr.(*net.TCPAddr); ok {
		return a.IP.String()
	}
	if host, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
		return host
	}
	return p.Addr.String()
}

// admit counts a new stream from src, or refuses it with
// RESOURCE_EXHAUSTED naming the bound and pulsed's flag; release must be
// called once when an admitted stream ends.
func (l *streamLimits) admit(src string) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.max > 0 && l.open >= l.max {
		l.refusedTotal.Add(1)
		return nil, status.Errorf(codes.ResourceExhausted, "xds: %d ADS streams open, the most pulsed's -xds-max-streams allows; close some, or raise it", l.max)
	}
	if l.perSource > 0 && l.bySource[src] >= l.perSource {
		l.refusedSource.Add(1)
		return nil, status.Errorf(codes.ResourceExhausted, "xds: %d ADS streams open from %s, the most pulsed's -xds-max-streams-per-source allows; close some, or raise it", l.perSource, clip(src))
	}
	l.open++
	l.peak = max(l.peak, l.open)
	l.bySource[src]++
	var once sync.Once
	return func() { once.Do(func() { l.release(src) }) }, nil
}

func (l *streamLimits) release(src string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.bySource[src]--; l.bySource[src] <= 0 {
		delete(l.bySource, src)
	}
	switch {
	case l.closed:
	case l.pending != nil: // a mass close goes on: wait for its end
		l.pending.Reset(l.settle)
	case l.peak-l.open >= returnAfter && l.open <= l.peak/2:
		l.pending = time.AfterFunc(l.settle, l.giveBack)
	}
}

// giveBack returns the memory of the streams closed since the peak.
func (l *streamLimits) giveBack() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.pending, l.peak = nil, l.open
	l.mu.Unlock()
	l.returnMemory()
	l.returns.Add(1)
}

// stop arms no more returns, and cancels one pending.
func (l *streamLimits) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.pending != nil {
		l.pending.Stop()
		l.pending = nil
	}
}

// counts returns how many streams are open and from how many sources.
func (l *streamLimits) counts() (open, sources int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, len(l.bySource)
}

// ads is the Aggregated Discovery Service Pulse registers: go-control-plane's,
// behind the stream limits, with each State of the World stream watched
// for NACKs.
type ads struct {
	discoverygrpc.AggregatedDiscoveryServiceServer
	s *Server
}

func (a ads) StreamAggregatedResources(st discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	release, err := a.s.limits.admit(source(st.Context()))
	if err != nil {
		return err
	}
	defer release()
	ss := &sotwStream{AggregatedDiscoveryService_StreamAggregatedResourcesServer: st, s: a.s}
	err = a.AggregatedDiscoveryServiceServer.StreamAggregatedResources(ss)
	// go-control-plane ends a stream whose Recv failed with no error:
	// give the client the one Recv refused it with.
	if refused := ss.refused(); refused != nil {
		return refused
	}
	return err
}

func (a ads) DeltaAggregatedResources(st discoverygrpc.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	release, err := a.s.limits.admit(source(st.Context()))
	if err != nil {
		return err
	}
	defer release()
	ds := &deltaStream{AggregatedDiscoveryService_DeltaAggregatedResourcesServer: st, s: a.s}
	err = a.AggregatedDiscoveryServiceServer.DeltaAggregatedResources(ds)
	if refused := ds.refused(); refused != nil { // as for State of the World
		return refused
	}
	return err
}

// refusal is why a stream's Recv ended it, kept for the handler to
// return: Recv runs on go-control-plane's reader goroutine.
type refusal struct {
	mu  sync.Mutex
	err error // nil while Recv has refused nothing
}

// refuse records err and returns it, for Recv to end the stream with.
func (r *refusal) refuse(err error) error {
	r.mu.Lock()
	r.err = err
	r.mu.Unlock()
	return err
}

// refused returns the error Recv ended the stream with, if it did.
func (r *refusal) refused() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// sent is the last response of a type sent on a stream.
type sent struct {
	nonce, version string
	nacked         bool // the client rejected it
}

// sotwStream is a State of the World stream as go-control-plane sees it.
// It remembers the last response of each type, so that a request
// answering it (carrying its nonce), an ACK or a NACK, reaches the cache
// with that response's version: the client has seen it, and the cache
// sends again only what changed since. Without this, a client that NACKs
// before it ever ACKs (its version_info empty) gets the same response
// again at once, in a loop as fast as the two can go.
type sotwStream struct {
	discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesServer
	s *Server

	// Send runs on go-control-plane's stream goroutine, Recv on its
	// reader goroutine.
	mu   sync.Mutex // protects last
	last [len(served)]sent

	node string // the client's node id, clipped; only Recv uses it
	refusal
}

func (st *sotwStream) Send(r *discoverygrpc.DiscoveryResponse) error {
	if i := typeIndex(r.GetTypeUrl()); i >= 0 {
		st.mu.Lock()
		st.last[i] = sent{nonce: r.GetNonce(), version: r.GetVersionInfo()}
		st.mu.Unlock()
	}
	return st.AggregatedDiscoveryService_StreamAggregatedResourcesServer.Send(r)
}

func (st *sotwStream) Recv() (*discoverygrpc.DiscoveryRequest, error) {
	req, err := st.AggregatedDiscoveryService_StreamAggregatedResourcesServer.Recv()
	if err != nil {
		return nil, err
	}
	if id := req.GetNode().GetId(); id != "" {
		st.node = clip(id)
	}
	i := typeIndex(req.GetTypeUrl())
	if i < 0 {
		return req, nil // the type mux refuses it
	}
	// Each request names the whole set it subscribes to, and the cache
	// keeps it for the stream's life: Delta's bounds apply to it.
	if names := req.GetResourceNames(); len(names) > MaxSubscribed {
		return nil, st.refuse(status.Errorf(codes.InvalidArgument, "xds: resource_names: a stream may subscribe to at most %d names of %s, got %d; subscribe to every resource (no names) instead", MaxSubscribed, served[i], len(names)))
	}
	for j, n := range req.GetResourceNames() {
		if len(n) > MaxNameBytes {
			return nil, st.refuse(status.Errorf(codes.InvalidArgument, "xds: resource_names[%d]: must be at most %d bytes, got %q", j, MaxNameBytes, clip(n)))
		}
	}
	st.mu.Lock()
	last := &st.last[i]
	answers := last.nonce != "" && req.GetResponseNonce() == last.nonce
	first := false
	if answers && req.GetErrorDetail() != nil && !last.nacked {
		last.nacked, first = true, true
	}
	version := last.version
	st.mu.Unlock()
	if !answers {
		// A first request, or one go-control-plane ignores: its nonce is
		// not the last response's.
		return req, nil
	}
	if first {
		st.s.nack(i, st.node, version, req.GetErrorDetail().GetMessage())
	}
	req.VersionInfo = version
	return req, nil
}

// MaxSubscribed bounds the names a stream subscribes to, of each type. A
// Delta client's subscriptions add up, request after request, and the
// server keeps them for the stream's life: one stream that subscribed 1.5
// million names held 560 MB of a real pulsed. A State of the World
// request names its whole set each time, up to -max-request-bytes. It is
// WatchTransitions' bound on names; a client that wants more subscribes to
// every resource.
const MaxSubscribed = 10000

// MaxNameBytes bounds a name a stream subscribes to: every resource is
// named after a group, of at most checker.MaxGroupLen characters.
const MaxNameBytes = 256

// deltaStream is a Delta stream as go-control-plane sees it: its NACKs
// are counted, and its subscriptions bounded. A Delta NACK is not
// answered again, as the cache tracks the versions it sent.
type deltaStream struct {
	discoverygrpc.AggregatedDiscoveryService_DeltaAggregatedResourcesServer
	s    *Server
	node string // the client's node id, clipped; only Recv uses it
	// subs are the names subscribed, by type, the wildcard aside; only
	// Recv uses them.
	subs [len(served)]map[string]struct{}
	refusal
}

func (st *deltaStream) Recv() (*discoverygrpc.DeltaDiscoveryRequest, error) {
	req, err := st.AggregatedDiscoveryService_DeltaAggregatedResourcesServer.Recv()
	if err != nil {
		return nil, err
	}
	if id := req.GetNode().GetId(); id != "" {
		st.node = clip(id)
	}
	i := typeIndex(req.GetTypeUrl())
	if i < 0 {
		return req, nil // the type mux refuses it
	}
	if err := st.subscribe(i, req); err != nil {
		return nil, st.refuse(err)
	}
	if req.GetErrorDetail() != nil && req.GetResponseNonce() != "" {
		st.s.nack(i, st.node, "", req.GetErrorDetail().GetMessage())
	}
	return req, nil
}

// subscribe applies req's changes to the names of served[i] the stream
// subscribes to, or says which bound they break.
func (st *deltaStream) subscribe(i int, req *discoverygrpc.DeltaDiscoveryRequest) error {
	subs := st.subs[i]
	if subs == nil {
		subs = map[string]struct{}{}
		st.subs[i] = subs
	}
	for _, n := range req.GetResourceNamesUnsubscribe() {
		delete(subs, n)
	}
	for j, n := range req.GetResourceNamesSubscribe() {
		if len(n) > MaxNameBytes {
			return status.Errorf(codes.InvalidArgument, "xds: resource_names_subscribe[%d]: must be at most %d bytes, got %q", j, MaxNameBytes, clip(n))
		}
		if n != "*" {
			subs[n] = struct{}{}
		}
	}
	if len(subs) > MaxSubscribed {
		return status.Errorf(codes.InvalidArgument, "xds: resource_names_subscribe: a stream may subscribe to at most %d names of %s, got %d; subscribe to the wildcard \"*\" instead", MaxSubscribed, served[i], len(subs))
	}
	return nil
}

// nack counts a client's rejection of a response of served[i] and logs it,
// at most once per nackLogEvery.
func (s *Server) nack(i int, node, version, detail string) {
	n := s.nacks[i].Add(1)
	s.nackLog.Do(func() {
		s.logger.Warn("an xDS client rejected a response (NACK); it is not sent again on that stream until its resources change",
			"type_url", served[i], "version", version, "node", node, "detail", clip(detail), "nacks_of_type", n)
	})
}
