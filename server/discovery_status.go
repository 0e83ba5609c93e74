package server

import (
	"context"
	"time"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// DiscoveryGroupStatus is one discovery group's state, as ListDiscovery shows
// it. It is a value; its strings hold no secret of the group's sources
// (whoever fills it redacts them).
type DiscoveryGroupStatus struct {
	// Name is the group's name; Source its targets' Spec.Source.
	Name, Source string
	// Targets is how many targets the last applied answer held.
	Targets int
	// LastApply is when an answer was last applied; zero before the first.
	LastApply time.Time
	// LastError is the last answer's refusal, or the targets it left out;
	// empty when it applied whole. ErrorSince is when answers started
	// having one; zero when LastError is empty.
	LastError  string
	ErrorSince time.Time
	// Sources are the group's SD configs, in the configuration's order.
	Sources []DiscoverySourceStatus
	// Leader is the replica that runs the group, with replicas on etcd;
	// empty with one pulsed, or while no replica leads. On a replica that
	// does not lead the group, only Name, Source, Sources and Leader are
	// set: ask the leader for the rest.
	Leader string
}

// DiscoverySourceStatus is one SD config of a discovery group.
type DiscoverySourceStatus struct {
	// Name is "MECHANISM_sd N" ("http_sd 0"); Detail what it reads (files,
	// a URL without credentials or query, DNS names).
	Name, Detail string
	// LastRefresh is when it last answered; zero before its first answer.
	LastRefresh time.Time
	// Targets is how many targets its last good answer held.
	Targets int
	// LastError is why it fails, while it does (its last good set stays);
	// ErrorSince is when it started failing. Both are zero when its last
	// refresh succeeded.
	LastError  string
	ErrorSince time.Time
}

// DiscoveryStatus reports the discovery groups a daemon runs, sorted by
// name. It must be safe for concurrent use and must not block on I/O.
type DiscoveryStatus interface {
	DiscoveryGroups() []DiscoveryGroupStatus
}

// WithDiscovery makes ListDiscovery answer with d's groups. Without it
// ListDiscovery answers no group.
func WithDiscovery(d DiscoveryStatus) Option {
	return func(s *Server) { s.discovery = d }
}

// ListDiscovery returns the discovery groups and their sources.
func (s *Server) ListDiscovery(context.Context, *pb.ListDiscoveryRequest) (*pb.ListDiscoveryResponse, error) {
	out := &pb.ListDiscoveryResponse{}
	if s.discovery == nil {
		return out, nil
	}
	for _, g := range s.discovery.DiscoveryGroups() {
		pg := &pb.DiscoveryGroup{
			Name:       g.Name,
			Source:     g.Source,
			Targets:    int32(g.Targets),
			LastApply:  timestamp(g.LastApply),
			LastError:  g.LastError,
			ErrorSince: timestamp(g.ErrorSince),
			Leader:     g.Leader,
		}
		for _, src := range g.Sources {
			pg.Sources = append(pg.Sources, &pb.DiscoverySource{
				Name:        src.Name,
				Detail:      src.Detail,
				LastRefresh: timestamp(src.LastRefresh),
				Targets:     int32(src.Targets),
				LastError:   src.LastError,
				ErrorSince:  timestamp(src.ErrorSince),
			})
		}
		out.Groups = append(out.Groups, pg)
	}
	return out, nil
}
