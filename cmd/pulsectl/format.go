package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// stateName is a state as people write it: "healthy", "unhealthy",
// "suspect", or "-" when unset.
func stateName(s pb.State) string {
	switch s {
	case pb.State_STATE_HEALTHY:
		return "healthy"
	case pb.State_STATE_UNHEALTHY:
		return "unhealthy"
	case pb.State_STATE_SUSPECT:
		return "suspect"
	default:
		return "-"
	}
}

// stateText is a target's state with what qualifies it, so that a policy
// that holds a target is never hidden behind a plain state: "healthy
// (held: panic in edge)", "unhealthy (flapping)", "healthy (carried
// over)".
func stateText(st *pb.TargetStatus) string {
	var why []string
	if st.GetPanicHeld() {
		why = append(why, "held: panic in "+st.GetSpec().GetGroup())
	}
	if st.GetFlapping() {
		why = append(why, "flapping")
	}
	if carriedOver(st) {
		why = append(why, "carried over")
	}
	if o := st.GetOutlier(); o != nil {
		why = append(why, map[bool]string{false: "outlier: degraded", true: "outlier: ejected"}[o.GetEjected()])
	}
	if len(why) == 0 {
		return stateName(st.GetState())
	}
	return stateName(st.GetState()) + " (" + strings.Join(why, "; ") + ")"
}

// carriedOver reports whether st is shown as carried over: its state is
// from before pulsed restarted and a probe is due to replace it. A target
// in maintenance or quarantined is not probed, so it would show "carried
// over" until it leaves that, as if pulsed were stuck; the API's
// carried_over still says it.
func carriedOver(st *pb.TargetStatus) bool {
	return st.GetCarriedOver() && st.GetQuarantined() == "" && st.GetMode() != pb.Mode_MODE_MAINTENANCE
}

// stateFilters are what ls --state takes, and whether a status matches.
var stateFilters = map[string]func(*pb.TargetStatus) bool{
	"healthy":      func(st *pb.TargetStatus) bool { return st.GetState() == pb.State_STATE_HEALTHY },
	"unhealthy":    func(st *pb.TargetStatus) bool { return st.GetState() == pb.State_STATE_UNHEALTHY },
	"suspect":      func(st *pb.TargetStatus) bool { return st.GetState() == pb.State_STATE_SUSPECT },
	"routable":     func(st *pb.TargetStatus) bool { return st.GetRoutable() },
	"not-routable": func(st *pb.TargetStatus) bool { return !st.GetRoutable() },
	"held":         func(st *pb.TargetStatus) bool { return st.GetPanicHeld() },
	"flapping":     func(st *pb.TargetStatus) bool { return st.GetFlapping() },
	"carried-over": carriedOver, // as the state shows it
	"quarantined":  func(st *pb.TargetStatus) bool { return st.GetQuarantined() != "" },
	"outlier":      func(st *pb.TargetStatus) bool { return st.GetOutlier() != nil },
}

// modelName is a model as the add flag takes it.
func modelName(m pb.Model) string {
	if m == pb.Model_MODEL_THREE_STATE {
		return "three_state"
	}
	return "rise_fall"
}

// redacted stands for a header's value in what pulsectl prints, as it does
// in what pulsed answers.
const redacted = "<redacted>"

// probeSummary describes a target's probe in one phrase, e.g.
// "http GET http://192.0.2.5:8080/healthz, headers Authorization=<redacted>",
// "tcp 192.0.2.5:5432",
// "grpc 192.0.2.5:50051 service pulse.v1.HealthChecker (tls)",
// "dns A api.internal at 192.0.2.2:53".
func probeSummary(t *pb.Target) string {
	s := probeCore(t)
	if hs := t.GetHttp().GetHeaders(); len(hs) > 0 {
		// Names only: values are often credentials. pulsed sends them
		// redacted; an older one might not.
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(hs)) {
			kv = append(kv, k+"="+redacted)
		}
		s += ", headers " + strings.Join(kv, " ")
	}
	return s
}

// probeCore is probeSummary without the headers, which specChanges names
// one by one when they are added or removed.
func probeCore(t *pb.Target) string {
	switch p := t.GetProbe().(type) {
	case *pb.Target_Http:
		method := p.Http.GetMethod()
		if method == "" {
			method = "GET"
		}
		s := "http " + method + " " + p.Http.GetUrl()
		if codes, ranges := p.Http.GetExpectedStatus(), p.Http.GetExpectedStatusRanges(); len(codes) > 0 || len(ranges) > 0 {
			var all []string
			if len(codes) > 0 {
				all = append(all, joinInts(codes))
			}
			s += ", expect " + strings.Join(append(all, ranges...), ",")
		}
		if b := p.Http.GetBodyContains(); b != "" {
			s += `, body contains "` + b + `"` // escaped, with the rest, before printing
		}
		if b := p.Http.GetBodyRegex(); b != "" {
			s += fmt.Sprintf(", body matches /%s/", b)
		}
		if p.Http.GetTls() != nil {
			s += " (tls options)"
		}
		return s
	case *pb.Target_Tcp:
		s := "tcp " + p.Tcp.GetAddress()
		if n := len(p.Tcp.GetSteps()); n > 0 {
			s += fmt.Sprintf(", %d %s", n, plural(n, "step"))
		}
		if p.Tcp.GetTls() != nil {
			s += " (tls)"
		}
		return s
	case *pb.Target_Dns:
		typ := p.Dns.GetType()
		if typ == "" {
			typ = "A"
		}
		return "dns " + typ + " " + p.Dns.GetName() + " at " + p.Dns.GetServer()
	case *pb.Target_Grpc:
		s := "grpc " + p.Grpc.GetAddress()
		if svc := p.Grpc.GetService(); svc != "" {
			s += " service " + svc
		}
		if p.Grpc.GetTls() || p.Grpc.GetTlsOptions() != nil {
			s += " (tls)"
		}
		return s
	default:
		return "no probe"
	}
}

