package discovery

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/discovery/targetgroup"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"
	"google.golang.org/protobuf/proto"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server"
)

// MaxTargetsPerGroup is the most targets one refresh of a group's sources
// may hold. A larger answer is refused whole and the last good set stays.
const MaxTargetsPerGroup = 10000

// NameLabel is the label a relabel rule sets to choose a target's name
// (after the group's name and a '-'); without it the name is made from the
// address.
const NameLabel = "__pulse_name__"

// SchemeLabel is the label that chooses an HTTP template's scheme (http
// unless a relabel rule or the source sets it to https), as Prometheus's
// __scheme__.
const SchemeLabel = model.SchemeLabel

// Source returns the source a group's targets are marked with.
func Source(group string) string { return server.DiscoverySource(group) }

// Targets turns one answer of a group's sources (the target groups of all
// its SD configs) into the specs of its targets: each discovered label set
// is relabeled, named, and given the template with its address, then
// validated with the daemon's defaults d as AddTarget validates.
//
// A set larger than MaxTargetsPerGroup is refused whole (an error and no
// specs). A target that relabeling drops is left out; one that fails
// validation or shares a name with an earlier one is left out and named in
// skipped.
func (g *Group) Targets(tgs []*targetgroup.Group, d checker.Defaults) (specs []checker.Spec, skipped []error, err error) {
	n := 0
	for _, tg := range tgs {
		if tg != nil {
			n += len(tg.Targets)
		}
	}
	if n > MaxTargetsPerGroup {
		return nil, nil, fmt.Errorf("group %q: the sources answered %d targets, more than the maximum of %d; the answer is refused and the last good set stays", g.Name, n, MaxTargetsPerGroup)
	}
	seen := map[string]bool{}
	for _, tg := range tgs {
		if tg == nil {
			continue
		}
		for _, ls := range tg.Targets {
			lb := labels.NewBuilder(labels.EmptyLabels())
			for k, v := range tg.Labels {
				lb.Set(string(k), string(v))
			}
			for k, v := range ls {
				lb.Set(string(k), string(v))
			}
			if lb.Get(SchemeLabel) == "" {
				lb.Set(SchemeLabel, "http")
			}
			if !relabel.ProcessBuilder(lb, g.RelabelConfigs...) {
				continue
			}
			spec, err := g.spec(lb, d)
			if err != nil {
				skipped = append(skipped, err)
				continue
			}
			if seen[spec.Name] {
				skipped = append(skipped, fmt.Errorf("target %q (source %s): another discovered target has its name; give distinct names with %s", spec.Name, tg.Source, NameLabel))
				continue
			}
			seen[spec.Name] = true
			specs = append(specs, spec)
		}
	}
	return specs, skipped, nil
}

// spec builds and validates one discovered target.
func (g *Group) spec(lb *labels.Builder, d checker.Defaults) (checker.Spec, error) {
	addr := lb.Get(model.AddressLabel)
	if addr == "" {
		return checker.Spec{}, errors.New("a discovered target has no __address__ after relabeling")
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return checker.Spec{}, fmt.Errorf("address %q: must be host:port: %w", addr, err)
	}
	suffix := lb.Get(NameLabel)
	if suffix == "" {
		suffix = strings.NewReplacer("[", "", "]", "").Replace(addr)
	}
	name := g.Name + "-" + suffix
	t := proto.CloneOf(g.Template)
	t.Name = name
	switch {
	case t.GetTcp() != nil:
		t.GetTcp().Address = addr
	case t.GetGrpc() != nil:
		t.GetGrpc().Address = addr
	case t.GetHttp() != nil:
		scheme := lb.Get(SchemeLabel)
		if scheme != "http" && scheme != "https" {
			return checker.Spec{}, fmt.Errorf("target %q: %s must be http or https, got %q", name, SchemeLabel, scheme)
		}
		t.GetHttp().Url = scheme + "://" + addr + t.GetHttp().GetUrl()
	}
	spec, err := server.SpecFromProto(t)
	if err == nil {
		spec = spec.WithDefaults(d)
		spec.Source = Source(g.Name)
		err = spec.Validate()
	}
	if err != nil {
		return checker.Spec{}, fmt.Errorf("target %q: %w", name, server.ScrubTargetError(t, err))
	}
	return spec, nil
}
