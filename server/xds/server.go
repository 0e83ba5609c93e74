// Package xds serves the checker's verdicts over the xDS v3 Aggregated
// Discovery Service, State of the World and Delta, so that Envoy and
// proxyless gRPC clients route on them.
//
// Each named group is served as four resources of the group's name:
//
//   - a ClusterLoadAssignment (EDS) listing the group's targets that have an
//     address (a TCP or gRPC probe's address, an HTTP URL's host and port),
//     each with a health_status: HEALTHY for healthy, DEGRADED for suspect,
//     UNHEALTHY for unhealthy. A target the group's panic threshold holds is
//     HEALTHY, and says so in its metadata (see MetadataKey);
//   - a Cluster (CDS) of type EDS over ADS, round robin;
//   - a RouteConfiguration (RDS) sending every request to the cluster;
//   - a Listener (LDS) with an api_listener, for gRPC clients dialing
//     xds:///GROUP.
//
// Targets without a group are not served. Changes are pushed as they
// happen, coalesced over a short window (Config.Coalesce): a burst of
// transitions in one group is one push of its assignment.
//
// Resources are built only from the registry, in a fixed order, so every
// replica sharing a registry builds the same bytes: a Delta client's
// resource versions (hashes of the resources) hold on any replica.
package xds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/pulsehealth/pulse/checker"
)

// ServiceName is the gRPC service the server registers.
const ServiceName = "envoy.service.discovery.v3.AggregatedDiscoveryService"

// DefaultCoalesce is Config.Coalesce's default.
const DefaultCoalesce = 50 * time.Millisecond

// Source is what the xDS server needs from the checker: its event stream,
// and its groups' panic holds. *checker.Checker implements it.
type Source interface {
	Watch(f checker.Filter, start uint64) (*checker.Watcher, error)
	Groups(group string) []checker.GroupStatus
}

// Config configures a Server. The zero value is valid.
type Config struct {
	// Coalesce is how long the server gathers changes before it pushes
	// them: the first change starts the window, and every group changed in
	// it is pushed once at its end. If 0, DefaultCoalesce; at most 10s.
	Coalesce time.Duration
	// Logger receives the server's warnings. If nil, nothing is logged.
	Logger *slog.Logger
	// MaxStreams bounds the ADS streams (State of the World and Delta)
	// open at once; past it a new stream is refused with
	// RESOURCE_EXHAUSTED. If 0, no limit.
	MaxStreams int
	// MaxStreamsPerSource bounds the ADS streams open at once from one
	// client IP address. If 0, no limit.
	MaxStreamsPerSource int
}

// maxCoalesce bounds Config.Coalesce: longer would keep clients routing to
// targets Pulse knows are down.
const maxCoalesce = 10 * time.Second

// Validate reports what is wrong with the config, naming the field.
func (c Config) Validate() error {
	if c.Coalesce < 0 || c.Coalesce > maxCoalesce {
		return fmt.Errorf("Coalesce: must be in [0, %v], got %v", maxCoalesce, c.Coalesce)
	}
	if c.MaxStreams < 0 {
		return fmt.Errorf("MaxStreams: must not be negative (0: no limit), got %d", c.MaxStreams)
	}
	if c.MaxStreamsPerSource < 0 {
		return fmt.Errorf("MaxStreamsPerSource: must not be negative (0: no limit), got %d", c.MaxStreamsPerSource)
	}
	return nil
}

// Stats are a server's counts.
type Stats struct {
	// Streams is how many ADS streams are open.
	Streams int64
	// Pushes counts the resources updated or removed in the caches, each
	// a push to every client watching it.
	Pushes uint64
	// Revision is the checker revision the served resources reflect.
	Revision uint64
	// NACKs counts the responses clients rejected, by type URL: one entry
	// for each type Pulse serves.
	NACKs map[string]uint64
	// RefusedTotal and RefusedPerSource count the streams refused at
	// MaxStreams and at MaxStreamsPerSource.
	RefusedTotal, RefusedPerSource uint64
	// MemoryReturns counts the times the memory of many closed streams was
	// handed back to the operating system at once.
	MemoryReturns uint64
}

