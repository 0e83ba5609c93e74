package xds

import (
	"cmp"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/outlier"
)

// MetadataKey is the filter_metadata key under which each endpoint carries
// Pulse's view of it: "target" (the target's name, or names joined by ","
// when several targets share the address), "state" (healthy, suspect or
// unhealthy, as Pulse publishes it, joined like the names), "mode" when a
// target is not active (active, draining or maintenance, joined like the
// names), and, while the group's panic threshold holds the target,
// "panic_held": true and "reason", and for an outlier of its group
// "outlier": its reason, e.g. "degraded: p50 38ms vs group 4ms".
//
// A degraded outlier (GroupPolicy.outlier without enforce) is sent with
// HealthStatus DEGRADED and its lowered load_balancing_weight
// (outlier.Weight); an ejected one follows its state, UNHEALTHY.
//
// A DRAINING target is sent with HealthStatus DRAINING (Envoy sends it no
// new requests and lets those in flight finish), one in MAINTENANCE as
// UNHEALTHY.
const MetadataKey = "pulse"

// endpoint is one target as xDS sees it.
type endpoint struct {
	name  string
	group string
	host  string // "" when the target has no address xDS can carry
	port  uint32
	state checker.State
	held  bool         // the group's panic threshold holds it routable
	mode  checker.Mode // the administrative mode
	// The slow start in progress: the weight rises linearly from 0 at
	// rampStart to 100% at rampEnd; zero when none (see weight).
	rampStart, rampEnd time.Time
	// outlier is the target's outlier state; nil when it is not one.
	outlier *outlier.State
}

// degraded reports whether the endpoint is a degraded outlier.
func (e *endpoint) degraded() bool { return e.outlier != nil && !e.outlier.Ejected }

// newEndpoint derives a target's endpoint from its status.
func newEndpoint(st checker.Status) *endpoint {
	e := &endpoint{name: st.Spec.Name, group: st.Spec.Group, state: st.State, held: st.PanicHeld, mode: st.Spec.Admin().Mode, outlier: st.Outlier}
	if !st.SlowStartEnd.IsZero() {
		e.rampStart, e.rampEnd = st.LastTransition, st.SlowStartEnd
	}
	if host, port, ok := st.Spec.Probe.HostPort(); ok {
		e.host, e.port = host, uint32(port)
	}
	return e
}

// healthStatus maps Pulse's published state to xDS's: a target the panic
// threshold holds is HEALTHY, since Pulse decided to keep it in rotation,
// and a routable degraded outlier DEGRADED.
func (e *endpoint) healthStatus() corev3.HealthStatus {
	switch {
	case e.mode == checker.ModeDraining:
		return corev3.HealthStatus_DRAINING
	case e.degraded() && (e.held || e.state != checker.StateUnhealthy):
		return corev3.HealthStatus_DEGRADED
	case e.held:
		return corev3.HealthStatus_HEALTHY
	case e.state == checker.StateHealthy:
		return corev3.HealthStatus_HEALTHY
	case e.state == checker.StateSuspect:
		return corev3.HealthStatus_DEGRADED
	}
	return corev3.HealthStatus_UNHEALTHY
}

// weight returns the endpoint's load_balancing_weight at now: 1 to 100,
// its slow start's share, at most outlier.Weight for a degraded
// outlier, at least 1 (xDS refuses 0).
func (e *endpoint) weight(now time.Time) uint32 {
	w := uint32(100)
	if !e.rampEnd.IsZero() && now.Before(e.rampEnd) && e.rampEnd.After(e.rampStart) {
		w = max(1, uint32(100*max(0, now.Sub(e.rampStart))/e.rampEnd.Sub(e.rampStart)))
	}
	if e.degraded() {
		w = min(w, outlier.Weight)
	}
	return w
}

// rank orders health statuses from best to worst, for endpoints that share
// an address.
func rank(h corev3.HealthStatus) int {
	switch h {
	case corev3.HealthStatus_HEALTHY:
		return 0
	case corev3.HealthStatus_DEGRADED:
		return 1
	case corev3.HealthStatus_DRAINING:
		return 2
	}
	return 3
}

