package web

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server"
)

// The severities of a target, most severe first: the page's default order.
const (
	sevQuarantined = iota // not probed: its stored spec is refused
	sevFlapping           // held unhealthy by flap damping
	sevUnhealthy          // not routable
	sevHeld               // unhealthy by its results, held routable by its group's panic
	sevSuspect            // three_state, between the two, or a degraded outlier
	sevFalling            // healthy with failures on its way down
	sevTakenOut           // draining or in maintenance: out on purpose
	sevCarried            // the state from before a restart, no fresh result yet
	sevHealthy
)

// severity ranks st for the page's default order.
func severity(st checker.Status) int {
	switch {
	case st.Quarantined != "":
		return sevQuarantined
	case st.Flapping:
		return sevFlapping
	case st.Spec.Admin().Mode != checker.ModeActive:
		// Out of traffic because an operator said so: below every
		// failure, so that real trouble stays at the top.
		return sevTakenOut
	case !st.Routable:
		return sevUnhealthy
	case st.PanicHeld:
		return sevHeld
	case st.State == checker.StateSuspect, st.Outlier != nil:
		return sevSuspect
	case st.FailStreak > 0:
		return sevFalling
	case st.CarriedOver:
		return sevCarried
	}
	return sevHealthy
}

// probeText says what a target's probe reaches, for the page's probe
// column.
func probeText(s checker.Spec) string {
	switch p := s.Probe; {
	case p.HTTP != nil:
		method := p.HTTP.Method
		if method == "" {
			method = "GET"
		}
		return method + " " + server.ReadURL(p.HTTP.URL)
	case p.TCP != nil:
		return p.TCP.Address
	case p.GRPC != nil:
		t := p.GRPC.Address
		if p.GRPC.Service != "" {
			t += " " + p.GRPC.Service
		}
		if p.GRPC.TLS {
			t += " (tls)"
		}
		return t
	case p.DNS != nil:
		t := p.DNS.Type
		if t == "" {
			t = "A"
		}
		return t + " " + p.DNS.Name + " @" + p.DNS.Server
	}
	return ""
}

// uptime is the fraction of results that passed.
func uptime(results []checker.Result) float64 {
	pass := 0
	for _, r := range results {
		if r.Pass {
			pass++
		}
	}
	return float64(pass) / float64(len(results))
}

// sortKeys are the orders /api/targets takes in its sort parameter.
var sortKeys = []string{"severity", "name", "group", "probe", "state", "latency", "since", "uptime"}

// sortStatuses orders list by key (one of sortKeys), then by name;
// desc reverses the key's order (not the names'). recent gives a
// target's recent results, for "uptime".
func sortStatuses(list []checker.Status, key string, desc bool, recent func(string) []checker.Result) error {
	if !slices.Contains(sortKeys, key) {
		return fmt.Errorf("sort: want one of %s, got %q", strings.Join(sortKeys, ", "), key)
	}
	var up map[string]float64
	if key == "uptime" {
		up = make(map[string]float64, len(list))
		for _, st := range list {
			up[st.Spec.Name] = -1 // no results: after every target that has some
			if rs := recent(st.Spec.Name); len(rs) > 0 {
				up[st.Spec.Name] = uptime(rs)
			}
		}
	}
	by := func(a, b checker.Status) int {
		switch key {
		case "severity":
			return cmp.Compare(severity(a), severity(b))
		case "name":
			return cmp.Compare(a.Spec.Name, b.Spec.Name)
		case "group":
			return cmp.Compare(a.Spec.Group, b.Spec.Group)
		case "probe":
			return cmp.Compare(probeText(a.Spec), probeText(b.Spec))
		case "state":
			return cmp.Compare(a.State.String(), b.State.String())
		case "latency":
			return cmp.Compare(lastLatency(a), lastLatency(b))
		case "since": // the most recent change first
			return b.LastTransition.Compare(a.LastTransition)
		case "uptime": // the lowest first
			return cmp.Compare(up[a.Spec.Name], up[b.Spec.Name])
		}
		return 0
	}
	slices.SortStableFunc(list, func(a, b checker.Status) int {
		c := by(a, b)
		if desc {
			c = -c
		}
		return cmp.Or(c, cmp.Compare(a.Spec.Name, b.Spec.Name))
	})
	return nil
}

// lastLatency is the latency of st's last result; -1 without one.
func lastLatency(st checker.Status) time.Duration {
	if st.LastResult == nil {
		return -1
	}
	return st.LastResult.Latency
}