// scheduleSummary describes a target's schedule and thresholds, e.g.
// "every 2s, timeout 1s, rise 2, fall 3, rise_fall".
func scheduleSummary(t *pb.Target) string {
	s := fmt.Sprintf("every %v, timeout %v, rise %d, fall %d, %s",
		t.GetInterval().AsDuration(), t.GetTimeout().AsDuration(), t.GetRise(), t.GetFall(), modelName(t.GetModel()))
	if t.GetMaxLatency() != nil {
		s += fmt.Sprintf(", max latency %v", t.GetMaxLatency().AsDuration())
	}
	if k := t.GetVantages(); k > 1 {
		s += ", " + vantagesText(k, t.GetQuorum())
	}
	return s
}

// vantagesText is a number of vantages and their quorum: "3 vantages,
// quorum 2 (majority)".
func vantagesText(k, q int32) string {
	if q == 0 {
		return fmt.Sprintf("%d vantages, quorum %d (majority)", k, k/2+1)
	}
	return fmt.Sprintf("%d vantages, quorum %d", k, q)
}

// verdictsText lists the vantages' verdicts as the checker's reasons do:
// "zone-a=healthy zone-b=unhealthy(connection refused) zone-c=none".
func verdictsText(vs []*pb.VantageVerdict) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		st := "none"
		if v.GetState() != pb.State_STATE_UNSPECIFIED {
			st = stateName(v.GetState())
		}
		parts[i] = v.GetLabel() + "=" + st
		if e := v.GetError(); e != "" {
			parts[i] += "(" + e + ")"
		}
	}
	return strings.Join(parts, " ")
}

func joinInts(v []int32) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

// streak describes a target's current streak and, when it is heading for
// a transition, how far it has got: "pass 1/2" is one pass of the two
// (rise) an unhealthy or suspect target needs to become healthy, "fail 2/3"
// two failures of the three (fall) that make a healthy or suspect target
// unhealthy. A streak that changes nothing has no denominator: "pass 7" on
// a healthy target, "pass 3" on a draining one whose streak has reached
// rise without moving its state, "fail 1" on one the panic threshold or
// flap damping holds.
// "-" before the first probe.
func streak(st *pb.TargetStatus) string {
	spec := st.GetSpec()
	moving := !st.GetPanicHeld() && !st.GetFlapping() // a held target's streak moves nothing
	switch {
	case st.GetQuarantined() != "":
		return "quarantined"
	case st.GetPassStreak() > 0 && st.GetState() != pb.State_STATE_HEALTHY && st.GetPassStreak() < spec.GetRise() && moving:
		return fmt.Sprintf("pass %d/%d", st.GetPassStreak(), spec.GetRise())
	case st.GetPassStreak() > 0:
		return fmt.Sprintf("pass %d", st.GetPassStreak())
	case st.GetFailStreak() > 0 && st.GetState() != pb.State_STATE_UNHEALTHY && st.GetFailStreak() < spec.GetFall() && moving:
		return fmt.Sprintf("fail %d/%d", st.GetFailStreak(), spec.GetFall())
	case st.GetFailStreak() > 0:
		return fmt.Sprintf("fail %d", st.GetFailStreak())
	default:
		return "-"
	}
}

// resultLatency is a last result's latency as latency prints it, and
// false for a passive outcome reported without one (ReportOutcome's
// latency is optional, zero when unknown), which has no latency to show.
func resultLatency(r *pb.ProbeResult) (string, bool) {
	d := r.GetLatency().AsDuration()
	if r.GetPassive() && d <= 0 {
		return "", false
	}
	return latency(d), true
}

// latency rounds d for a person: 850µs, 1.2ms, 612ms, 1.5s.
func latency(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < 10*time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(10 * time.Millisecond).String()
	}
}

// age is how long ago t was, rounded to the second ("4m12s"); "-" when t
// is unset.
func age(t *timestamppb.Timestamp, now time.Time) string {
	if t == nil {
		return "-"
	}
	return max(0, now.Sub(t.AsTime())).Round(time.Second).String()
}

// timeText formats t in RFC 3339 in the local time zone.
func timeText(t time.Time) string { return t.Local().Format(time.RFC3339) }

// orDash returns s, or "-" when s is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// truncate shortens s to at most n runes, ending it with "…" when cut, so
// that one long error does not widen a whole table.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