// loadAssignment builds a group's ClusterLoadAssignment from its endpoints:
// one locality of weight 1 (gRPC ignores a locality without a weight), its
// endpoints sorted by address. Targets without an address are left out.
// Targets that share an address make one endpoint, whose health is the
// worst of theirs: xDS clients reject an assignment that lists an address
// twice, and any of the checks failing says something is wrong there.
//
// While a target of the group is in its slow start or a degraded outlier,
// every endpoint has a load_balancing_weight: 100, or its lowered weight
// at now (the lowest of those sharing an address); otherwise none has one,
// and clients weigh them equally.
func loadAssignment(group string, eps []*endpoint, now time.Time) *endpointv3.ClusterLoadAssignment {
	type merged struct {
		host    string
		port    uint32
		health  corev3.HealthStatus
		names   []string
		states  []string
		modes   []string
		active  bool // every target of modes is active
		held    bool
		reasons []string
		outlier []string
		weight  uint32
	}
	ramping := false
	byAddr := map[string]*merged{}
	for _, e := range eps {
		if e.host == "" {
			continue
		}
		key := net.JoinHostPort(e.host, strconv.Itoa(int(e.port)))
		m := byAddr[key]
		if m == nil {
			m = &merged{host: e.host, port: e.port, health: e.healthStatus(), weight: 100, active: true}
			byAddr[key] = m
		}
		if w := e.weight(now); w < 100 {
			ramping = true
			m.weight = min(m.weight, w)
		}
		if h := e.healthStatus(); rank(h) > rank(m.health) {
			m.health = h
		}
		m.names = append(m.names, e.name)
		m.states = append(m.states, e.state.String())
		m.modes = append(m.modes, e.mode.String())
		m.active = m.active && e.mode == checker.ModeActive
		if o := e.outlier; o != nil {
			how := "degraded: "
			if o.Ejected {
				how = "ejected: "
			}
			m.outlier = append(m.outlier, e.name+" "+how+o.Reason)
		}
		if e.held {
			m.held = true
			m.reasons = append(m.reasons, "group "+group+"'s panic threshold holds "+e.name+" routable: its verdict is unhealthy, but marking it so would take more of the group out than the threshold allows")
		}
	}
	list := make([]*merged, 0, len(byAddr))
	for _, m := range byAddr {
		list = append(list, m)
	}
	slices.SortFunc(list, func(a, b *merged) int {
		return cmp.Or(cmp.Compare(a.host, b.host), cmp.Compare(a.port, b.port))
	})
	lbs := make([]*endpointv3.LbEndpoint, len(list))
	for i, m := range list {
		slices.Sort(m.names) // eps is in name order already; keeps the output stable regardless
		md := map[string]any{
			"target": strings.Join(m.names, ","),
			"state":  strings.Join(m.states, ","),
		}
		if !m.active {
			md["mode"] = strings.Join(m.modes, ",")
		}
		if len(m.outlier) > 0 {
			md["outlier"] = strings.Join(m.outlier, "; ")
		}
		if m.held {
			md["panic_held"] = true
			md["reason"] = strings.Join(m.reasons, "; ")
		}
		s, _ := structpb.NewStruct(md) // strings and a bool: never fails
		lbs[i] = &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Protocol:      corev3.SocketAddress_TCP,
					Address:       m.host,
					PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: m.port},
				}}},
			}},
			HealthStatus: m.health,
			Metadata:     &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{MetadataKey: s}},
		}
	}
	if ramping {
		for i, m := range list {
			lbs[i].LoadBalancingWeight = wrapperspb.UInt32(m.weight)
		}
	}
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: group,
		Endpoints: []*endpointv3.LocalityLbEndpoints{{
			Locality:            &corev3.Locality{},
			LbEndpoints:         lbs,
			LoadBalancingWeight: wrapperspb.UInt32(1),
		}},
	}
}

// adsSource is the config source of every resource that names another: the
// same ADS stream.
func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}
}

// cluster builds a group's Cluster: EDS over ADS, round robin.
func cluster(group string) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 group,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource()},
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
	}
}

// routeConfig builds a group's RouteConfiguration: every request to the
// group's cluster.
func routeConfig(group string) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{
		Name: group,
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    group,
			Domains: []string{"*"},
			Routes: []*routev3.Route{{
				Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: ""}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: group}}},
			}},
		}},
	}
}

// listener builds a group's Listener for proxyless gRPC: an api_listener
// whose HttpConnectionManager takes its routes over RDS, named after the
// group, so that a client dialing xds:///GROUP finds it. It ends with the
// router filter, which gRPC requires last.
func listener(group string) (*listenerv3.Listener, error) {
	router, err := anypb.New(&routerv3.Router{})
	if err != nil {
		return nil, err
	}
	hcm, err := anypb.New(&hcmv3.HttpConnectionManager{
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    adsSource(),
			RouteConfigName: group,
		}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       "envoy.filters.http.router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router},
		}},
	})
	if err != nil {
		return nil, err
	}
	return &listenerv3.Listener{
		Name:        group,
		ApiListener: &listenerv3.ApiListener{ApiListener: hcm},
	}, nil
}