// Server serves xDS from a Source. Its methods are safe for concurrent
// use. Create it with New and release it with Close.
type Server struct {
	src      Source
	coalesce time.Duration
	logger   *slog.Logger

	caches map[string]*cache.LinearCache // by type URL
	xds    serverv3.Server
	cancel context.CancelFunc // ends every stream

	limits  *streamLimits
	nacks   [len(served)]atomic.Uint64
	nackLog rate.Sometimes // NACKs are logged at most this often
	pushes  atomic.Uint64
	rev     atomic.Uint64

	// Only the follower's goroutine (and New, before it starts) uses
	// these.
	v         *view
	published map[string]*publishedGroup

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// publishedGroup is what was last pushed for a group.
type publishedGroup struct {
	cla proto.Message
}

// New returns a server following src. It loads src's current state before
// it returns, so the first clients get it whole.
func New(src Source, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Coalesce == 0 {
		cfg.Coalesce = DefaultCoalesce
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		src:       src,
		coalesce:  cfg.Coalesce,
		logger:    logger,
		caches:    map[string]*cache.LinearCache{},
		v:         newView(),
		published: map[string]*publishedGroup{},
		limits:    newStreamLimits(cfg.MaxStreams, cfg.MaxStreamsPerSource),
		nackLog:   rate.Sometimes{First: 1, Interval: nackLogEvery},
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	for _, typ := range served {
		s.caches[typ] = cache.NewLinearCache(typ, cache.WithLogger(cpLogger{logger}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.xds = serverv3.NewServer(ctx, typeMux(s.caches), serverv3.CallbackFuncs{})
	w, err := s.watch()
	if err != nil {
		cancel()
		return nil, err
	}
	s.push()
	go s.run(w)
	return s, nil
}

// Register registers the Aggregated Discovery Service on gs.
func (s *Server) Register(gs *grpc.Server) {
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(gs, ads{AggregatedDiscoveryServiceServer: s.xds, s: s})
}

// nackLogEvery is how often NACKs are logged at most: a client that
// rejects every response would otherwise fill the log.
const nackLogEvery = 10 * time.Second

// Stats returns the server's counts.
func (s *Server) Stats() Stats {
	open, _ := s.limits.counts()
	st := Stats{
		Streams:          int64(open),
		Pushes:           s.pushes.Load(),
		Revision:         s.rev.Load(),
		NACKs:            make(map[string]uint64, len(served)),
		RefusedTotal:     s.limits.refusedTotal.Load(),
		RefusedPerSource: s.limits.refusedSource.Load(),
		MemoryReturns:    s.limits.returns.Load(),
	}
	for i, typ := range served {
		st.NACKs[typ] = s.nacks[i].Load()
	}
	return st
}

// Close stops following the source and ends every stream; clients keep
// the resources they have. It is idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.done
		s.cancel()
		s.limits.stop()
	})
	return nil
}

// watchRetry is how long the follower waits before watching again when
// Watch fails for a reason other than the checker closing (the watcher
// limit).
const watchRetry = time.Second

// maxEvents is how many events the follower takes at a time.
const maxEvents = 1024

// panicRefresh is how often the follower asks for the holds of groups in
// panic (a target held or let go during a panic has no event of its own)
// and pushes the weights of slow starts in progress.
const panicRefresh = time.Second

func (s *Server) watch() (*checker.Watcher, error) {
	w, err := s.src.Watch(checker.Filter{}, 0)
	if err != nil {
		return nil, err
	}
	snap, rev := w.Snapshot()
	s.v.reset(snap, rev)
	return w, nil
}

// run follows the source's events until Close or the source closes; when
// it falls behind, it reloads from a snapshot.
func (s *Server) run(w *checker.Watcher) {
	defer close(s.done)
	// The checker closing ends the streams too: pulsed's graceful stop
	// waits for every call, and an ADS stream never ends by itself.
	defer s.cancel()
	var (
		buf     []checker.Event
		flush   = time.NewTimer(time.Hour)
		armed   bool
		refresh = time.NewTicker(panicRefresh)
	)
	flush.Stop()
	defer flush.Stop()
	defer refresh.Stop()
	// arm starts the coalescing window at the first change; with nothing
	// to push, the served resources are at the view's revision already.
	arm := func() {
		switch {
		case armed:
		case len(s.v.dirty) > 0:
			flush.Reset(s.coalesce)
			armed = true
		default:
			s.rev.Store(s.v.rev)
		}
	}
	for {
		if w == nil {
			var err error
			if w, err = s.watch(); err != nil {
				if errors.Is(err, checker.ErrClosed) {
					return
				}
				s.logger.Warn("cannot watch the checker; serving the last resources", "error", err, "retry", watchRetry.String())
				t := time.NewTimer(watchRetry)
				select {
				case <-s.stop:
					t.Stop()
					return
				case <-t.C:
				}
				continue
			}
			arm()
		}
		select {
		case <-s.stop:
			w.Close()
			return
		case <-flush.C:
			armed = false
			s.push()
			continue
		case <-refresh.C:
			s.v.ramps(time.Now()) // slow starts move their weights
			for g := range s.v.panicking {
				var held []string
				if gs := s.src.Groups(g); len(gs) == 1 {
					held = gs[0].Held
				}
				s.v.setHeld(g, held)
			}
			arm()
			continue
		case <-w.Ready():
		}
		evs, err := w.NextAppend(buf[:0], maxEvents)
		s.v.apply(evs)
		clear(evs) // drop the statuses' references until the next batch
		buf = evs
		switch {
		case errors.Is(err, checker.ErrClosed):
			s.push()
			return
		case err != nil:
			s.logger.Warn("fell behind the checker's events; reloading", "error", err)
			w.Close()
			w = nil
			continue
		}
		if rev, ok := w.Progress(); ok && rev > s.v.rev {
			s.v.rev = rev
		}
		arm()
	}
}

// push updates the caches with every dirty group: its assignment, when it
// differs from the one last pushed, and its cluster, route and listener
// when the group appeared or went.
func (s *Server) push() {
	var (
		eds           = map[string]types.Resource{}
		rest          = map[string]map[string]types.Resource{resourcev3.ClusterType: {}, resourcev3.RouteType: {}, resourcev3.ListenerType: {}}
		gone, goneCLA []string
	)
	for g := range s.v.dirty {
		eps, ok := s.v.endpoints(g)
		pub := s.published[g]
		if !ok {
			if pub != nil {
				delete(s.published, g)
				gone = append(gone, g)
				goneCLA = append(goneCLA, g)
			}
			continue
		}
		cla := loadAssignment(g, eps, time.Now())
		if pub == nil {
			l, err := listener(g)
			if err != nil {
				s.logger.Error("cannot build the group's listener; not serving it", "group", g, "error", err)
				continue
			}
			pub = &publishedGroup{}
			s.published[g] = pub
			rest[resourcev3.ClusterType][g] = cluster(g)
			rest[resourcev3.RouteType][g] = routeConfig(g)
			rest[resourcev3.ListenerType][g] = l
		}
		if pub.cla == nil || !proto.Equal(pub.cla, cla) {
			pub.cla = cla
			eds[g] = cla
		}
	}
	clear(s.v.dirty)
	n := len(eds) + len(goneCLA)
	// Clusters before their assignments, listeners before their routes:
	// the order a client asks in.
	for _, typ := range []string{resourcev3.ClusterType, resourcev3.ListenerType, resourcev3.RouteType} {
		if len(rest[typ]) > 0 || len(gone) > 0 {
			s.update(typ, rest[typ], gone)
			n += len(rest[typ]) + len(gone)
		}
	}
	if len(eds) > 0 || len(goneCLA) > 0 {
		s.update(resourcev3.EndpointType, eds, goneCLA)
	}
	s.pushes.Add(uint64(n))
	s.rev.Store(s.v.rev)
}

// update hands a type's changes to its cache, which answers the watches
// of the streams that asked for them. It never waits for a stream: a
// stream has at most one open watch per type, and its response channel
// has room for one response of every type.
func (s *Server) update(typ string, set map[string]types.Resource, gone []string) {
	if err := s.caches[typ].UpdateResources(set, gone); err != nil {
		// Only a resource whose version cannot be computed fails, and
		// these are plain protos.
		s.logger.Error("xds cache update failed", "type", typ, "error", err)
	}
}

// typeMux routes each watch to its type's cache, and rejects the types
// Pulse does not serve with a clear error.
type typeMux map[string]*cache.LinearCache

func (m typeMux) lookup(typ string) (*cache.LinearCache, error) {
	if c, ok := m[typ]; ok {
		return c, nil
	}
	return nil, status.Errorf(codes.InvalidArgument, "type_url %q: pulsed serves only %s, %s, %s and %s", clip(typ),
		resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType, resourcev3.EndpointType)
}

func (m typeMux) CreateWatch(req *cache.Request, sub cache.Subscription, ch chan cache.Response) (func(), error) {
	c, err := m.lookup(req.GetTypeUrl())
	if err != nil {
		return nil, err
	}
	return c.CreateWatch(req, sub, ch)
}

func (m typeMux) CreateDeltaWatch(req *cache.DeltaRequest, sub cache.Subscription, ch chan cache.DeltaResponse) (func(), error) {
	c, err := m.lookup(req.GetTypeUrl())
	if err != nil {
		return nil, err
	}
	return c.CreateDeltaWatch(req, sub, ch)
}

func (m typeMux) Fetch(ctx context.Context, req *cache.Request) (cache.Response, error) {
	return nil, status.Error(codes.Unimplemented, "pulsed serves xDS over ADS streams only")
}

// cpLogger passes go-control-plane's logs to slog: its debug and info
// lines at debug level, since they describe every watch. A line is cut at
// maxLogLine bytes: some list a client's resource names.
type cpLogger struct{ l *slog.Logger }

// maxLogLine bounds a go-control-plane log line.
const maxLogLine = 1024

func (c cpLogger) log(level slog.Level, format string, args []any) {
	if c.l.Enabled(context.Background(), level) {
		c.l.Log(context.Background(), level, clipN(fmt.Sprintf(format, args...), maxLogLine))
	}
}

func (c cpLogger) Debugf(format string, args ...any) { c.log(slog.LevelDebug, format, args) }
func (c cpLogger) Infof(format string, args ...any)  { c.log(slog.LevelDebug, format, args) }
func (c cpLogger) Warnf(format string, args ...any)  { c.log(slog.LevelWarn, format, args) }
func (c cpLogger) Errorf(format string, args ...any) { c.log(slog.LevelError, format, args) }
